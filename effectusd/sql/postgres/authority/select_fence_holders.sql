-- Who holds these fencing resources on the authority: the store, dispatch, saga and daemon
-- (what a waiting dispatch's reason names; never the resource, whose text may carry argument
-- values).
SELECT resource, holder_dispatch_id, holder_saga_id AS saga_id, holder_owner AS lease_owner,
       holder_store
FROM effectus_fencing_leases
WHERE resource = ANY(%(resources)s::text[])
