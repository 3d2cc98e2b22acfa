-- Which workloads carry the most tokens and spend, with each one's share and the running total?
-- (Post-train the few at the top first.) Reads the `workloads` table that `traceforge analyze` fills.
SELECT rank, workload, traces, llm_calls,
       input_tokens, cache_read_tokens, output_tokens,
       round(cost_usd, 4) AS cost_usd,
       round(100 * share, 1) AS share_pct,
       round(100 * sum(share) OVER (ORDER BY rank), 1) AS cumulative_pct
FROM workloads
ORDER BY rank;
