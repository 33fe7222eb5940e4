-- Whether a request's transaction holds the key right now (try_lock_key's advisory lock), read
-- from pg_locks without taking the lock: a probe must never make a real request answer 409.
-- A bigint advisory lock shows as its high 32 bits in classid, its low 32 in objid, objsubid 1.
SELECT EXISTS (
    SELECT 1
    FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid = ((lock.k >> 32) & 4294967295)::oid
        AND objid = (lock.k & 4294967295)::oid
)
FROM (SELECT hashtextextended('effectus_dest/key/' || %(key)s, 0) AS k) AS lock
