-- fair_state.lua: read a fair lock's state, for anyone (not in Redisson; it
-- writes nothing, to Redisson's keys or any other). Either engine: it finds
-- which queue exists. Every read is a pcall, so a key of another type reads
-- as absent.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue "redisson_lock_queue:{name}"
-- KEYS[3]  timeouts "redisson_lock_timeout:{name}"
-- KEYS[4]  scalable queue "fairlock_squeue:{name}"
-- KEYS[5]  fencing token "redisson_lock_token:{name}"
-- ARGV[1]  how many waiters to list, from the head (at most 1000)
--
-- Reply: {holders, pttl, token, engine, length, waiters}: holders a flat
-- array owner, count, ...; pttl the lock's PTTL (-2 free, -1 no expiry);
-- token the token counter as a string ("" when absent); engine "redisson",
-- "scalable", "both" or "" (no queue); length the queue's length (scalable:
-- from the hash's field count, O(1)); waiters the first ARGV[1] owners, head
-- first. Cost: O(1) + O(ARGV[1]) on either engine.
local k = math.min(math.max(tonumber(ARGV[1]) or 0, 0), 1000)

local function ok(v)
    if type(v) == 'table' and v.err then
        return nil
    end
    return v
end

local holders = ok(redis.pcall('hgetall', KEYS[1])) or {}
local pttl = redis.call('pttl', KEYS[1])
local token = ok(redis.pcall('get', KEYS[5]))
if type(token) ~= 'string' then
    token = ''
end

local rq = redis.call('exists', KEYS[2], KEYS[3]) > 0
local sqe = redis.call('exists', KEYS[4]) == 1
local engine = ''
if rq and sqe then
    engine = 'both'
elseif rq then
    engine = 'redisson'
elseif sqe then
    engine = 'scalable'
end

local length, waiters = 0, {}
if engine == 'redisson' or engine == 'both' then
    length = ok(redis.pcall('llen', KEYS[2])) or 0
    if k > 0 then
        waiters = ok(redis.pcall('lrange', KEYS[2], 0, k - 1)) or {}
    end
elseif engine == 'scalable' then
    -- four fields for the ends (h, t, hd, td) and two for the join sequences
    -- (hs, ts), four per waiter (n:, p:, d:, s:); three per waiter in a queue
    -- written without sequences
    local n = ok(redis.pcall('hlen', KEYS[4])) or 0
    local v = ok(redis.pcall('hmget', KEYS[4], 'h', 'hs', 'ts')) or {}
    if v[2] and v[3] then
        length = math.floor((n - 6) / 4)
    else
        length = math.floor((n - 4) / 3)
    end
    length = math.max(length, 0)
    local o = v[1]
    while o and o ~= '' and #waiters < k and #waiters < length do
        waiters[#waiters + 1] = o
        o = ok(redis.pcall('hget', KEYS[4], 'n:' .. o))
    end
end
return {holders, pttl, token, engine, length, waiters}
