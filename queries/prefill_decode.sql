-- How prefill-heavy is each workload and model? Uncached input must be prefilled; cached input is
-- served from the prompt cache; output is decoded. Only calls whose source reported usage count, as
-- reported: `output_partial_calls` logged only a lower bound of their output (Claude Code), so their
-- output is undercounted here; the `inference_profile` table counts their estimate. A response a
-- resumed session logged again (`copy_of`) counts once.
SELECT t.workload, c.model, count(*) AS calls,
       count(*) FILTER (WHERE c.output_tokens_partial) AS output_partial_calls,
       sum(c.input_tokens - coalesce(c.cache_read_tokens, 0)) AS uncached_input,
       sum(c.cache_read_tokens) AS cached_input,
       sum(c.output_tokens) AS output,
       sum(c.reasoning_tokens) AS reasoning,
       round(sum(c.input_tokens - coalesce(c.cache_read_tokens, 0)) / nullif(sum(c.output_tokens), 0), 1)
           AS prefill_per_decode_token,
       round(median(c.input_tokens)) AS p50_input,
       round(median(c.output_tokens)) AS p50_output
FROM llm_calls c JOIN traces t USING (trace_id)
WHERE c.usage_reported AND c.copy_of IS NULL
GROUP BY ALL
ORDER BY uncached_input DESC;
