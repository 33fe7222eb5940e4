-- Any statement opens the caller's implicit transaction; this one does nothing else.
SELECT 1
