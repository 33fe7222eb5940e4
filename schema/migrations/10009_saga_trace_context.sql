-- Tracing (docs/operations.md "Tracing"): the W3C trace context current when the saga was
-- submitted, as a JSON object of its traceparent and tracestate headers, so that every attempt
-- span of the saga can name the submit as its parent. NULL when tracing was off at submit.
-- Kept on the saga, not on each dispatch: the daemon reads it only when tracing is on.
ALTER TABLE effectus_saga_instances ADD COLUMN trace_context text;
