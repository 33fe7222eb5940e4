-- A grant on the authority: effectus_acquire_fence (the stores' layout, migration 0002) with
-- the lease expiring on this server's clock after p_lease (the dispatch lease plus a margin
-- for the clocks of the store and the daemon's host), and the lease naming its holder's store,
-- saga and daemon. NULL: another live holder has the resource.
CREATE FUNCTION effectus_authority_grant(
    p_resource text, p_dispatch_id bigint, p_lease_token uuid, p_lease interval,
    p_store text, p_saga_id text, p_owner text
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    granted bigint;
BEGIN
    granted := effectus_acquire_fence(
        p_resource, p_dispatch_id, p_lease_token, clock_timestamp() + p_lease
    );
    IF granted IS NOT NULL THEN
        UPDATE effectus_fencing_leases
        SET holder_store = p_store, holder_saga_id = p_saga_id, holder_owner = p_owner
        WHERE resource = p_resource;
    END IF;
    RETURN granted;
END;
$$;
