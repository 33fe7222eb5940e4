-- What the soak left undone: sagas still running when it ended.
SELECT count(*) FROM effectus_saga_instances WHERE state = 'running'
