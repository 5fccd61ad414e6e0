-- sem_held.lua: the replica acknowledgement's check of a Go acquisition of
-- a permit-expirable semaphore (not in Redisson; see confirmSource in
-- internal/core/replicas.go).
--
-- KEYS[1]  timeouts
-- KEYS[2]  token counter "fairlock_sem_token:{name}"
-- ARGV[1]  the hold's owner: its permit ids in hex, joined with ','
--
-- Reply: 1 when every permit of the hold is held (in the set, expiry after
-- now on the server's clock), after INCRBY 0 of the token counter: a write
-- that changes nothing but is replicated, so that WAIT on this connection
-- covers the acquisition; 0 otherwise, writing nothing.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if sem_all_held(KEYS[1], sem_owner_ids(ARGV[1]), now) then
    redis.call('incrby', KEYS[2], 0)
    return 1
end
return 0
