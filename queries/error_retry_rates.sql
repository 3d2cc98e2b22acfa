-- Which tools fail, and how often does the agent retry them? A retry is the same tool called again
-- by the next tool call in the trace after an error.
WITH ordered AS (
    SELECT trace_id, name, is_error,
           lead(name) OVER (PARTITION BY trace_id ORDER BY seq) AS next_name
    FROM tool_calls
    WHERE copy_of IS NULL  -- a resumed session's copies of earlier calls count once
)
SELECT name AS tool, count(*) AS calls,
       count(*) FILTER (WHERE is_error) AS errors,
       round(100.0 * count(*) FILTER (WHERE is_error) / count(*), 1) AS error_pct,
       count(*) FILTER (WHERE is_error AND next_name = name) AS retried,
       round(100.0 * count(*) FILTER (WHERE is_error AND next_name = name)
             / nullif(count(*) FILTER (WHERE is_error), 0), 1) AS retry_pct
FROM ordered
GROUP BY name
ORDER BY errors DESC, calls DESC;
