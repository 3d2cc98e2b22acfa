-- Which agent runs took longest end to end, and what were they doing?
SELECT trace_id, workload, outcome, round(duration_ms / 1000, 1) AS seconds,
       llm_calls, tool_calls, tool_errors, input_tokens, output_tokens
FROM v_trace_summary
WHERE duration_ms IS NOT NULL
ORDER BY duration_ms DESC
LIMIT 20;
