-- A claim that ended before its request was written (a fence wait, a connection refused, any
-- pre-send guard, a lease that ran out unsent) is no request: unsent counts such claims, kept
-- by the settlement (update_dispatch_settled.sql), so attempt - unsent is the number of
-- requests that may have been written, which X-Effectus-Attempt carries, the views show and
-- retry.max_attempts bounds. attempt stays the claim counter the settlement guard compares.
-- Rows from before counted only their fence waits apart: they start from those.
--
-- budget_since: when the dispatch's time budget (retry.give_up_after, for calls never sent or
-- known not committed) started, on the database clock: set by its first claim, cleared by an
-- operator's retry so that the next claim starts it again. gives_up_at: while the dispatch
-- waits to retry such a call, when that budget runs out (as the settlement that scheduled the
-- retry computed it from the loaded config), for the views; NULL otherwise.
ALTER TABLE effectus_saga_outbox
    ADD COLUMN unsent integer NOT NULL DEFAULT 0,
    ADD COLUMN budget_since timestamptz,
    ADD COLUMN gives_up_at timestamptz,
    ADD CONSTRAINT effectus_saga_outbox_unsent CHECK (unsent BETWEEN 0 AND attempt);

UPDATE effectus_saga_outbox SET unsent = fence_waits WHERE fence_waits > 0;
