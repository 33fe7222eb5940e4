-- Waiting for a fencing resource held by another live dispatch sends nothing, so it is not an
-- attempt of the retry budget (DESIGN section 6, issue 13). fence_waits counts the attempts
-- whose write-ahead found a resource busy (the engine subtracts them from the budget);
-- fence_wait_since is when the current wait began (its own bound, fencing.wait_limit), cleared
-- when a write-ahead goes through or an operator sends the dispatch again.
ALTER TABLE effectus_saga_outbox
    ADD COLUMN fence_waits integer NOT NULL DEFAULT 0,
    ADD COLUMN fence_wait_since timestamptz,
    ADD CONSTRAINT effectus_saga_outbox_fence_waits CHECK (fence_waits BETWEEN 0 AND attempt);
