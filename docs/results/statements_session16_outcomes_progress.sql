SELECT count(*) AS claimed,
       count(*) FILTER (WHERE started_at IS NOT NULL) AS started,
       (SELECT count(*) FROM run_outcomes WHERE status = 'succeeded') AS completed
FROM job_runs
