SELECT effectus_authority_grant(%(resource)s, %(dispatch_id)s, %(lease_token)s,
                                make_interval(secs => %(lease_s)s), %(store)s, %(saga_id)s,
                                %(owner)s) AS token
