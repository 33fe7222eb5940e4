-- Why compensation began: the reason on the latest transition into compensating. A blocked
-- saga that resumes compensating gets it back as its stop reason (instead of the block's).
SELECT detail->>'reason' AS reason
FROM effectus_saga_events
WHERE saga_id = %(saga_id)s AND kind = 'saga_state' AND to_state = 'compensating'
  AND detail ? 'reason'
ORDER BY event_id DESC
LIMIT 1
