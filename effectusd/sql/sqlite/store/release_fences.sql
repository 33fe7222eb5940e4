-- Give back the leases of these holders; dispatch_ids and lease_tokens are parallel JSON arrays.
-- The counters stay: the next holder's token is still higher.
DELETE FROM effectus_fencing_leases
WHERE (holder_dispatch_id, holder_lease_token) IN (
    SELECT h.value, t.value
    FROM json_each(:dispatch_ids) AS h
    JOIN json_each(:lease_tokens) AS t ON t.key = h.key
)
