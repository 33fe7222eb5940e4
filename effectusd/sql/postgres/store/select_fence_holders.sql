-- Who holds these fencing resources: the holding dispatch, its saga and lease owner (what a
-- waiting dispatch's reason names; never the resource, whose text may carry argument values).
SELECT l.resource, l.holder_dispatch_id, h.saga_id, h.lease_owner
FROM effectus_fencing_leases l
LEFT JOIN effectus_saga_outbox h ON h.dispatch_id = l.holder_dispatch_id
WHERE l.resource = ANY(%(resources)s::text[])
