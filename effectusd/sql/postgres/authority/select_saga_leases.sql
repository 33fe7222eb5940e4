-- The leases the authority keeps for one saga of one store (its label; NULL: a store without
-- one): an operator action on the saga gives back those whose claims have ended.
SELECT holder_dispatch_id AS dispatch_id, holder_lease_token AS lease_token
FROM effectus_fencing_leases
WHERE holder_store IS NOT DISTINCT FROM %(store)s AND holder_saga_id = %(saga_id)s
