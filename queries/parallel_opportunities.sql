-- Which traces spent the most LLM round trips on tool calls that did not depend on each other?
-- observed_turns is what the agent did; min_turns is the depth of the dependency DAG.
SELECT d.trace_id, t.workload, d.tool_calls, d.observed_turns, d.min_turns, d.turns_saved,
       round(d.observed_ms / 1000, 1) AS observed_s,
       round(d.parallel_ms / 1000, 1) AS parallel_s,
       d.tokens_saved
FROM trace_dag d JOIN traces t USING (trace_id)
WHERE d.turns_saved > 0
ORDER BY d.turns_saved DESC, d.tokens_saved DESC
LIMIT 25;
