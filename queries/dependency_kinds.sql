-- Why do tool calls depend on each other? Counts of inferred dependencies by kind and tool pair.
SELECT d.kind, s.name AS from_tool, t.name AS to_tool, count(*) AS edges,
       any_value(d.evidence) AS example_evidence
FROM tool_deps d
JOIN tool_calls s ON s.tool_call_id = d.src_tool_call_id
JOIN tool_calls t ON t.tool_call_id = d.dst_tool_call_id
GROUP BY ALL
ORDER BY edges DESC
LIMIT 40;
