SELECT state, count(*) AS n FROM effectus_saga_instances GROUP BY state ORDER BY state
