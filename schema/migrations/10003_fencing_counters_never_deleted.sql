-- A deleted fencing counter would hand out token 1 again: a destination's watermark would then
-- reject every honest holder, or, worse, a restored lower watermark would accept a zombie.
-- Counters are never deleted, not even by prune (TRUNCATE, a deliberate reset, is not a row
-- delete and is not caught here).
CREATE FUNCTION effectus_fencing_counters_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fencing counter for % may not be deleted (tokens would start again)',
        OLD.resource;
END;
$$;

CREATE TRIGGER effectus_fencing_counters_kept
    BEFORE DELETE ON effectus_fencing_counters
    FOR EACH ROW EXECUTE FUNCTION effectus_fencing_counters_kept();
