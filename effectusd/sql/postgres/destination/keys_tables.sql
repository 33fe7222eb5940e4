-- Which of the kit's tables exist: the ledger (migration 1) and the key audit (migration 2).
SELECT to_regclass('effectus_dest_keys') IS NOT NULL,
       to_regclass('effectus_dest_key_audit') IS NOT NULL
