-- How much of the input did the provider's prompt cache serve, per workload and model, and how much
-- was written to it? (The prefix-cache simulation of what a self-hosted cache would do is in
-- `traceforge profile`.) A source without cache fields (tau2-bench) reports no cache counts: its
-- calls are counted apart, not as misses. A response a resumed session logged again (`copy_of`)
-- counts once.
SELECT t.workload, c.model, c.provider, count(*) AS calls,
       sum(c.input_tokens) AS input_tokens,
       sum(c.cache_read_tokens) AS cache_read_tokens,
       sum(c.cache_write_tokens) AS cache_write_tokens,
       round(100.0 * sum(c.cache_read_tokens) / nullif(sum(c.input_tokens), 0), 1) AS hit_pct,
       count(*) FILTER (WHERE c.cache_read_tokens = 0 AND c.seq > 0) AS later_calls_missing_cache,
       count(*) FILTER (WHERE c.cache_read_tokens IS NULL) AS calls_without_cache_counts
FROM llm_calls c JOIN traces t USING (trace_id)
WHERE c.usage_reported AND c.copy_of IS NULL
GROUP BY ALL
ORDER BY input_tokens DESC;
