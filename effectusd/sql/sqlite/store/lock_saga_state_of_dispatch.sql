-- The saga of one dispatch whose outcome is being quarantined: its state only (a poisoned
-- saga row may hold plan or facts that cannot be decoded). No row locks: the transaction
-- holds SQLite's write lock from its start.
SELECT s.saga_id, s.state
FROM effectus_saga_instances s
WHERE s.saga_id = (
    SELECT saga_id FROM effectus_saga_outbox WHERE dispatch_id = :dispatch_id
)
