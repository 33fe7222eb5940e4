-- Tombstones pruned longer ago than the cutoff: their identities may be used again.
DELETE FROM effectus_saga_tombstones
WHERE pruned_at < :cutoff
RETURNING saga_id
