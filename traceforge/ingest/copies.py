"""Responses logged in more than one trace, marked so that each is counted once.

`claude --resume` starts a new session file with a copy of the conversation it resumes: the same
lines, with the same `message.id` and `requestId`, under the new session's id. Both files are
traces of their own (the new one is the whole conversation the model saw when it went on), but the
API calls of the copied part were made, and paid for, once. Adapters give such a call a
`response_key`; after every write this module marks each call whose key an earlier call already
has (`llm_calls.copy_of`, the first call's id) and the tool calls it made (`tool_calls.copy_of`).

Which copy is the first does not depend on the order files were ingested in: the earliest call,
then the trace that ended first (the session that was resumed, when the copy kept its times),
then the lower ids. A trace whose copies changed loses its dependency analysis (tool_deps,
tool_schedule, trace_dag), so the next `analyze` redoes it.
"""

from __future__ import annotations

import duckdb

_CALL_COPIES = """
CREATE OR REPLACE TEMP TABLE _tf_call_copies AS
WITH keyed AS (
    SELECT c.call_id, c.trace_id, c.copy_of AS marked,
           first_value(c.call_id) OVER (
               PARTITION BY c.response_key
               ORDER BY c.started_at NULLS LAST, t.ended_at NULLS LAST, c.trace_id, c.seq
           ) AS first_call
    FROM llm_calls c JOIN traces t USING (trace_id)
    WHERE c.response_key IS NOT NULL
)
SELECT call_id, trace_id, nullif(first_call, call_id) AS copy_of
FROM keyed
WHERE nullif(first_call, call_id) IS DISTINCT FROM marked
"""

# A copied call's tool calls are copies of the first call's, matched by the source's own id.
_TOOL_COPIES = """
CREATE OR REPLACE TEMP TABLE _tf_tool_copies AS
SELECT tc.tool_call_id, tc.trace_id, o.tool_call_id AS copy_of
FROM tool_calls tc
JOIN llm_calls c ON c.call_id = tc.call_id
LEFT JOIN tool_calls o ON o.call_id = c.copy_of AND o.source_tool_call_id = tc.source_tool_call_id
WHERE c.response_key IS NOT NULL AND o.tool_call_id IS DISTINCT FROM tc.copy_of
"""


def mark_copies(con: duckdb.DuckDBPyConnection) -> None:
    """Bring `copy_of` up to date with the store's calls. Runs in the caller's transaction (the
    ingest's write), so the marks commit with the rows they mark."""
    if not con.execute("SELECT count(*) FROM llm_calls WHERE response_key IS NOT NULL").fetchone()[0]:
        return
    con.execute(_CALL_COPIES)
    con.execute(
        "UPDATE llm_calls SET copy_of = d.copy_of FROM _tf_call_copies d WHERE llm_calls.call_id = d.call_id"
    )
    con.execute(_TOOL_COPIES)
    con.execute(
        "UPDATE tool_calls SET copy_of = d.copy_of FROM _tf_tool_copies d "
        "WHERE tool_calls.tool_call_id = d.tool_call_id"
    )
    changed = con.execute(
        "SELECT trace_id FROM _tf_call_copies UNION SELECT trace_id FROM _tf_tool_copies"
    ).fetchall()
    for table in ("tool_deps", "tool_schedule", "trace_dag") if changed else ():
        con.execute(
            f"DELETE FROM {table} WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))",
            [[row[0] for row in changed]],
        )
    con.execute("DROP TABLE _tf_call_copies")
    con.execute("DROP TABLE _tf_tool_copies")
