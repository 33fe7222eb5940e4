DELETE FROM effectus_fencing_leases l
USING unnest(%(dispatch_ids)s::bigint[], %(lease_tokens)s::uuid[]) AS h(dispatch_id, lease_token)
WHERE l.holder_dispatch_id = h.dispatch_id AND l.holder_lease_token = h.lease_token
