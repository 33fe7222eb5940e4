-- Why compensation began: the reason on the latest transition into compensating. A blocked
-- saga that resumes compensating gets it back as its stop reason (instead of the block's).
-- json_type is NULL only when the key is absent (jsonb's ? operator); ->> gives its text.
SELECT detail ->> '$.reason' AS reason
FROM effectus_saga_events
WHERE saga_id = :saga_id AND kind = 'saga_state' AND to_state = 'compensating'
  AND json_type(detail, '$.reason') IS NOT NULL
ORDER BY event_id DESC
LIMIT 1
