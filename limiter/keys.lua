-- One key's own limit (rate.per_key, or a destination's adaptive limit)
-- shared by every replica: GCRA, the state in one hash per key, and a
-- caller may lease the slots of up to a short span ahead. See SharedKeys
-- in keys.go.
--
-- KEYS[1]  the key's hash: tat (theoretical arrival time, server
--          microseconds) and limit (the key's rate in force, slots per
--          second, once a caller gave one)
-- ARGV[1]  ceiling: the configured limit; a stored rate above it counts as
--          it. ARGV[2] burst, ARGV[3] "1" for token mode (tolerance
--          (burst-1)/limit), "0" for leaky
-- ARGV[4]  the caller's rate: the rate it last heard, written only when
--          the hash holds none (the key expired, Redis lost it); or with
--          ARGV[5], a SetRate's new rate
-- ARGV[5]  "" for no SetRate; else the rate the caller last heard, which
--          its SetRate moves: a lower rate is always written, a higher one
--          only while the hash still holds that rate (or none), so that a
--          rise computed from a stale rate never undoes another replica's
--          push-back
-- ARGV[6]  want: how many slots to lease, at least 1
-- ARGV[7]  ahead: how many microseconds before its time the first of them
--          may be leased; 0 takes a slot only once it has come
--
-- Returns {n, first, wait, limit}. n is the slots leased, 0 when the next
-- slot comes more than ahead from now; slot i (0 <= i < n) comes first +
-- i * 1e6/limit microseconds from now, or now if that is earlier. wait is
-- the microseconds until the slot after them comes; limit the rate in
-- force. Numbers as strings, because Redis truncates Lua numbers in
-- replies to integers.

local ceiling = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local rate = tonumber(ARGV[4])
local from = tonumber(ARGV[5])
local want = tonumber(ARGV[6])
local ahead = tonumber(ARGV[7])
if not (ceiling and ceiling > 0 and ceiling < math.huge and burst and burst >= 1 and burst < math.huge
    and rate and rate > 0 and rate < math.huge and want and want >= 1 and want <= 1000
    and ahead and ahead >= 0 and ahead <= 1e6) then
  return redis.error_reply('ERR shaper limiter: bad per-key call ' .. tostring(ARGV[1]) .. ' ' .. tostring(ARGV[2]) .. ' ' ..
    tostring(ARGV[4]) .. ' ' .. tostring(ARGV[6]) .. ' ' .. tostring(ARGV[7]))
end
want = math.floor(want)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local st = redis.call('HMGET', KEYS[1], 'tat', 'limit')
local tat = tonumber(st[1])
local stored = tonumber(st[2])
if not (tat and tat > -math.huge and tat < math.huge) or tat < now then
  tat = now
end
-- Comparisons are written so that nil and NaN fail them.
if not (stored and stored > 0 and stored < math.huge) then
  stored = nil
end
local limit = stored or rate
if ARGV[5] ~= '' and (not stored or rate <= stored or (from and math.abs(stored - from) <= 1e-9 * stored)) then
  limit = rate
end
limit = math.min(limit, ceiling)
if stored and limit ~= math.min(stored, ceiling) and tat > now then
  -- Slots still owed keep their number and are re-spaced at the new
  -- interval, as Limiter.SetRate does locally.
  tat = now + (tat - now) * math.min(stored, ceiling) / limit
end
local interval = 1000000 / limit
local tau = 0
if ARGV[3] == '1' then
  tau = (math.floor(burst) - 1) * interval
end
local lim = string.format('%.17g', limit)
local first = tat - tau - now
if first > ahead then
  if limit ~= stored then
    redis.call('HSET', KEYS[1], 'limit', lim)
    redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now + tau) / 1000) + 1000)
  end
  local f = string.format('%.17g', first)
  return {0, f, f, lim}
end
tat = tat + want * interval
redis.call('HSET', KEYS[1], 'tat', string.format('%.17g', tat), 'limit', lim)
-- Kept until the key's limiter is as new (a full refill), and a second
-- more: an expired key is a new one, whose first caller writes the rate it
-- last heard.
redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now + tau) / 1000) + 1000)
return {want, string.format('%.17g', first), string.format('%.17g', math.max(tat - tau - now, 0)), lim}
