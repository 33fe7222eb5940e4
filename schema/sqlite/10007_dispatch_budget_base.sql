-- Retry budgets follow the loaded config (README "Configuration": timeout and retry are live).
-- A dispatch's budget is budget_base + the verb's current retry.max_attempts, where
-- budget_base counts the attempts already made when the budget was granted: 0 at enqueue, the
-- attempt reached when an operator sends the dispatch again. Live rows written before this
-- migration have no base (NULL): their stored max_attempts stays their budget, as it was.
ALTER TABLE effectus_saga_outbox
    ADD COLUMN budget_base integer DEFAULT 0 CHECK (budget_base >= 0);

UPDATE effectus_saga_outbox
SET budget_base = NULL
WHERE state NOT IN ('succeeded', 'failed_permanent', 'canceled');
