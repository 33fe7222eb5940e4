-- Delivered at commit, so a daemon never wakes for work that was rolled back.
SELECT pg_notify('effectus_outbox', %(destination)s)
