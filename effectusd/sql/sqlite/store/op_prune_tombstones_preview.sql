-- What `prune --dry-run` would delete of the tombstones.
SELECT count(*) AS count FROM effectus_saga_tombstones WHERE pruned_at < :cutoff
