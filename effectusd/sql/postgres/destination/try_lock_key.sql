-- Non-blocking: a second request for a key whose transaction is still open must be answered
-- at once (409 unknown_outcome), not queued behind it. The prefix keeps these locks apart from
-- the application's own advisory locks.
SELECT pg_try_advisory_xact_lock(hashtextextended('effectus_dest/key/' || %(key)s, 0))
