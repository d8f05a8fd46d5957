-- One key's own limit (rate.per_key) shared by every replica: GCRA with
-- Allow's semantics, the state in one hash per key. See SharedKeys in
-- keys.go.
--
-- KEYS[1]  the key's hash: tat (theoretical arrival time, server
--          microseconds)
-- ARGV[1]  limit (slots per second), ARGV[2] burst, ARGV[3] "1" for token
--          mode (tolerance (burst-1)/limit), "0" for leaky
--
-- Returns {1, wait} when the slot had come and is taken, with wait the
-- microseconds until the next one comes, or {0, wait} with wait the
-- microseconds until it comes; wait as a string.

local limit = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
if not (limit and limit > 0 and limit < math.huge and burst and burst >= 1 and burst < math.huge) then
  return redis.error_reply('ERR shaper limiter: bad per-key rate ' .. tostring(ARGV[1]) .. ' ' .. tostring(ARGV[2]))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = 1000000 / limit
local tau = 0
if ARGV[3] == '1' then
  tau = (math.floor(burst) - 1) * interval
end
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat'))
if not (tat and tat > -math.huge and tat < math.huge) or tat < now then
  tat = now
end
if tat - tau > now then
  return {0, string.format('%.17g', tat - tau - now)}
end
tat = tat + interval
redis.call('HSET', KEYS[1], 'tat', string.format('%.17g', tat))
-- Kept until the key's limiter is as new (a full refill), and a second
-- more: an expired key is a new one.
redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now + tau) / 1000) + 1000)
return {1, string.format('%.17g', math.max(tat - tau - now, 0))}
