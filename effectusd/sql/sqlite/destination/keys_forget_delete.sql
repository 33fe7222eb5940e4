DELETE FROM effectus_dest_keys WHERE idempotency_key = :key AND state = 'completed'
