SELECT effectus_acquire_fence(%(resource)s, %(dispatch_id)s, %(lease_token)s,
                              %(expires_at)s) AS token
