"""Conversations of a per-request log (an OpenAI Chat Completions, Anthropic Messages or OpenAI
Responses gateway log) whose calls lie in more than one file, joined into one trace.

A gateway rotates its log by size or by day, and a load-balanced gateway writes a log per instance,
so the calls of one conversation can lie in several files. Files are parsed one at a time, and a
request is grouped with the calls it continues by prefix chaining (`ingest.grouping`) within its
file: the part of a conversation in a later file starts a trace of its own, whose first request
holds the earlier file's turns (named as a part: `writer._assign_ids`).

So every call of a log keeps the hash of its conversation after its response
(`llm_calls.chain_state`), and a call that opens its trace mid-conversation keeps its request's
prefix hashes (`llm_calls.request_prefixes`). After every write, in the write's transaction,
`join_log_conversations` matches them across files in SQL: an opening call one of whose prefixes is
a call's state in another file (with the same explicit conversation id, or none) continues that
call's conversation; so does a Responses API call whose `previous_response_id`, missing from its
file, is another file's call. The traces so linked, with the traces they branched from and those
that branched from them, are read again from their files (only the lines of their calls, each file
checked against its ingested SHA-256) and chained as one log holding all of them would have been:
each file's calls in its order, a call after the call whose conversation it continues, otherwise by
start time; a response logged in two files (a shipper's retry) counts once, in the file that comes
first, the other's `sources` row counting it as skipped. A joined trace keeps the id its first part
had; its `source_path` is the file of its first call, `llm_calls.source_line_path` the file of each
call logged elsewhere, and `attributes.source_paths` lists its files. Where a file has gone or
changed, the parts stay as they are, with the reason, as for the other joins (`ingest.joins`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from traceforge.ingest import api_log, openai_responses, writer
from traceforge.ingest.joins import (
    JoinReport,
    Replacement,
    mark_left_apart,
    replace_traces,
    unreadable,
    update_skipped,
    worth_trying,
)
from traceforge.ingest.sources import Record, SourceError
from traceforge.ingest.stream import open_records
from traceforge.model import Trace

# Pairs (a trace opening mid-conversation, a trace in another file holding a call whose state is
# one of the opening request's prefixes, with the same explicit conversation id or none; or, for
# the Responses API, whose response id is the `previous_response_id` its file does not hold): the
# second holds the conversation the first continues.
_CONTINUATIONS = """
WITH openers AS (
    SELECT c.trace_id,
           coalesce(c.source_line_path, t.source_path) AS file,
           json_extract_string(t.attributes, '$.conversation_id') AS key,
           unnest(c.request_prefixes) AS state
    FROM llm_calls c JOIN traces t USING (trace_id)
    WHERE c.request_prefixes IS NOT NULL
)
SELECT o.trace_id, c.trace_id
FROM openers o
JOIN llm_calls c ON c.chain_state = o.state
JOIN traces t ON t.trace_id = c.trace_id
WHERE c.trace_id <> o.trace_id
  AND coalesce(c.source_line_path, t.source_path) <> o.file
  AND json_extract_string(t.attributes, '$.conversation_id') IS NOT DISTINCT FROM o.key
UNION
SELECT o.trace_id, c.trace_id
FROM openers o
JOIN llm_calls c ON c.call_id = o.state
JOIN traces t ON t.trace_id = c.trace_id
WHERE c.trace_id <> o.trace_id
  AND c.chain_state IS NOT NULL
  AND coalesce(c.source_line_path, t.source_path) <> o.file
ORDER BY 1, 2
"""

# Joined log traces holding calls of a file this transaction wrote again: built again from the
# files' content.
_REWRITTEN = f"""
SELECT trace_id FROM traces
WHERE json_exists(attributes, '$.source_paths')
  AND list_has_any({writer.SOURCE_PATHS}, ?::VARCHAR[])
  AND trace_id IN (SELECT trace_id FROM llm_calls WHERE chain_state IS NOT NULL)
ORDER BY 1
"""

# The conversation branches of a set of traces, both ways.
_FAMILY = """
SELECT trace_id, parent_trace_id FROM traces
WHERE parent_trace_id IS NOT NULL
  AND (trace_id IN (SELECT unnest(?::VARCHAR[])) OR parent_trace_id IN (SELECT unnest(?::VARCHAR[])))
"""

# Every call of the traces, with its file and line, and whether its trace was left apart before.
_CALLS = """
SELECT t.trace_id,
       t.source_format,
       coalesce(c.source_line_path, t.source_path),
       c.source_line,
       coalesce(json_exists(t.attributes, '$.source_paths'), false),
       coalesce(json_exists(t.attributes, '$.left_apart'), false),
       json_extract_string(t.attributes, '$.left_apart.missing')
FROM traces t JOIN llm_calls c USING (trace_id)
WHERE t.trace_id IN (SELECT unnest(?::VARCHAR[]))
ORDER BY t.trace_id, c.seq
"""


@dataclass
class _Family:
    """Traces of one conversation (and its branches) spread over several files."""

    trace_ids: list[str]
    lines: dict[str, set[int]] = field(default_factory=dict)  # file -> lines of the calls to read
    holders: dict[tuple[str, int], str] = field(default_factory=dict)  # (file, line) -> trace id
    settled: bool = True  # every part was left apart before
    missing: str | None = None
    source_format: str = ""
    records: dict[str, list[Record]] = field(default_factory=dict)  # file -> its records read again

    @property
    def paths(self) -> list[str]:
        return sorted(self.lines)


def join_log_conversations(con: duckdb.DuckDBPyConnection, replaced: Sequence[str] = ()) -> JoinReport:
    """Join the stored parts of every log conversation spread over several files; `replaced` are
    the files this transaction wrote again with new content. Runs in the caller's transaction."""
    report = _join(con, replaced)
    if replaced:
        # A joined trace built again without a rewritten file's old lines can continue, or be
        # continued by, that file's new traces: join those too.
        report.extend(_join(con, ()))
    return report


def _join(con: duckdb.DuckDBPyConnection, replaced: Sequence[str]) -> JoinReport:
    report = JoinReport()
    families = [f for f in _families(con, replaced) if worth_trying(f.settled, f.missing)]
    if not families:
        return report
    ingested = dict(
        con.execute(
            "SELECT path, sha256 FROM sources WHERE path IN (SELECT unnest(?::VARCHAR[]))",
            [sorted({path for family in families for path in family.lines})],
        ).fetchall()
    )
    unreadable_files = _read_calls(families, ingested)
    for family in families:
        problem = next((unreadable_files[path] for path in family.paths if path in unreadable_files), None)
        if problem is not None:
            reason, gone = problem
            report.left_apart[family.trace_ids[0]] = reason
            mark_left_apart(con, family.trace_ids, reason, gone)
            continue
        traces = _rebuild(family)
        _name(con, family, traces)
        placed = [(_place(trace), trace) for trace in traces]
        replace_traces(con, [Replacement(family.trace_ids, placed, family.paths)])
        _recount_logged_again(con, family.paths)
        report.joined.extend(t.source_id for t in traces if "source_paths" in t.attributes)
    return report


# Calls per file: each record of a log that is not rejected or skipped is one call.
_CALLS_PER_FILE = """
SELECT coalesce(c.source_line_path, t.source_path) AS path, count(*)
FROM llm_calls c JOIN traces t USING (trace_id)
WHERE coalesce(c.source_line_path, t.source_path) IN (SELECT unnest(?::VARCHAR[]))
GROUP BY 1
"""
LOGGED_AGAIN = "record logged again in another file"


def _recount_logged_again(con: duckdb.DuckDBPyConnection, paths: list[str]) -> None:
    """A record whose response another file also logged is counted once, in one file: in the
    other, it moves from ingested to skipped (`LOGGED_AGAIN`), however often the files are joined."""
    calls = dict(con.execute(_CALLS_PER_FILE, [paths]).fetchall())
    rows = con.execute(
        "SELECT path, records, rejected, skipped_by_kind FROM sources "
        "WHERE path IN (SELECT unnest(?::VARCHAR[]))",
        [paths],
    ).fetchall()
    for path, records, rejected, skipped_text in rows:
        skipped = json.loads(skipped_text or "{}")
        skipped.pop(LOGGED_AGAIN, None)
        skipped[LOGGED_AGAIN] = records - rejected - sum(skipped.values()) - calls.get(path, 0)
        update_skipped(con, path, records, rejected, skipped)


def _families(con: duckdb.DuckDBPyConnection, replaced: Sequence[str]) -> list[_Family]:
    import networkx as nx  # here, not above: every parsing worker imports this package, never joins

    graph = nx.Graph()
    graph.add_edges_from(con.execute(_CONTINUATIONS).fetchall())
    if replaced:
        graph.add_nodes_from(row[0] for row in con.execute(_REWRITTEN, [sorted(replaced)]).fetchall())
    frontier = sorted(graph)
    while frontier:
        links = con.execute(_FAMILY, [frontier, frontier]).fetchall()
        new = {node for link in links for node in link if node not in graph}
        graph.add_edges_from(links)
        frontier = sorted(new)
    if not graph:
        return []
    families = sorted(
        (_Family(sorted(members)) for members in nx.connected_components(graph)), key=lambda f: f.trace_ids
    )
    family_of = {trace_id: family for family in families for trace_id in family.trace_ids}
    stale = set(replaced)
    for trace_id, source_format, path, line, joined, settled, missing in con.execute(
        _CALLS, [sorted(family_of)]
    ).fetchall():
        family = family_of[trace_id]
        family.source_format = source_format
        family.settled &= settled
        family.missing = family.missing or missing
        if joined and path in stale:
            continue  # the file's current content is in its own traces now
        family.lines.setdefault(path, set()).add(line)
        family.holders[(path, line)] = trace_id
    return families


def _read_calls(families: list[_Family], ingested: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Every family's records (`_Family.records`), reading each file once for all of them, in its
    order. Returns the files that cannot be read again as they were ingested: why, and the path
    where the file is gone."""
    wanted: dict[str, dict[int, _Family]] = defaultdict(dict)
    for family in families:
        for path, lines in family.lines.items():
            wanted[path].update(dict.fromkeys(lines, family))
    problems = {}
    for path in sorted(wanted):
        problem, gone = unreadable(path, ingested.get(path))
        if problem is None:
            try:
                for record in open_records(Path(path), [], ingested[path], wanted[path]).records:
                    family = wanted[path].get(record.line)
                    if family is not None:
                        family.records.setdefault(path, []).append(record)
            except SourceError as exc:
                problem, gone = f"{path} cannot be read again ({exc})", None
        if problem is not None:
            problems[path] = (problem, gone)
    return problems


@dataclass
class _Call:
    """A call read again, with what orders it among the others."""

    path: str
    line: int
    started: float  # seconds since the epoch; infinite where the log has no time
    needs: list[Hashable]  # the states of the calls it continues
    gives: list[Hashable]  # its own states, which a call continuing it needs
    item: Any  # the format's converted record


def _rebuild(family: _Family) -> list[Trace]:
    """The family's traces, built from its records of every file as one log would give them."""
    if family.source_format == openai_responses.FORMAT:
        once = api_log.LoggedOnce()  # a response logged in two files counts once
        ordered = _in_log_order(_responses_calls(family))
        return openai_responses.traces_of(
            [call.item for call in ordered if not once.again(call.item.exchange, by_content=False)]
        )
    calls = []
    keys = api_log.RequestKeys()
    for path in sorted(family.records):
        for record in family.records[path]:
            exchange = api_log.exchange_of(record, keys)
            if isinstance(exchange, api_log.Exchange):
                api_log.hash_chain(exchange)
                needs = [(exchange.key, digest) for digest in exchange.prefixes]
                # a call that added nothing continues nothing anyone can tell
                gives = [(exchange.key, exchange.state)] if exchange.response else []
                calls.append(_call(path, exchange, needs, gives, exchange))
    conversations = api_log.Conversations(rejoinable=True)
    logged = api_log.LoggedOnce()  # a response logged in two files counts once
    for call in _in_log_order(calls):
        if not logged.again(call.item):
            conversations.add(call.item)
    return conversations.traces()


def _responses_calls(family: _Family) -> list[_Call]:
    """Responses API records: a call continues the response its `previous_response_id` names, or,
    sending its whole input (stateless), the call whose conversation its input begins with."""
    calls = []
    known: dict[str, dict] = {}
    repeats = openai_responses.Repeats()
    for path in sorted(family.records):
        for record in family.records[path]:
            item = openai_responses.logged(record, known, repeats)
            if not isinstance(item, openai_responses.Logged):
                continue
            key = item.exchange.key
            gives: list[Hashable] = [item.response_id] if item.response_id else []
            if item.previous_id:
                needs: list[Hashable] = [item.previous_id]
            else:
                request = [api_log.message_key(m) for m in [*item.system(), *item.input]]
                prefixes, state = api_log.chain_hashes(request, item.output)
                needs = [(key, digest) for digest in prefixes]
                gives.append((key, state))
            calls.append(_call(path, item.exchange, needs, gives, item))
    return calls


def _call(
    path: str, exchange: api_log.Exchange, needs: list[Hashable], gives: list[Hashable], item: Any
) -> _Call:
    """A call read again from `path`; its LLM call records that file as its own."""
    exchange.call.source_line_path = path
    started = exchange.call.started_at.timestamp() if exchange.call.started_at else math.inf
    return _Call(path, exchange.line, started, needs, gives, item)


def _in_log_order(calls: list[_Call]) -> list[_Call]:
    """Calls from several files in the order one log holding them all would give: each file's calls
    in its order; a call after every call it continues; otherwise by start time, then file and line
    (a log without times: file by file)."""
    import networkx as nx  # as in `_families`

    givers: dict[Hashable, list[int]] = defaultdict(list)
    for k, call in enumerate(calls):
        for state in call.gives:
            givers[state].append(k)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(calls)))
    previous: dict[str, int] = {}
    for k, call in enumerate(calls):
        if call.path in previous:
            graph.add_edge(previous[call.path], k)
        previous[call.path] = k
        for need in call.needs:
            graph.add_edges_from((j, k) for j in givers.get(need, ()) if j != k)
    try:
        order = nx.lexicographical_topological_sort(
            graph, key=lambda k: (calls[k].started, calls[k].path, calls[k].line)
        )
        return [calls[k] for k in order]
    except nx.NetworkXUnfeasible:  # calls logged before the calls they continue: file by file
        return calls


def _name(con: duckdb.DuckDBPyConnection, family: _Family, traces: list[Trace]) -> None:
    """Each trace's id: the one chaining gave it (its conversation id, or `conv-` and the hash of its
    first call) where no trace outside the family holds it, else the id of the stored part that held
    its first call; parents renamed alike."""
    wanted = [trace.source_id for trace in traces]
    taken = {
        row[0]
        for row in con.execute(
            "SELECT trace_id FROM traces WHERE trace_id IN (SELECT unnest(?::VARCHAR[])) "
            "AND trace_id NOT IN (SELECT unnest(?::VARCHAR[]))",
            [wanted, family.trace_ids],
        ).fetchall()
    }
    renamed = {}
    for trace in traces:
        head = (trace.llm_calls[0].source_line_path or "", trace.source_line or 0)
        renamed[trace.source_id] = (
            trace.source_id if trace.source_id not in taken else family.holders.get(head, trace.source_id)
        )
    for trace in traces:
        trace.source_id = renamed[trace.source_id]
        if trace.parent_source_id is not None:
            trace.parent_source_id = renamed.get(trace.parent_source_id, trace.parent_source_id)


def _place(trace: Trace) -> str:
    """The trace's file (that of its first call); its calls keep theirs only where it differs, and
    a trace of several files lists them in `attributes.source_paths`."""
    primary = trace.llm_calls[0].source_line_path or ""
    files = sorted({call.source_line_path or "" for call in trace.llm_calls})
    if len(files) > 1:
        trace.attributes["source_paths"] = files
    for call in trace.llm_calls:
        if call.source_line_path == primary:
            call.source_line_path = None
    return primary
