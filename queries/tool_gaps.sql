-- How long does the model wait for tools between two LLM calls of a trace? That is how long its KV
-- cache must survive for the next call to reuse it (per workload: median, p90, p99).
WITH gaps AS (
    SELECT trace_id,
           date_diff('millisecond', ended_at,
                     lead(started_at) OVER (PARTITION BY trace_id ORDER BY seq)) AS gap_ms
    FROM llm_calls
    WHERE ended_at IS NOT NULL AND copy_of IS NULL  -- a resumed session's copies are not its calls
)
SELECT t.workload, count(*) AS gaps,
       round(quantile_cont(gap_ms, 0.5)) AS p50_ms,
       round(quantile_cont(gap_ms, 0.9)) AS p90_ms,
       round(quantile_cont(gap_ms, 0.99)) AS p99_ms
FROM gaps JOIN traces t USING (trace_id)
WHERE gap_ms IS NOT NULL AND gap_ms >= 0
GROUP BY t.workload
ORDER BY p90_ms DESC;
