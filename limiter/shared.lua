-- Shared GCRA: the state of one global limit, kept in one hash, updated
-- atomically. See Shared in shared.go for the model.
--
-- KEYS[1]  the hash: tat (theoretical arrival time, server microseconds),
--          limit (slots per second, the limit in force), burst (slots),
--          ceiling (the fleet's rate.limit: the most limit may be)
-- ARGV[1]  want: how many consecutive slots to reserve (0 reads and
--          initialises only)
-- ARGV[2]  "1" for token mode (tolerance (burst-1)/limit), "0" for leaky
--          (no tolerance)
-- ARGV[3]  limit and ARGV[4] burst: written when the hash holds none, or
--          when ARGV[5] says so
-- ARGV[5]  "<what>:<c>", c the caller's ceiling: written when the hash
--          holds none. What the call writes: "keep", nothing; "limit",
--          ARGV[3] as the limit in force, at most the ceiling
--          (Shared.Adapt); "ceiling", c as the ceiling and ARGV[3], at
--          most c, as the limit (a SetRate, perhaps followed by an Adapt)
-- ARGV[6]  "<id>:<given>": the caller's id, and how many leased slots it
--          let pass unused since its last call, given back (leaky mode
--          only). One argument: Redis refuses a command of more than ten
--          before AUTH with a protocol error, which would hide the NOAUTH.
--
-- The hash also holds, in leaky mode: seen:<id>, when each replica last
-- called (server microseconds; dropped after a second without a call);
-- credit, the slots given back and not yet handed out again, as of
-- credit_at (dropped a second after the last give-back; at most what the
-- fleet hands out in a second, 10 * (replicas - 1)); and extra_at, the
-- time of the last slot handed out again. A lease may take one slot of
-- credit more than the schedule holds (want slots in want-1 intervals),
-- at most one every 100ms/(replicas-1), so that any 100 ms holds at most
-- limit/10 + replicas; a fleet of one takes none.
--
-- Returns {seconds, microseconds, base, limit, ceiling, burst, extra,
-- replicas}: the server time from TIME, base in server microseconds and
-- extra (0 or 1) such that slot i of the want reserved goes at max(now,
-- base + i*span/want), where span is (want-extra)*1e6/limit; and the
-- replicas that called within a second, the caller included (0 in token
-- mode or without an id: not counted). Floats travel as strings, because
-- Redis truncates Lua numbers in replies to integers.

local key = KEYS[1]
local want = tonumber(ARGV[1])
if not want or want < 0 then want = 0 end
if want > 100000 then want = 100000 end
local token = ARGV[2] == '1'
local what, newceiling = string.match(ARGV[5] or '', '^(%a+):(.+)$')
newceiling = tonumber(newceiling)
if not (newceiling and newceiling > 0 and newceiling < math.huge and
    (what == 'keep' or what == 'limit' or what == 'ceiling')) then
  return redis.error_reply('ERR shaper limiter: bad write argument ' .. tostring(ARGV[5]))
end
local setrate = what ~= 'keep'
local newlimit = tonumber(ARGV[3])
local newburst = tonumber(ARGV[4])
if not (newlimit and newlimit > 0 and newlimit < math.huge) then
  return redis.error_reply('ERR shaper limiter: bad limit argument ' .. tostring(ARGV[3]))
end
if not (newburst and newburst >= 1 and newburst < math.huge) then
  return redis.error_reply('ERR shaper limiter: bad burst argument ' .. tostring(ARGV[4]))
end
newburst = math.floor(newburst)

-- The server's clock, so that replicas' clocks never matter.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- HMGET fails with WRONGTYPE if someone stored something else at key; the
-- error reaches the caller, which falls back.
local st = redis.call('HMGET', key, 'tat', 'limit', 'burst', 'ceiling')
local tat = tonumber(st[1])
local limit = tonumber(st[2])
local burst = tonumber(st[3])
local ceiling = tonumber(st[4])

-- Comparisons are written so that nil and NaN fail them: a field that is
-- missing or garbage counts as absent.
local valid = limit and limit > 0 and limit < math.huge and burst and burst >= 1 and burst < math.huge
if not (tat and tat > -math.huge and tat < math.huge) then
  tat = now
end
if what == 'ceiling' then
  ceiling = newceiling
elseif not (ceiling and ceiling > 0 and ceiling < math.huge) then
  -- First writer wins: only a hash without a ceiling takes the caller's,
  -- or the limit it holds when higher (written without a ceiling).
  ceiling = newceiling
  if valid then ceiling = math.max(limit, newceiling) end
end
if setrate then
  newlimit = math.min(newlimit, ceiling)
  -- Slots still owed at now keep their number and are re-spaced at the new
  -- interval, as Limiter.SetRate does locally. A tat in the past means a
  -- full bucket at any rate.
  if valid and tat > now then
    tat = now + (tat - now) * limit / newlimit
  end
  limit, burst = newlimit, newburst
elseif not valid then
  -- First writer wins: only a hash without a limit takes the caller's.
  limit, burst = newlimit, newburst
end
burst = math.floor(burst)

local interval = 1000000 / limit
local tau = 0
if token then
  tau = (burst - 1) * interval
end
if tat < now then
  tat = now
end
-- GCRA applied want times at the same now: slot i goes at
-- max(now, tat + i*interval - tau), and tat moves by want intervals, or by
-- want-1 when the lease takes a slot given back.
local base = tat - tau
local extra, replicas = 0, 0
local id, given = string.match(ARGV[6] or '', '^(.+):(%d+)$')
if not token and id then
  local fields = redis.call('HGETALL', key)
  local credit, creditAt, extraAt = 0, 0, 0
  replicas = 1
  for i = 1, #fields, 2 do
    local f, v = fields[i], tonumber(fields[i + 1])
    if f == 'credit' then credit = v or 0
    elseif f == 'credit_at' then creditAt = v or 0
    elseif f == 'extra_at' then extraAt = v or 0
    elseif string.sub(f, 1, 5) == 'seen:' and f ~= 'seen:' .. id then
      if v and now - v <= 1000000 then
        replicas = replicas + 1
      else
        redis.call('HDEL', key, f)
      end
    end
  end
  if now - creditAt > 1000000 then credit = 0 end
  given = tonumber(given)
  if not (given and given >= 0 and given < math.huge) then given = 0 end
  given = math.floor(given)
  if given >= 1 then
    -- At most what the fleet can hand out in a second: slots given back
    -- by a fleet that had too few messages to use them must not make a
    -- burst once it has more.
    credit = math.min(credit + given, 10 * (replicas - 1))
    creditAt = now
  end
  if want >= 1 and credit >= 1 and replicas >= 2 and base - extraAt > 100000 / (replicas - 1) then
    extra, credit, extraAt = 1, credit - 1, base
  end
  redis.call('HSET', key, 'seen:' .. id, string.format('%.17g', now),
    'credit', string.format('%d', credit), 'credit_at', string.format('%.17g', creditAt),
    'extra_at', string.format('%.17g', extraAt))
end
tat = tat + (want - extra) * interval

redis.call('HSET', key,
  'tat', string.format('%.17g', tat),
  'limit', string.format('%.17g', limit),
  'burst', string.format('%d', burst),
  'ceiling', string.format('%.17g', ceiling))
-- Keep the key while slots are owed plus longer than a full refill, and at
-- least ten seconds: an expired key is a full bucket, which is only right
-- once a full refill has passed.
local ttl = (tat - now) + math.max(2 * burst * interval, 10000000)
redis.call('PEXPIRE', key, math.min(math.ceil(ttl / 1000), 100000000000))

return {t[1], t[2], string.format('%.17g', base), string.format('%.17g', limit), string.format('%.17g', ceiling), burst, extra, replicas}
