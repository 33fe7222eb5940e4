-- A deleted fencing counter would hand out token 1 again: a destination's watermark would then
-- reject every honest holder, or, worse, a restored lower watermark would accept a zombie.
-- Counters are never deleted, not even by prune.
CREATE TRIGGER effectus_fencing_counters_kept
BEFORE DELETE ON effectus_fencing_counters
BEGIN
    SELECT RAISE(ABORT, 'effectus_fencing_counters: a fencing counter may not be deleted');
END;
