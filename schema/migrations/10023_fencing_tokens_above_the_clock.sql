-- Fencing tokens stay above every token an earlier store or an older backup of this one granted
-- for the same resource, with no step by a person and nothing to detect (docs/design.md
-- section 8, "Across stores and backups"). Every grant is at least the database's clock: on
-- timeline T a grant is max(last token, (T - 1) * 2^36 + ticks) + 1, where ticks counts the
-- 10 ms since 2026-01-01 00:00 UTC by the clock of this server (0 before then). A store that
-- starts empty, or from a backup, grants above every token granted before its clock's now by
-- a store that granted a resource no faster than once a tick; a faster one's lead over the
-- clock is cleared once the clock has passed it. Within a store the counter still rises by
-- one from its last token whatever the clock does, and the trigger refusing a decrease stays.
-- A resource's tokens keep the highest timeline they reached, so a dump of a server that
-- failed over, restored into a new cluster (timeline 1), goes on above it too.
-- The ticks fill the 36 bits under the timeline until 2047-10-11; past that they carry into
-- the timeline's bits, and a timeline's grants are still 2^36 above an earlier timeline's at
-- the same clock. The next token is one function of the last, a timeline and a time
-- (effectus_fence_next), so a grant that must clear several servers' tokens can take the
-- highest of their timelines.
-- Written to be applied again over itself (DROP … IF EXISTS, CREATE OR REPLACE).
DROP FUNCTION IF EXISTS effectus_fence_floor();

-- The current timeline, from the name of the WAL segment being written (pg_control_checkpoint
-- lags a promotion until the next checkpoint); a standby cannot grant at all (read-only).
CREATE OR REPLACE FUNCTION effectus_fence_timeline() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- The lowest token a grant on timeline p_timeline at time p_at may hand out, less one.
-- 1767225600 is 2026-01-01 00:00 UTC in Unix seconds; a tick is 10 ms.
CREATE OR REPLACE FUNCTION effectus_fence_floor(p_timeline bigint, p_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_timeline < 1 OR p_timeline > 131072 THEN
        RAISE EXCEPTION 'timeline % is outside the 1..131072 that fencing tokens can carry',
            p_timeline;
    END IF;
    RETURN (p_timeline - 1) * 68719476736
        + greatest(0, floor((extract(epoch FROM p_at) - 1767225600) * 100))::bigint;
END;
$$;

-- The token a grant after p_last hands out on a server on timeline p_timeline at p_at. A
-- resource's tokens keep the highest timeline they reached: the timeline of p_last, read as
-- its distance from the clock's floor to the nearest 2^36 (a counter carried by a dump into a
-- server on a lower timeline goes on above the grants the dump missed), if it is above
-- p_timeline.
CREATE OR REPLACE FUNCTION effectus_fence_next(
    p_last bigint, p_timeline bigint, p_at timestamptz
) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT greatest(
        p_last,
        effectus_fence_floor(
            greatest(
                p_timeline,
                (p_last - effectus_fence_floor(1, p_at) + 34359738368) / 68719476736 + 1
            ),
            p_at
        )
    ) + 1
$$;

CREATE OR REPLACE FUNCTION effectus_acquire_fence(
    p_resource text, p_dispatch_id bigint, p_lease_token uuid, p_expires_at timestamptz
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
    granted bigint;
BEGIN
    INSERT INTO effectus_fencing_counters (resource, last_token)
    VALUES (p_resource, 0) ON CONFLICT (resource) DO NOTHING;
    SELECT last_token INTO last FROM effectus_fencing_counters
    WHERE resource = p_resource FOR UPDATE;
    IF EXISTS (
        SELECT 1 FROM effectus_fencing_leases
        WHERE resource = p_resource AND expires_at > clock_timestamp()
          AND NOT (holder_dispatch_id = p_dispatch_id AND holder_lease_token = p_lease_token)
    ) THEN
        RETURN NULL;
    END IF;
    -- clock_timestamp(), not now(): the clock when the token is taken, not when the
    -- transaction began
    granted := effectus_fence_next(last, effectus_fence_timeline(), clock_timestamp());
    UPDATE effectus_fencing_counters SET last_token = granted, updated_at = now()
    WHERE resource = p_resource;
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

-- How far each resource's last token is ahead of the clock, in ticks (positive: granted more
-- often than once a tick; a new store or a restored backup is safe for it once that many ticks
-- have passed), against the nearest timeline's base. docs/operations.md section 4.
CREATE OR REPLACE VIEW effectus_fencing_leads (resource, ticks_ahead) AS
SELECT resource,
       (last_token - effectus_fence_floor(1, clock_timestamp()) + 34359738368) % 68719476736
           - 34359738368
FROM effectus_fencing_counters;
