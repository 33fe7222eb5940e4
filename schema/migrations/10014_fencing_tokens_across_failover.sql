-- Fencing tokens stay monotonic across a failover (docs/design.md section 8, "Across a
-- failover"). A token granted and committed on a primary whose last commits never reached the
-- standby it fails over to would be granted again by the new primary, to another holder, and a
-- destination takes a token equal to its watermark as its current holder's. A promoted standby
-- (and a point-in-time restore) starts a new timeline, whose ID is one above every timeline
-- the cluster had, so the timeline is the epoch: on timeline T every grant is at least
-- (T - 1) * 2^36 + 1, above any token an earlier timeline granted while it granted fewer than
-- 2^36 per resource. Timeline 1, a server that never failed over, grants 1, 2, 3, … as before.
-- 2^36 per resource and timeline is 68.7 billion grants; 2^17 timelines keep every token
-- within ±(2^53 - 1), what JSON carries exactly. The current timeline is read from the name
-- of the WAL segment being written (pg_control_checkpoint lags a promotion until the next
-- checkpoint); a standby cannot grant at all (it is read-only).
CREATE FUNCTION effectus_fence_floor() RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    timeline bigint := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
BEGIN
    IF timeline > 131072 THEN
        RAISE EXCEPTION 'timeline % is past the 131072 that fencing tokens can carry', timeline;
    END IF;
    RETURN (timeline - 1) * 68719476736;
END;
$$;

CREATE OR REPLACE FUNCTION effectus_acquire_fence(
    p_resource text, p_dispatch_id bigint, p_lease_token uuid, p_expires_at timestamptz
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    granted bigint;
BEGIN
    INSERT INTO effectus_fencing_counters (resource, last_token)
    VALUES (p_resource, 0) ON CONFLICT (resource) DO NOTHING;
    PERFORM 1 FROM effectus_fencing_counters WHERE resource = p_resource FOR UPDATE;
    IF EXISTS (
        SELECT 1 FROM effectus_fencing_leases
        WHERE resource = p_resource AND expires_at > clock_timestamp()
          AND NOT (holder_dispatch_id = p_dispatch_id AND holder_lease_token = p_lease_token)
    ) THEN
        RETURN NULL;
    END IF;
    UPDATE effectus_fencing_counters
    SET last_token = greatest(last_token, effectus_fence_floor()) + 1, updated_at = now()
    WHERE resource = p_resource
    RETURNING last_token INTO granted;
    IF granted > 9007199254740991 THEN
        RAISE EXCEPTION 'fencing token for % would pass 2^53 - 1', p_resource;
    END IF;
    INSERT INTO effectus_fencing_leases
        (resource, holder_dispatch_id, holder_lease_token, token, acquired_at, expires_at)
    VALUES (p_resource, p_dispatch_id, p_lease_token, granted, now(), p_expires_at)
    ON CONFLICT (resource) DO UPDATE
    SET holder_dispatch_id = excluded.holder_dispatch_id,
        holder_lease_token = excluded.holder_lease_token,
        token = excluded.token,
        acquired_at = excluded.acquired_at,
        expires_at = excluded.expires_at;
    RETURN granted;
END;
$$;
