-- Which of the kit's tables exist: the ledger (migration 1) and the key audit (migration 2).
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'effectus_dest_keys'),
       EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table'
               AND name = 'effectus_dest_key_audit')
