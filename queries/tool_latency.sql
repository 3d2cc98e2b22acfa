-- How long does each tool take? Measured tool durations where the source has them; otherwise the
-- gap between the LLM call that asked for the tool and the next call in the trace (an upper bound).
WITH next_call AS (
    SELECT call_id, ended_at,
           lead(started_at) OVER (PARTITION BY trace_id ORDER BY seq) AS next_started_at
    FROM llm_calls
    WHERE copy_of IS NULL  -- a resumed session's copies of earlier calls count once
)
SELECT tc.name AS tool, count(*) AS calls,
       count(tc.duration_ms) AS measured,
       round(quantile_cont(coalesce(tc.duration_ms,
             date_diff('millisecond', n.ended_at, n.next_started_at)), 0.5)) AS p50_ms,
       round(quantile_cont(coalesce(tc.duration_ms,
             date_diff('millisecond', n.ended_at, n.next_started_at)), 0.9)) AS p90_ms,
       round(max(coalesce(tc.duration_ms,
             date_diff('millisecond', n.ended_at, n.next_started_at)))) AS max_ms
FROM tool_calls tc LEFT JOIN next_call n USING (call_id)
WHERE tc.copy_of IS NULL
GROUP BY tc.name
ORDER BY calls DESC;
