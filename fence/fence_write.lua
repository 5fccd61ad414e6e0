-- fence_write.lua: a fenced write (package fence; not in Redisson). Apply a
-- write to a resource key only if the writer's fencing token is not older
-- than the newest token already seen for that resource, and record it.
--
-- KEYS[1]  the resource key
-- KEYS[2]  its fence "fairlock_fence:{<resource>}" (same hash slot): the
--          newest token seen, an integer; absent means none (0)
-- ARGV[1]  the writer's token, a positive integer
-- ARGV[2]  the write: "set" (ARGV[3] value), "hset" (ARGV[3..] field value
--          pairs) or "rpush" (ARGV[3..] values)
--
-- Reply: {1, token} when the write was applied (token >= the fence: equal is
-- accepted, so one holder may write twice with its token) and the fence now
-- holds token; {0, fence} when the token is older than the fence: nothing
-- was written. Errors, with nothing written: a fence that does not hold an
-- integer, an unknown write, a resource of the wrong type for the write.
local token = tonumber(ARGV[1])
local op = ARGV[2]
if op ~= 'set' and op ~= 'hset' and op ~= 'rpush' then
    return redis.error_reply('fence: unknown write ' .. tostring(op))
end
local raw = redis.call('get', KEYS[2])
local last = 0
if raw then
    last = tonumber(raw)
    if not last then
        return redis.error_reply('fence: ' .. KEYS[2] .. ' does not hold an integer')
    end
end
if token < last then
    return {0, last}
end
if op == 'set' then
    redis.call('set', KEYS[1], ARGV[3])
elseif op == 'hset' then
    redis.call('hset', KEYS[1], unpack(ARGV, 3))
else
    redis.call('rpush', KEYS[1], unpack(ARGV, 3))
end
if token > last then
    redis.call('set', KEYS[2], ARGV[1])
end
return {1, token}
