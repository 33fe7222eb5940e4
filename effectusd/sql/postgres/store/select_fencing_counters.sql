-- Every resource this store has granted and its last token (carried into the fencing
-- authority of several stores: docs/design.md section 8).
SELECT resource, last_token FROM effectus_fencing_counters WHERE last_token > 0
