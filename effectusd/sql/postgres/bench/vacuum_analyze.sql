-- After `bench --backlog` built its rows: what autovacuum does soon after such a burst.
VACUUM (ANALYZE) effectus_saga_instances, effectus_saga_steps, effectus_saga_outbox
