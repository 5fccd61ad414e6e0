-- sem_fair_state.lua: read a fair semaphore's state (not in Redisson).
-- Read-only. Run after latch_common.lua, queue_scalable.lua, res_sem.lua
-- and fair_common.lua.
--
-- KEYS[1..8]  as sem_fair_acquire.lua
--
-- Reply: {pool, available, holders, queued}: the pool (-1: not set); the
-- permits free now (pool less the permits of holders whose lease has not
-- ended; negative when the pool was set below what is held; -1 when the
-- pool is not set); how many owners hold permits (leases not ended); how
-- many waiters are queued. An error reply when a key holds the wrong type.
local bad = sem_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], true)
if bad then
    return bad
end
local used, holders = 0, 0
for o, s in pairs(LEASE) do -- as sem_init loaded them
    local v = HOLD[o]
    if s > NOW and v then -- a damaged count counts as acquisition counts it (sem_count)
        used, holders = used + sem_count(v), holders + 1
    end
end
q_init(nil, nil, KEYS[4])
local queued = q_length()
if POOL == nil then
    return {-1, -1, holders, queued}
end
return {POOL, POOL - used, holders, queued}
