"""Which tool call needs which: dependency inference over a trace's tool calls.

A claim "these calls could have run in parallel" becomes training data, so a wrong "independent" is
the costly error and a missed opportunity the cheap one. Every edge carries a kind, the evidence and a
confidence; the loose mode keeps the edges of confidence >= `LOOSE_MIN_CONFIDENCE`, the conservative
mode (the default) keeps them all.

Rules, for each call B (A is a call of an earlier turn; loose keeps the first kind of each rule):

- explicit: B's arguments hold A's tool call id.
- data: a value in B's arguments (a string of some length, an id, a non-trivial number) first appears
  in A's result, and in nothing B could have known before it (system and user messages, tool
  definitions, the assistant's own earlier text and arguments, earlier results). The earliest source
  is credited; a phrase made of the user's own words ("blue chair" from "blue ergonomic chair") is
  known. Values are matched through a hashed index of tokens -> first source, never by comparing
  calls pairwise. Ids, paths, long words and phrases are strong evidence; short words and two- or
  three-digit numbers are weak (conservative only); trivial values (0-10, powers of ten, stop
  words) are no evidence.
- state: a write and another non-pure call that name the same resource (the same value in a key-like
  argument such as order_id, file_path or url, or in the arguments traceforge.toml names) are
  ordered both ways. Conservative only: a tool of unknown effect is a barrier, and an argument-less
  read follows every earlier write.
- control: a retry (the same tool with similar arguments after an error or an empty / not-found
  result); the same write tool again after it failed. Conservative only: every later similar call,
  a write of a sibling tool (sharing a noun: search_products / get_product) after a failure, and
  every call of a turn whose text quotes a result's specific values that none of its calls uses.
- derived (conservative only): free text (six words or more, several lines) written after results
  may draw on any of them, so B follows every earlier result of its user turn. Not when the text is
  copied from a known source, made only of the user's words while no result brought anything new,
  or a command or code argument (its values are matched as data). An arithmetic expression whose
  numbers all have a known source is explained by them; one with a number seen nowhere (computed by
  the model) may draw on any result.

Calls of one assistant turn are independent by construction (the model issued them together), and
no call moves across a user message: `segment` numbers the stretches between user messages.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import json
import operator
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import polars as pl

from traceforge import store
from traceforge.analysis.batches import TraceBatch, rows_by_trace
from traceforge.analysis.effects import DepsConfig, Effect, classify, is_key_param, tool_nouns, word_set
from traceforge.analysis.prefix_cache import DEFAULT_CHARS_PER_TOKEN

LOOSE_MIN_CONFIDENCE = 0.6

# Confidence of each kind of evidence.
EXPLICIT = 1.0
DATA_ID = 0.95  # an id-like token: digits with letters, paths, emails, long tokens
DATA_PHRASE = 0.9  # several significant words in a row
DATA_NUMBER = 0.8  # a number of four or more digits or with decimals
DATA_WORD = 0.7  # one word of six or more letters
DATA_SHORT = 0.45  # a word of three to five letters, a two- or three-digit number
STATE_KEY = 0.9
STATE_WAR = 0.8
STATE_UNKNOWN_AFTER_WRITE = 0.6
STATE_KEYLESS_READ = 0.5
STATE_BARRIER = 0.3
CONTROL_RETRY = 0.9
CONTROL_CORRECTION = 0.7
CONTROL_WRITE_AFTER_FAILURE = 0.7
CONTROL_AFTER_FAILURE = 0.5
CONTROL_QUOTE = 0.5
DERIVED = 0.3

FREE_TEXT_TOKENS = 6
SIMILAR_RATIO = 0.8  # characters in common, for ids with a typo
SIMILAR_WORDS = 0.5  # significant words in common, for queries
RETRY_WINDOW = 16  # failures of one tool a later call is compared with (the most recent)
MATH_WORDS = word_set("x y e pi min max sum abs round sqrt log ln exp pow mod floor ceil avg mean")
INSTRUCTION_ARGUMENTS = word_set(
    "command cmd commands code script sql patch diff regex pattern glob path file_path filepath filename "
    "url uri"
)
EVIDENCE_CHARS = 120

STOPWORDS = word_set(
    """the and for with from that this have has was were are not but all any can her his its our out
    you your they them then than there their what when where which while who whom why how into onto
    over under about after before again also just only very more most some such each both few other
    own same too will would should could shall may might must yes none null nil true false ok okay
    done success successful succeeded status result results data value values type error errors
    message messages response request info item items list name names text content output input
    default auto json none nan inf asc desc"""
)

# A URL whole, else a word, id, path, email or number; a colon ends a token outside URLs, so the
# grep line `src/app.py:12:def main` holds the path `src/app.py`.
_TOKEN = re.compile(r"[a-z][a-z0-9+.\-]*://[^\s\"'<>(){}\[\]`]*[\w/]|\w(?:[\w\-./@]*\w)?")
_PATH_LIKE = re.compile(r"[\w\-.]+/[\w\-./]+|[\w\-]+\.[a-z][a-z0-9]{0,4}")
# Both start with their literal (the comma, the dot) so the regex engine can scan for it fast.
_THOUSANDS = re.compile(r",(?<=\d,)(?=\d{3}(?!\d))")
_HAS_DECIMAL = re.compile(r"\.(?<=\d\.)(?=\d)")
_DECIMAL = re.compile(r"\d+\.\d+")
_INTEGER = re.compile(r"\d+")
_ARITHMETIC = re.compile(r"\d\s*[*/^+]\s*[\d(]|\d\s+-\s+[\d(]")
_UNSATISFYING = re.compile(
    r"\b(no (results?|matches|match|data|records?|items?|entries|files?)|not found|nothing found|"
    r"0 results|does ?n[o']t exist|no such|unknown|invalid|empty)\b",
    re.IGNORECASE,
)


# A token is a run of word characters and `-./@` with that punctuation stripped from its ends: in
# ASCII text, splitting on every ASCII character that cannot be in a token gives the same tokens
# as _TOKEN without running a regular expression per token.
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./@")
_SEPARATORS = str.maketrans({chr(c): " " for c in range(128) if chr(c) not in _TOKEN_CHARS})
_EDGE_PUNCTUATION = "-./@"
# Every ASCII character but digits and the dot to a space: the runs left hold every decimal token.
_NOT_DECIMAL = str.maketrans({chr(c): " " for c in range(128) if chr(c) not in "0123456789."})
_strip_edges = operator.methodcaller("strip", _EDGE_PUNCTUATION)  # mapped in C, not a Python loop


def canonical(token: str) -> str:
    """A token as the index keys it: numbers in one spelling (42.50 -> 42.5, 7.0 -> 7)."""
    if token[0].isdigit() and "." in token and _DECIMAL.fullmatch(token):
        number = float(token)
        if number.is_integer() and abs(number) < 1e15:
            return str(int(number))
        return repr(number)
    return token


def tokens(text: str) -> list[str]:
    """The case-folded tokens of `text` (words, ids, paths, numbers), thousands separators removed.

    >>> tokens("Order W-1043 costs $1,234.50 (see /tmp/a.txt).")
    ['order', 'w-1043', 'costs', '1234.5', 'see', 'tmp/a.txt']
    >>> tokens("src/app.py:12:def main  https://x.dev/a?b=1")
    ['src/app.py', '12', 'def', 'main', 'https://x.dev/a?b=1']
    """
    folded = _THOUSANDS.sub("", text).casefold()
    if folded.isascii() and "://" not in folded:  # see token_set: the same tokens, split not matched
        found = list(filter(None, map(_strip_edges, folded.translate(_SEPARATORS).split())))
    else:
        found = _TOKEN.findall(folded)
    if not _HAS_DECIMAL.search(folded):
        return found  # no decimal number in the text: every token is already canonical
    return [canonical(t) if "." in t else t for t in found]


def token_set(text: str) -> set[str]:
    """`set(tokens(text))`, faster: only the runs with punctuation at an end are stripped, once
    each, and numbers are canonicalised only where the text holds a decimal.

    >>> sorted(token_set("Order W-1043 costs $1,234.50 (see /tmp/a.txt)."))
    ['1234.5', 'costs', 'order', 'see', 'tmp/a.txt', 'w-1043']
    """
    if not text.isascii() or "://" in text:
        return set(tokens(text))
    folded = _THOUSANDS.sub("", text).casefold()
    found = set(folded.translate(_SEPARATORS).split())
    ragged = {w for w in found if w[0] in _EDGE_PUNCTUATION or w[-1] in _EDGE_PUNCTUATION}
    if ragged:
        found -= ragged
        found.update(w for w in (r.strip(_EDGE_PUNCTUATION) for r in ragged) if w)
    if _HAS_DECIMAL.search(folded):
        # The runs of digits and dots, dots stripped, that are tokens: a superset of the decimal
        # tokens (canonical leaves the others as they are), 4x cheaper than a regex over the text.
        runs = folded.translate(_NOT_DECIMAL).split()
        decimals = found.intersection(r.strip(".") for r in runs if "." in r)
        found -= decimals
        found.update(map(canonical, decimals))
    return found


def _is_number(token: str) -> bool:
    return token[:1].isdigit() and (token.isdigit() or bool(_DECIMAL.fullmatch(token)))


def is_trivial_number(token: str) -> bool:
    """0-10 and powers of ten: counts, limits, flags and defaults that reappear by coincidence."""
    if not _INTEGER.fullmatch(token):
        return False
    if len(token) > 1 and token.startswith("0"):
        return False  # a code such as a zip code, not a count
    value = int(token)
    return value <= 10 or (token.strip("0") == "1")


@functools.lru_cache(maxsize=1 << 16)
def token_confidence(token: str) -> float:
    """How much a shared token says, or 0.0 when it says nothing (stop words, trivial numbers).

    >>> token_confidence("w-1043"), token_confidence("ok"), token_confidence("7")
    (0.95, 0.0, 0.0)
    """
    if _is_number(token):
        if is_trivial_number(token):
            return 0.0
        digits = sum(ch.isdigit() for ch in token)
        return DATA_NUMBER if digits >= 4 or "." in token else DATA_SHORT
    if len(token) < 3 or token in STOPWORDS:
        return 0.0
    has_digit = any(ch.isdigit() for ch in token)
    inner = any(ch in "-_./@:" for ch in token)
    if (has_digit and len(token) >= 3) or (inner and len(token) >= 4) or len(token) >= 12:
        return DATA_ID
    if len(token) >= 6:
        return DATA_WORD
    return DATA_SHORT


@dataclass
class Call:
    """One agent tool call as inference sees it."""

    index: int  # position among the trace's agent calls, in emission order
    tool_call_id: str
    seq: int
    name: str
    arguments: Any
    result: str | None
    is_error: bool = False
    source_id: str | None = None
    call_id: str | None = None  # the LLM call that emitted it
    duration_ms: float | None = None
    message_seq: int | None = None  # the assistant message that emitted it
    turn: int = 0  # observed turn (0-based) among the trace's tool-calling assistant turns
    segment: int = 0  # stretch between user messages (0-based)
    effect: Effect | None = None


@dataclass
class Turn:
    """One observed tool-calling assistant turn."""

    index: int
    call_id: str | None  # the LLM call that emitted it
    calls: list[int] = field(default_factory=list)
    input_tokens: float | None = None  # reported, or estimated from the text before it (~4 chars/token)
    output_tokens: float | None = None
    previous_tokens: float | None = None  # input + output of the LLM call before it (for the cache)
    tokens_estimated: bool = False
    llm_ms: float | None = None
    tool_gap_ms: float | None = None  # measured time between this LLM call's end and the next one's start


@dataclass
class Event:
    """Something the model saw, in trace order. `ref` is the call index for args / id / result
    events and the message seq for thought events."""

    position: int
    kind: str  # context | thought | args | id | result
    ref: int | None
    text: str


@dataclass
class TraceInput:
    """What inference reads of one trace, loaded from the store by `read_traces`."""

    trace_id: str
    workload: str | None
    calls: list[Call]
    turns: list[Turn]
    events: list[Event]
    tool_defs: dict[str, tuple[str | None, Any]] = field(
        default_factory=dict
    )  # name -> (description, annotations)
    user_tool_calls: int = 0
    segments: int = 1


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    kind: str  # explicit | data | state | control | derived
    confidence: float
    evidence: str

    @property
    def loose(self) -> bool:
        """Whether the loose mode keeps this edge."""
        return self.confidence >= LOOSE_MIN_CONFIDENCE


@dataclass
class Inference:
    """The edges of one trace: every edge the conservative mode keeps, each marked `loose` or not."""

    trace: TraceInput
    edges: list[Edge]

    def edges_for(self, mode: str) -> list[Edge]:
        if mode == "loose":
            return [e for e in self.edges if e.loose]
        return list(self.edges)


# --- loading -------------------------------------------------------------------------------------

FALLBACK_BASE = 10**9  # positions of calls a trace's messages do not show, after all messages


def read_traces(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> list[TraceInput]:
    """Load the tool calls, messages, tool definitions and LLM calls of `trace_ids` from the store."""
    return [trace_input(*rows) for rows in read_trace_tables(con, trace_ids).rows()]


TraceRows = tuple[str, str | None, list[tuple], list[tuple], list[tuple], list[tuple]]


# Per table `trace_input` reads: its alias, the columns read (after trace_id), and the column its
# rows are in order of within a trace.
ROW_COLUMNS = {
    "tool_calls": (
        "tc",
        "tc.tool_call_id, tc.seq, tc.name, tc.arguments, tc.result, coalesce(tc.is_error, false), "
        "tc.source_tool_call_id, tc.call_id, "
        "coalesce(tc.duration_ms, date_diff('millisecond', tc.started_at, tc.ended_at)), "
        "coalesce(tc.requestor, 'assistant'), tc.copy_of IS NOT NULL",
        "seq",
    ),
    "messages": (
        "m",
        "m.seq, m.role, m.content, m.reasoning, m.tool_call_id, m.call_id, "
        "json_extract_string(m.tool_calls, '$[*].id'), length(m.tool_calls)",
        "seq",
    ),
    "tool_defs": ("d", "d.name, d.description, d.parameters, d.annotations", "name"),
    "llm_calls": (
        "c",
        "c.call_id, c.seq, c.duration_ms, c.started_at, c.ended_at, c.input_tokens, c.output_tokens, "
        "c.usage_reported, c.output_tokens_partial",
        "seq",
    ),
}
ROW_TABLES = tuple(ROW_COLUMNS)
# A response a resumed session logged again (`copy_of`) is the session's history, not a call of its
# own: its LLM call is left out, and its tool calls are read as what the session knew before.
ROW_CONDITIONS = {"llm_calls": "c.copy_of IS NULL"}


@dataclass
class TraceTables:
    """Some traces' rows of each of ROW_TABLES as Arrow tables, in no particular order, and the
    traces' workloads. DuckDB hands the tables over without making a Python object per row, and
    they pickle as a few buffers: a batch is cheap to read here and send to a worker process,
    which makes the rows (`rows`)."""

    trace_ids: list[str]
    workloads: dict[str, str | None]
    tables: dict[str, Any]  # table -> pyarrow.Table

    def rows(self) -> list[TraceRows]:
        """The store rows `trace_input` assembles each trace from, in `trace_ids` order."""
        grouped = {
            table: rows_by_trace(
                pl.from_arrow(self.tables[table]).sort(["trace_id", order], maintain_order=True).rows()
            )
            for table, (_, _, order) in ROW_COLUMNS.items()
        }
        return [
            (
                trace_id,
                self.workloads.get(trace_id),
                *(grouped[table].get(trace_id, []) for table in ROW_TABLES),
            )
            for trace_id in self.trace_ids
        ]


def read_trace_tables(
    con: duckdb.DuckDBPyConnection, trace_ids: list[str], batch: TraceBatch | None = None
) -> TraceTables:
    """The store rows of `trace_ids` that `trace_input` reads.

    `batch`, when these are the traces of a `trace_batches` batch over ROW_TABLES, lets DuckDB scan
    only the stretch of each table that holds them (see analysis/batches.py)."""
    batch = batch or TraceBatch(rowids=None)
    tables = {}
    with store.registered_ids(con, "_tf_dep_ids", trace_ids):
        for table, (alias, columns, _) in ROW_COLUMNS.items():
            where, values = batch.within(alias, table, ROW_CONDITIONS.get(table))  # the batch's stretch
            tables[table] = con.sql(
                f"SELECT {alias}.trace_id, {columns} FROM {table} {alias} "
                f"JOIN _tf_dep_ids USING (trace_id) {where}",
                params=values,
            ).to_arrow_table()
        workloads = dict(
            con.execute("SELECT trace_id, workload FROM traces JOIN _tf_dep_ids USING (trace_id)").fetchall()
        )
    return TraceTables(trace_ids, workloads, tables)


def _parse(arguments: str | None) -> Any:
    if arguments is None:
        return None
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return arguments


def _result_text(result: str | None) -> str:
    """A result's text for the index: JSON results with escapes are flattened so they hide no value."""
    if not result:
        return ""
    if result.lstrip()[:1] in ("{", "[") and "\\u" in result:
        try:
            return " ".join(_flat_text(json.loads(result)))
        except json.JSONDecodeError:
            return result
    return result


def _flat_text(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [part for k, v in value.items() for part in (str(k), *_flat_text(v))]
    if isinstance(value, list):
        return [part for v in value for part in _flat_text(v)]
    return [] if value is None else [str(value)]


def trace_input(
    trace_id: str,
    workload: str | None,
    call_rows: list[tuple],
    message_rows: list[tuple],
    def_rows: list[tuple],
    llm_rows: list[tuple],
) -> TraceInput:
    """Assemble one trace's calls, turns, segments and event timeline from its store rows."""
    raw_events: list[tuple[int, int, str, int | None, str]] = []  # (position, order, kind, ref, text)

    def add(position: int, kind: str, ref: int | None, text: str) -> None:
        raw_events.append((position, len(raw_events), kind, ref, text))

    tool_defs = {}
    for name, description, parameters, hints in def_rows:
        tool_defs[name] = (description, _parse(hints))
        add(-1, "context", None, " ".join(p for p in (name, description, parameters) if p))

    emitted_at: dict[str, int] = {}  # tool_call_id -> seq of the message that emitted it
    answered_at: dict[str, int] = {}  # tool_call_id -> seq of the message holding its result
    user_positions: set[int] = set()
    message_llm_call: dict[int, str | None] = {}
    chars_before: dict[int, int] = {}
    message_chars: dict[int, int] = {}
    running = sum(len(e[4]) for e in raw_events)
    for seq, role, content, reasoning, answers, call_id, ids, calls_len in message_rows:
        chars_before[seq] = running
        message_chars[seq] = len(content or "") + len(reasoning or "") + (calls_len or 0)
        running += message_chars[seq]
        for tool_call_id in ids or []:
            if tool_call_id is not None:
                emitted_at[tool_call_id] = seq
        if role == "tool":
            if answers:
                answered_at[answers] = seq
        elif role == "assistant":
            message_llm_call[seq] = call_id
            text = "\n".join(t for t in (reasoning, content) if t)
            if text:
                add(seq * 4, "thought", seq, text)
        else:
            if role == "user":
                user_positions.add(seq * 4)
            if content:
                add(seq * 4, "context", None, content)

    calls: list[Call] = []
    turn_keys: list[tuple] = []
    user_tool_calls = 0
    fallback_turn, previous_key = 0, None
    for row in call_rows:
        tool_call_id, seq, name, arguments, result, is_error, source_id, call_id, duration, requestor = row[
            :10
        ]
        copied = row[10]  # a resumed session's copy of a call of the session it resumes
        parsed = _parse(arguments)
        message_seq = emitted_at.get(tool_call_id)
        if message_seq is not None:
            key, base = ("message", message_seq), message_seq * 4
        else:  # not shown in the messages: calls of one LLM call share a turn
            key = ("llm", call_id) if call_id is not None else ("call", tool_call_id)
            if key != previous_key:
                fallback_turn += 1
            base = (FALLBACK_BASE + fallback_turn) * 4
        previous_key = key
        answered = answered_at.get(tool_call_id)
        result_position = answered * 4 if answered is not None else base + 3
        if requestor == "user" or copied:
            # the user's own tool calls are what the user knows, and a barrier; a resumed session's
            # copies of earlier calls are what it knew before its first new prompt
            if requestor == "user":
                user_tool_calls += 1
                user_positions.add(base)
            add(base + 1, "context", None, _leaf_text(parsed))
            if result:
                add(result_position, "context", None, _result_text(result))
            continue
        call = Call(
            index=len(calls),
            tool_call_id=tool_call_id,
            seq=seq,
            name=name,
            arguments=parsed,
            result=result,
            is_error=bool(is_error),
            source_id=source_id,
            call_id=call_id,
            duration_ms=duration,
            message_seq=message_seq,
        )
        calls.append(call)
        turn_keys.append(key)
        add(base + 1, "args", call.index, "")
        add(base + 2, "id", call.index, " ".join(sorted({i for i in (source_id, tool_call_id) if i})))
        add(result_position, "result", call.index, _result_text(result))

    raw_events.sort(key=lambda e: (e[0], e[1]))
    events = [Event(position, kind, ref, text) for position, _, kind, ref, text in raw_events]
    barriers = sorted(user_positions)
    turns: list[Turn] = []
    turn_of_key: dict[tuple, int] = {}
    for call, key in zip(calls, turn_keys, strict=True):
        if key not in turn_of_key:
            turn_of_key[key] = len(turns)
            llm_call = message_llm_call.get(call.message_seq) if call.message_seq is not None else None
            turn = Turn(index=len(turns), call_id=llm_call or call.call_id)
            if call.message_seq is not None:
                turn.input_tokens = chars_before.get(call.message_seq, 0) / DEFAULT_CHARS_PER_TOKEN
                turn.output_tokens = message_chars.get(call.message_seq, 0) / DEFAULT_CHARS_PER_TOKEN
                turn.tokens_estimated = True
            turns.append(turn)
        call.turn = turn_of_key[key]
        turns[call.turn].calls.append(call.index)
    for event in events:
        if event.kind == "args":
            calls[event.ref].segment = bisect.bisect_right(barriers, event.position)
    partial = any(row[8] for row in llm_rows)  # only then is a call's output read from its text
    text_output = (
        {c: message_chars[seq] / DEFAULT_CHARS_PER_TOKEN for seq, c in message_llm_call.items() if c}
        if partial
        else {}
    )
    _apply_llm_calls(turns, llm_rows, text_output)
    return TraceInput(
        trace_id=trace_id,
        workload=workload,
        calls=calls,
        turns=turns,
        events=events,
        tool_defs=tool_defs,
        user_tool_calls=user_tool_calls,
        segments=len(barriers) + 1,
    )


def _apply_llm_calls(turns: list[Turn], llm_rows: list[tuple], text_output: dict[str, float]) -> None:
    """Measured LLM time, reported tokens and the measured tool gap of each turn, from its LLM call.

    `llm_rows`: (call_id, seq, duration_ms, started_at, ended_at, input_tokens, output_tokens,
    usage_reported, output_tokens_partial) in seq order. `text_output`: per call, its output
    estimated from its message's text, counted where the reported output is only a lower bound."""

    def output(row: tuple) -> float:
        reported = float(row[6] or 0)
        return max(reported, text_output.get(row[0], 0.0)) if row[8] else reported

    by_id = {row[0]: position for position, row in enumerate(llm_rows)}
    for turn in turns:
        position = by_id.get(turn.call_id) if turn.call_id else None
        if position is None:
            continue
        _, _, duration, _, ended, input_tokens, _, reported, _ = llm_rows[position]
        turn.llm_ms = duration
        if reported and input_tokens is not None:
            turn.input_tokens = float(input_tokens)
            turn.output_tokens = output(llm_rows[position])
            turn.tokens_estimated = False
            if position > 0:
                previous = llm_rows[position - 1]
                if previous[7] and previous[5] is not None:
                    turn.previous_tokens = float(previous[5]) + output(previous)
        if position + 1 < len(llm_rows) and ended is not None:
            next_start = llm_rows[position + 1][3]
            if next_start is not None and next_start >= ended:
                turn.tool_gap_ms = (next_start - ended).total_seconds() * 1000.0
    previous_estimate = None
    for turn in turns:
        if turn.tokens_estimated:
            turn.previous_tokens = previous_estimate
        if turn.input_tokens is not None:
            previous_estimate = turn.input_tokens + (turn.output_tokens or 0)


# --- argument values -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Lookup:
    """One value of a call's arguments to find among earlier sources."""

    path: str
    tokens: tuple[str, ...]
    confidence: float
    free_text: bool = False  # the whole of a free-text argument
    shown: str = ""  # the value as written, for the evidence
    arithmetic: bool = False  # the whole of an arithmetic expression, or one of its numbers


def leaves(value: Any, path: str = "") -> Iterable[tuple[str, Any]]:
    """(path, leaf) for every scalar in a JSON value.

    >>> list(leaves({"items": [{"sku": "A-1"}], "n": 2}))
    [('items[0].sku', 'A-1'), ('n', 2)]
    """
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from leaves(item, f"{path}[{position}]")
    else:
        yield path, value


def _leaf_text(value: Any) -> str:
    return " ".join(_scalar_text(leaf) for _, leaf in leaves(value) if _scalar_text(leaf))


def _scalar_text(leaf: Any) -> str:
    if leaf is None or isinstance(leaf, bool):
        return ""
    if isinstance(leaf, float):
        return repr(leaf)
    return str(leaf)


def is_arithmetic(text: str, words: list[str]) -> bool:
    """An arithmetic expression over numbers: `816.74 + 430.82`, `round(12.5 * 3.2, 2)`."""
    numbers = sum(1 for w in words if _is_number(w))
    if numbers < 2 or not _ARITHMETIC.search(text):
        return False
    return all(_is_number(w) or w in MATH_WORDS for w in words)


def is_free_text(text: str, words: list[str]) -> bool:
    """A free-text argument: six words or more, several lines, or an arithmetic expression."""
    return len(words) >= FREE_TEXT_TOKENS or "\n" in text.strip() or is_arithmetic(text, words)


def lookups(arguments: Any) -> list[Lookup]:
    """The values of `arguments` worth finding in earlier sources.

    A short value is looked up whole (one token, or a phrase of consecutive tokens); inside longer
    values the specific tokens (ids, non-trivial numbers) are looked up on their own too. A free-text
    value is also looked up whole, to tell text copied from a source from text the model wrote.
    """
    found: list[Lookup] = []
    for path, leaf in leaves(arguments):
        text = _scalar_text(leaf)
        words = tokens(text) if text else []
        if not words:
            continue
        confidences = [token_confidence(w) for w in words]
        if not any(confidences):
            continue
        path = path or "(arguments)"
        shown = " ".join(text.split())
        if is_arithmetic(text, words):
            found.append(Lookup(path, tuple(words), DATA_PHRASE, True, shown, arithmetic=True))
            found += [
                Lookup(path, (w,), c, False, w, arithmetic=True)
                for w, c in zip(words, confidences, strict=True)
                if c and _is_number(w)
            ]
            continue
        if is_free_text(text, words):
            found.append(Lookup(path, tuple(words), DATA_PHRASE, True, shown))
        elif len(words) == 1:
            found.append(Lookup(path, (words[0],), confidences[0], False, shown))
            continue
        else:
            significant = sum(1 for c in confidences if c)
            confidence = DATA_PHRASE if significant >= 2 else max(confidences)
            found.append(Lookup(path, tuple(words), confidence, False, shown))
        for word, confidence in zip(words, confidences, strict=True):
            if confidence >= DATA_NUMBER:
                found.append(Lookup(path, (word,), confidence, False, word))
    return found


def resource_keys(arguments: Any, effect: Effect, resource_params: frozenset[str] = frozenset()) -> set[str]:
    """The values naming the resources a call touches: its configured resource arguments, else its
    top-level key-like arguments (ids, paths, urls...) and arguments configured as resources for any
    tool (`resource_params`)."""
    if not isinstance(arguments, dict):
        return set()
    keys = set()
    for name in ("command", "cmd", "script"):  # the files a shell command line names
        if isinstance(arguments.get(name), str):
            keys.update(w for w in tokens(arguments[name]) if _PATH_LIKE.fullmatch(w))
    for name, value in arguments.items():
        wanted = (
            name in effect.resource if effect.resource else (is_key_param(name) or name in resource_params)
        )
        if not wanted:
            continue
        for _, leaf in leaves(value):
            if leaf is None or isinstance(leaf, bool):
                continue
            text = " ".join(tokens(str(leaf)))
            if text:
                keys.add(text)
    return keys


def unsatisfying(result: str | None) -> bool:
    """An empty or not-found result, after which the same tool called again is a correction."""
    if result is None:
        return False
    text = result.strip()
    if text in ("", "[]", "{}", "null", "None", '""', "0"):
        return True
    return len(text) <= 200 and bool(_UNSATISFYING.search(text))


# --- inference -----------------------------------------------------------------------------------


class _Index:
    """Token -> first event, and for phrase anchors the events holding them, built in trace order."""

    def __init__(self, anchors: set[str]) -> None:
        self.first: dict[str, int] = {}
        self.anchors = anchors
        self.postings: dict[str, list[int]] = {}
        # Events holding an anchor: their tokens joined, or (token set, raw text) until a phrase
        # whose every word they hold is looked for in them (most never are).
        self.texts: dict[int, str | tuple[Collection[str], str]] = {}

    def add(self, event: int, words: Collection[str], text: str = "") -> bool:
        """Index one event's tokens (a list in text order, or the set of them with the `text` they
        came from); returns whether it was the first to hold a significant token.

        Set operations keep the per-token work in C: a trace's results hold most of its tokens."""
        first = self.first
        fresh = (words if isinstance(words, set) else set(words)).difference(first)
        first.update(dict.fromkeys(fresh, event))
        if self.anchors and not self.anchors.isdisjoint(words):
            self.texts[event] = " " + " ".join(words) + " " if isinstance(words, list) else (words, text)
            for word in self.anchors.intersection(words):
                self.postings.setdefault(word, []).append(event)
        return any(map(token_confidence, fresh))

    def first_source(self, words: tuple[str, ...]) -> int | None:
        """The first event holding `words` (consecutive), or None."""
        if len(words) == 1:
            return self.first.get(words[0])
        needle = " " + " ".join(words) + " "
        for event in self.postings.get(_anchor(words), ()):
            text = self.texts[event]
            if isinstance(text, tuple):
                held, raw = text
                if not held.issuperset(words):
                    continue
                text = self.texts[event] = " " + " ".join(tokens(raw)) + " "
            if needle in text:
                return event
        return None


def _anchor(words: tuple[str, ...]) -> str:
    """The token a phrase is found by: its most specific (so its postings are short)."""
    return max(words, key=lambda w: (token_confidence(w), len(w)))


@dataclass
class _Segment:
    """What the rules remember within one stretch between user messages."""

    earlier_turns: int = 0  # bit mask of calls in turns before the current one
    current_turn: int = 0
    answered: int = 0  # calls whose results have come in
    informative: int = 0  # calls whose results brought values seen nowhere before
    writes: int = 0
    writes_since_unknown: int = 0  # writes since the last tool of unknown effect
    unknown_after_writes: int | None = None  # the last tool of unknown effect that follows writes
    last_barrier: int | None = None
    key_writer: dict[str, int] = field(default_factory=dict)
    key_readers: dict[str, list[int]] = field(default_factory=dict)
    failed_by_name: dict[str, int] = field(default_factory=dict)  # tool name -> mask of failed calls
    failed_by_noun: dict[str, int] = field(default_factory=dict)  # noun -> mask of failed calls
    awaiting_retry: dict[str, list[int]] = field(default_factory=dict)  # tool name -> failed, not retried
    turn: int = -1
    resource_params: frozenset[str] = frozenset()  # argument names traceforge.toml made resources
    keys: set[str] = field(default_factory=set)  # resource keys of the call being processed


class _Graph:
    """Edges found so far, keeping the strongest per (src, dst, kind), and each call's ancestors in
    either mode."""

    def __init__(self, calls: list[Call]) -> None:
        self.calls = calls
        self.best: dict[tuple[int, int, str], Edge] = {}
        # Bit masks per call, complete once the call is processed: its ancestors through every edge,
        # and through the edges the loose mode keeps.
        self.ancestors = [0] * len(calls)
        self.loose_ancestors = [0] * len(calls)

    def add(self, src: int, dst: int, kind: str, confidence: float, evidence: str) -> None:
        calls = self.calls
        if src == dst or calls[src].turn >= calls[dst].turn:
            return  # calls of one turn were issued together: independent by construction
        key = (src, dst, kind)
        old = self.best.get(key)
        if old is None or confidence > old.confidence:
            self.best[key] = Edge(src, dst, kind, confidence, evidence[:EVIDENCE_CHARS])
        self.ancestors[dst] |= self.ancestors[src] | (1 << src)
        if confidence >= LOOSE_MIN_CONFIDENCE:
            self.loose_ancestors[dst] |= self.loose_ancestors[src] | (1 << src)

    def after_all(self, dst: int, mask: int, kind: str, confidence: float, evidence: str) -> None:
        """Make `dst` follow every call in `mask` with edges to the latest of them only: the rest
        are their ancestors already, or become so through the edges added (in every mode that
        keeps an edge of this confidence), so the edges stay near-linear in the calls."""
        ancestors = self.loose_ancestors if confidence >= LOOSE_MIN_CONFIDENCE else self.ancestors
        needed = mask & ~ancestors[dst]
        while needed:
            top = needed.bit_length() - 1
            self.add(top, dst, kind, confidence, evidence)
            needed &= ~((1 << top) | ancestors[top])


def infer(trace: TraceInput, config: DepsConfig | None = None) -> Inference:
    """Every dependency edge of one trace (see the module docstring for the rules).

    Example: a call reading an order id that a search returned depends on the search.

    >>> calls = [Call(0, "a", 0, "search_orders", {"q": "blue lamp"}, '{"order_id": "W-1043"}', turn=0),
    ...          Call(1, "b", 1, "get_order", {"order_id": "W-1043"}, "{}", turn=1)]
    >>> events = [Event(0, "context", None, "find my blue lamp order"), Event(5, "args", 0, ""),
    ...           Event(7, "result", 0, calls[0].result), Event(9, "args", 1, "")]
    >>> trace = TraceInput("t", None, calls, [Turn(0, None, [0]), Turn(1, None, [1])], events)
    >>> [(e.src, e.dst, e.kind, e.evidence) for e in infer(trace).edges]
    [(0, 1, 'data', 'order_id=W-1043')]
    """
    config = config or DepsConfig()
    calls = trace.calls
    plans: list[list[Lookup]] = []
    anchors: set[str] = set()
    for call in calls:
        found = lookups(call.arguments)
        plans.append(found)
        anchors.update(_anchor(lookup.tokens) for lookup in found if len(lookup.tokens) > 1)
        description, hints = trace.tool_defs.get(call.name, (None, None))
        call.effect = classify(call.name, call.arguments, description, hints, config)
    index = _Index(anchors)
    graph = _Graph(calls)
    sources: list[tuple[str, int | None]] = []  # per indexed event: (kind, ref)
    informative: set[int] = set()
    quotes: dict[int, dict[int, str]] = {}  # message seq -> {result's call: a specific token quoted}
    arguments = [_Arguments.of(call.arguments) for call in calls]
    argument_words = [a.tokens for a in arguments]
    turn_words: dict[int | None, set[str]] = {}  # message seq -> tokens of all its calls' arguments
    for call in calls:
        used = turn_words.setdefault(call.message_seq, set())
        for word in argument_words[call.index]:
            used.add(word)
            if "/" in word or "." in word:  # `cli.py` is used by a call on `src/app/cli.py`
                used.update(re.split(r"[./]", word))
                used.update(word.split("/"))
    state = _Segment(resource_params=config.resource_params)
    segment = -1

    for event in trace.events:
        number = len(sources)
        sources.append((event.kind, event.ref))
        if event.kind in ("context", "thought", "id"):
            if event.kind == "thought":
                words = tokens(event.text) if event.text else []
                quoted = _quoted_results(words, index, sources, informative, turn_words.get(event.ref, set()))
                if quoted:
                    quotes[event.ref] = quoted
                index.add(number, words)
            else:
                index.add(number, token_set(event.text) if event.text else set(), event.text)
            continue
        call = calls[event.ref]
        if event.kind == "result":
            new = index.add(number, token_set(event.text) if event.text else set(), event.text)
            if call.segment == segment:
                _record_result(call, new, state, informative)
            continue
        # An "args" event: decide call B's incoming edges, then index its arguments.
        if call.segment != segment:
            segment, state = call.segment, _Segment(resource_params=config.resource_params)
        if call.turn != state.turn:
            state.turn = call.turn
            state.earlier_turns |= state.current_turn
            state.current_turn = 0
        _edges_for_call(call, plans[call.index], index, sources, graph, state, quotes, arguments)
        index.add(number, argument_words[call.index])
        _record_call(call, state)
    edges = sorted(graph.best.values(), key=lambda e: (e.dst, e.src, e.kind))
    return Inference(trace, edges)


def _quoted_results(
    words: list[str],
    index: _Index,
    sources: list[tuple[str, int | None]],
    informative: set[int],
    used: set[str],
) -> dict[int, str]:
    """Results whose specific values (ids, non-trivial numbers) a turn's text repeats without any
    call of the turn using them (a value the calls use is a data edge of the call that uses it)."""
    quoted: dict[int, str] = {}
    for word in words:
        if word in used:
            continue
        source = index.first.get(word)
        if source is None or token_confidence(word) < DATA_NUMBER:
            continue
        kind, ref = sources[source]
        if kind == "result" and ref in informative:
            quoted.setdefault(ref, word)
    return quoted


def _record_result(call: Call, new_values: int, state: _Segment, informative: set[int]) -> None:
    if new_values:
        informative.add(call.index)
        state.informative |= 1 << call.index
    state.answered |= 1 << call.index
    if call.is_error or unsatisfying(call.result):
        awaiting = state.awaiting_retry.setdefault(call.name, [])
        awaiting.append(call.index)
        del awaiting[:-RETRY_WINDOW]
        bit = 1 << call.index
        state.failed_by_name[call.name] = state.failed_by_name.get(call.name, 0) | bit
        for noun in tool_nouns(call.name):
            state.failed_by_noun[noun] = state.failed_by_noun.get(noun, 0) | bit


@dataclass(frozen=True)
class _Arguments:
    """A call's arguments as text, its tokens and its significant words, computed once per call."""

    text: str
    tokens: list[str]
    words: frozenset[str]

    @classmethod
    def of(cls, arguments: Any) -> _Arguments:
        text = _leaf_text(arguments)
        found = tokens(text)
        return cls(text, found, frozenset(w for w in found if token_confidence(w)))


def _similar(first: _Arguments, second: _Arguments) -> bool:
    """Arguments that look like one call corrected into another: mostly the same significant words
    (a search narrowed or widened), or text that differs by a character or two (a typo in an id)."""
    a, b = first.words, second.words
    if a and b and len(a & b) / len(a | b) >= SIMILAR_WORDS:
        return True
    shorter, longer = sorted((len(first.text), len(second.text)))
    if not longer or 2 * shorter / (shorter + longer) < SIMILAR_RATIO:
        return False  # the ratio cannot reach the bar: skip building the matcher
    matcher = difflib.SequenceMatcher(None, first.text, second.text, autojunk=False)
    return matcher.quick_ratio() >= SIMILAR_RATIO and matcher.ratio() >= SIMILAR_RATIO


def _edges_for_call(
    call: Call,
    plan: list[Lookup],
    index: _Index,
    sources: list[tuple[str, int | None]],
    graph: _Graph,
    state: _Segment,
    quotes: dict[int, dict[int, str]],
    arguments: list[_Arguments],
) -> None:
    calls = graph.calls
    b = call.index
    derived_paths = []
    unexplained = set()  # arithmetic expressions holding a number seen nowhere before
    for lookup in plan:
        source = index.first_source(lookup.tokens)
        if source is None:
            if lookup.arithmetic and not lookup.free_text:
                unexplained.add(lookup.path)
            elif lookup.free_text and not _is_instruction(lookup.path):
                derived_paths.append(lookup.path)
            elif len(lookup.tokens) == 1:
                _composed_token(lookup, index, sources, graph, b)
            continue
        kind, src = sources[source]
        if kind == "id":
            graph.add(src, b, "explicit", EXPLICIT, f"{lookup.path} names call {calls[src].tool_call_id}")
        elif kind == "result" and (lookup.free_text or not _known_words(lookup, index, sources)):
            graph.add(src, b, "data", lookup.confidence, f"{lookup.path}={lookup.shown}")
    effect = call.effect.effect
    keys = resource_keys(call.arguments, call.effect, state.resource_params)
    state.keys = keys
    if effect != "pure":
        for key in keys:
            writer = state.key_writer.get(key)
            if writer is not None:
                graph.add(writer, b, "state", STATE_KEY, f"{calls[writer].name} wrote {key}")
            if effect in ("write", "unknown"):
                for reader in state.key_readers.get(key, ()):
                    graph.add(reader, b, "state", STATE_WAR, f"{calls[reader].name} read {key} before")
    retried = False
    for failed in state.awaiting_retry.get(call.name, ()):
        if calls[failed].turn < call.turn and _similar(arguments[failed], arguments[b]):
            error = calls[failed].is_error
            confidence = CONTROL_AFTER_FAILURE if retried else CONTROL_RETRY if error else CONTROL_CORRECTION
            why = "retry after an error" if error else "same tool again after an empty result"
            graph.add(failed, b, "control", confidence, why)
            retried = True
    for source, word in quotes.get(call.message_seq, {}).items():
        if calls[source].segment == call.segment:
            graph.add(source, b, "control", CONTROL_QUOTE, f"the turn's text quotes {word}")
    # Conservative rules meaning "after all of these": edges to the latest of them only.
    if effect in ("write", "unknown"):  # never speculate a side effect made after a failure
        same = state.failed_by_name.get(call.name, 0) & state.earlier_turns
        graph.after_all(b, same, "control", CONTROL_WRITE_AFTER_FAILURE, f"{call.name} again after it failed")
        sibling = 0
        for noun in tool_nouns(call.name):
            sibling |= state.failed_by_noun.get(noun, 0)
        graph.after_all(
            b,
            sibling & state.earlier_turns,
            "control",
            CONTROL_AFTER_FAILURE,
            "a write after a sibling tool failed",
        )
    if state.last_barrier is not None:
        barrier = calls[state.last_barrier].name
        graph.after_all(
            b, 1 << state.last_barrier, "state", STATE_BARRIER, f"after {barrier}: unknown effects"
        )
    if effect == "unknown":
        # After the writes since the last such tool, and after that tool (which follows the writes
        # before it): every earlier write precedes, with edges linear in the calls.
        graph.after_all(
            b,
            state.writes_since_unknown & state.earlier_turns,
            "state",
            STATE_UNKNOWN_AFTER_WRITE,
            "runs after the writes before it",
        )
        previous = state.unknown_after_writes
        if previous is not None:
            graph.add(previous, b, "state", STATE_UNKNOWN_AFTER_WRITE, "runs after the writes before it")
        graph.after_all(b, state.earlier_turns, "state", STATE_BARRIER, f"{call.name}: unknown effects")
    if effect in ("read", "unknown") and not keys and not call.arguments and state.writes:
        graph.after_all(
            b,
            state.writes & state.earlier_turns,
            "state",
            STATE_KEYLESS_READ,
            "argument-less read after a write",
        )
    derived_paths = [p for p in derived_paths if p in unexplained or not _is_arithmetic_path(plan, p)]
    if derived_paths and not (
        state.informative & state.earlier_turns == 0
        and all(_known_words(lookup, index, sources) for lookup in plan if lookup.free_text)
    ):
        graph.after_all(
            b,
            state.answered & state.earlier_turns,
            "derived",
            DERIVED,
            f"free text in {derived_paths[0]} written after these results",
        )


def _composed_token(
    lookup: Lookup, index: _Index, sources: list[tuple[str, int | None]], graph: _Graph, b: int
):
    """A qualified name or path seen nowhere whole (`s.plan_code`, `src/app/cli.py`): its parts may
    come from results (the column `plan_code` a describe returned, the `cli.py` a listing showed)."""
    (token,) = lookup.tokens
    if "." not in token and "/" not in token:
        return
    segments = token.split("/")
    parts = ["/".join(segments[i:]) for i in range(1, len(segments))] + segments + re.split(r"[./]", token)
    for part in dict.fromkeys(parts):
        if _is_number(part) or token_confidence(part) < DATA_WORD:
            continue
        source = index.first.get(part)
        if source is not None and sources[source][0] == "result":
            confidence = min(token_confidence(part), lookup.confidence or DATA_WORD)
            graph.add(sources[source][1], b, "data", confidence, f"{lookup.path}={part} (in {token})")


def _known_words(lookup: Lookup, index: _Index, sources: list[tuple[str, int | None]]) -> bool:
    """Whether every significant word of a value was first seen in the user's, system's or tool
    definitions' words (the user's "blue ergonomic chair" becoming the query "blue chair")."""
    if len(lookup.tokens) < 2:
        return False
    for word in lookup.tokens:
        if token_confidence(word):
            first = index.first.get(word)
            if first is None or sources[first][0] != "context":
                return False
    return True


def _is_arithmetic_path(plan: list[Lookup], path: str) -> bool:
    return any(lookup.arithmetic and lookup.path == path for lookup in plan)


def _is_instruction(path: str) -> bool:
    """Arguments holding code, commands or patterns: their values are matched as data, but they are
    not prose that could paraphrase a result."""
    name = path.rsplit(".", 1)[-1].split("[", 1)[0].lower()
    return name in INSTRUCTION_ARGUMENTS


def _record_call(call: Call, state: _Segment) -> None:
    b = call.index
    state.current_turn |= 1 << b
    effect = call.effect.effect
    if effect == "unknown":
        state.last_barrier = b
        if state.writes_since_unknown or state.unknown_after_writes is not None:
            state.unknown_after_writes = b
        state.writes_since_unknown = 0
    if effect == "write":
        state.writes |= 1 << b
        state.writes_since_unknown |= 1 << b
    if effect == "pure":
        return
    for key in state.keys:
        if effect in ("write", "unknown"):
            state.key_writer[key] = b
            state.key_readers[key] = []
        else:
            state.key_readers.setdefault(key, []).append(b)
