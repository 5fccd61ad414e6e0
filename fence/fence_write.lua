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
-- was written. Both as decimal strings (exact over int64). Errors, with
-- nothing written: a token that is not a positive integer, a fence that
-- does not hold a non-negative integer (canonical decimal, int64 range), an
-- unknown write, a resource of the wrong type for the write.
--
-- Tokens are compared as decimal strings, never as Lua numbers: a Lua
-- number is a double, which above 2^53 cannot tell neighbouring integers
-- apart (an older token would compare equal to a newer one and its write
-- be applied). Both the token and the fence must be canonical decimal
-- integers in the int64 range (no sign, no leading zero), so the longer
-- string is the larger number and equal lengths compare digit by digit.

-- less(a, b): a < b for canonical strings, digit by digit (string.byte, so
-- no locale's collation is involved).
local function less(a, b)
    if #a ~= #b then
        return #a < #b
    end
    for i = 1, #a do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then
            return x < y
        end
    end
    return false
end

-- canonical(s): s is "0" or a decimal integer in 1..2^63-1 without sign or
-- leading zero.
local function canonical(s)
    if s == '0' then
        return true
    end
    if not string.find(s, '^[1-9]%d*$') or #s > 19 then
        return false
    end
    return #s < 19 or not less('9223372036854775807', s)
end
local token = ARGV[1]
local op = ARGV[2]
if not canonical(token) or token == '0' then
    return redis.error_reply('fence: token ' .. tostring(token) .. ' is not a positive integer')
end
if op ~= 'set' and op ~= 'hset' and op ~= 'rpush' then
    return redis.error_reply('fence: unknown write ' .. tostring(op))
end
local last = redis.call('get', KEYS[2])
if not last then
    last = '0'
elseif not canonical(last) then
    return redis.error_reply('fence: ' .. KEYS[2] .. ' does not hold a non-negative integer')
end
if less(token, last) then
    return {0, last}
end
if op == 'set' then
    redis.call('set', KEYS[1], ARGV[3])
elseif op == 'hset' then
    redis.call('hset', KEYS[1], unpack(ARGV, 3))
else
    redis.call('rpush', KEYS[1], unpack(ARGV, 3))
end
if less(last, token) then
    redis.call('set', KEYS[2], token)
end
return {1, token}
