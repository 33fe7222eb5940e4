DELETE FROM effectus_dest_keys WHERE idempotency_key = %(key)s AND state = 'completed'
