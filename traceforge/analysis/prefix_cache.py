"""Prefix reuse: each LLM call's input as a chain of block hashes, and a prefix-cache simulator.

Every call's input is rendered from the stored conversation: the trace's tool definitions, then
each message before the assistant message the call produced (role, text, tool calls, tool
results; reasoning is left out, as clients drop it when re-sending). Where the source marks a
context compaction (`traces.attributes.compactions`, from Claude Code), a call after it sees the
tool definitions, then the messages from the compaction's summary on: the history before it was
no longer in the model's context, so it is neither rendered nor hashed. The rendered text is cut
into blocks of `BLOCK_SIZE` tokens and each block gets a hash of its text and the hash of the block
before it, so equal ids mean equal prefixes, as in the Mooncake trace format. The hash chain is
seeded with the model name: two models never share KV.

Token counts are estimated from characters (`fit_calibration`): per model, a characters-per-token
ratio, and per workload an overhead of tokens the log does not show (system prompt, tool schemas,
chat template), fitted on the calls that reported usage; 4 characters per token for a model with
none. The same fit places the block boundaries (the overhead as a shared leading stretch) and
estimates the tokens of calls that reported none, so the two are consistent. Output has a ratio of
its own per model, fitted on the calls that reported their whole output.

A request's length is the reported input tokens where the source gave them, else the estimate;
its hash ids are the first ceil(length / BLOCK_SIZE) ids of the chain. Where a call reported more
input than its text and the calls before it showed (what the log left out), a stand-in for the
difference joins the chain where its input ends, so the later calls reuse it (`_ChainText`); ids
unique to the call fill a tail the chain still cannot (it then counts as never reused). Its
output length is the reported output tokens, else the response's characters over the model's
output ratio; where the reported count is only a lower bound (`llm_calls.output_tokens_partial`),
the larger of the two.

The simulator walks the requests in arrival order: a request hits on the leading run of its ids
that are in the cache (a prefix cache stops at the first miss), then all its blocks are stored.
Caches: unlimited, LRU bounded in blocks, and/or a time-to-live since a block's last use. A
request's blocks are touched tail first, so under LRU its tail is evicted before its prefix, as
in vLLM's free-block queue. The hit ratio is by tokens: hit blocks x BLOCK_SIZE, capped at the
request's length, over the sum of lengths.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import math
import operator
from array import array
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from itertools import groupby, takewhile
from typing import Any, NamedTuple

import duckdb
import polars as pl

from traceforge import store
from traceforge.analysis.batches import TraceBatch, rows_by_trace, trace_spans
from traceforge.workers import ordered_map, worker_count

BLOCK_SIZE = 512
DIGEST_BYTES = 8  # of a block's hash: ids are numbered per distinct digest
DEFAULT_CHARS_PER_TOKEN = 4.0


@dataclass(slots=True)
class Request:
    """One LLM request in mooncake_trace terms, with where it came from when built from a store."""

    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: Sequence[int]  # from the store: an array of ints, compact in memory and to send to workers
    session_id: str | None = None
    delay_ms: float | None = None  # wait after the session's previous response ended
    call_id: str | None = None
    workload: str | None = None
    model: str | None = None
    input_estimated: bool = False
    output_estimated: bool = False
    prefix_synthesized: bool = False  # no conversation text: ids unique to the call
    timed: bool = True  # False: the source gave no time; placed after its trace's previous call
    end_ms: float | None = None
    cache_read_tokens: int | None = None  # what the provider reported, when it did

    def __reduce__(self) -> tuple[type[Request], tuple]:
        # Pickled as its fields in order, rebuilt by __init__: a slots dataclass is otherwise
        # pickled and rebuilt field by field in Python, three times slower, and a profile sends
        # every request from a worker and most to another.
        return (Request, _request_fields(self))


_request_fields = operator.attrgetter(*(f.name for f in fields(Request)))


@dataclass
class RequestLog:
    """The store's LLM calls as requests, sorted by arrival, with how they were measured."""

    requests: list[Request]
    block_size: int
    chars_per_token: dict[str, dict[str, Any]]
    counts: dict[str, int]


@dataclass
class CacheResult:
    """What one simulated cache did over a sequence of requests."""

    capacity_blocks: int | None
    ttl_s: float | None
    block_size: int
    requests: int = 0
    total_tokens: int = 0
    hit_tokens: int = 0
    total_blocks: int = 0
    hit_blocks: int = 0
    peak_blocks: int = 0  # most blocks resident at once
    per_request_hit_tokens: array = field(default_factory=lambda: array("q"), repr=False)

    @property
    def hit_ratio(self) -> float | None:
        """Share of input tokens served from the cache."""
        return self.hit_tokens / self.total_tokens if self.total_tokens else None

    @property
    def block_hit_ratio(self) -> float | None:
        return self.hit_blocks / self.total_blocks if self.total_blocks else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "capacity_blocks": self.capacity_blocks,
            "capacity_tokens": self.capacity_blocks * self.block_size if self.capacity_blocks else None,
            "ttl_s": self.ttl_s,
            "requests": self.requests,
            "input_tokens": self.total_tokens,
            "hit_tokens": self.hit_tokens,
            "hit_ratio": self.hit_ratio,
            "block_hit_ratio": self.block_hit_ratio,
            "peak_blocks": self.peak_blocks,
        }


def simulate(
    requests: Iterable[Request],
    capacity_blocks: int | None = None,
    ttl_s: float | None = None,
    block_size: int = BLOCK_SIZE,
) -> CacheResult:
    """Replay `requests` in arrival order through a prefix cache and count the hits.

    `capacity_blocks` None is an unlimited cache; `ttl_s` None keeps blocks forever. Both may be
    combined (an LRU whose blocks also expire).

    >>> a = Request(0, 1000, 10, [1, 2])
    >>> b = Request(5, 700, 10, [1, 3])
    >>> result = simulate([a, b])
    >>> result.hit_tokens, result.total_tokens
    (512, 1700)
    """
    if capacity_blocks is not None and capacity_blocks < 1:
        raise ValueError("capacity_blocks must be at least 1 (or None for an unlimited cache)")
    if ttl_s is not None and ttl_s < 0:
        raise ValueError("ttl_s must not be negative")
    result = CacheResult(capacity_blocks, ttl_s, block_size)
    cache: OrderedDict[int, float] = OrderedDict()  # id -> time of last use, oldest first
    ttl_ms = ttl_s * 1000.0 if ttl_s is not None else None
    for request in sorted(requests, key=lambda r: r.timestamp_ms):
        now = request.timestamp_ms
        if ttl_ms is not None:
            while cache and next(iter(cache.values())) < now - ttl_ms:
                cache.popitem(last=False)
        run = 0
        for block in request.hash_ids:
            if block not in cache:
                break
            run += 1
        _count(result, request, run)
        for block in reversed(request.hash_ids):
            cache[block] = now
            cache.move_to_end(block)
        if capacity_blocks is not None:
            while len(cache) > capacity_blocks:
                cache.popitem(last=False)
        result.peak_blocks = max(result.peak_blocks, len(cache))
    return result


CURVE_CAPACITIES: tuple[int | None, ...] = (1_000, 3_000, 10_000, 50_000, None)
CURVE_TTLS: tuple[float, ...] = (60, 300, 3_600)


def hit_ratio_curve(
    requests: list[Request],
    capacities: Iterable[int | None] = CURVE_CAPACITIES,
    ttls: Iterable[float] = CURVE_TTLS,
    block_size: int = BLOCK_SIZE,
    results: dict[tuple[int | None, float | None], CacheResult] | None = None,
) -> list[dict[str, Any]]:
    """Hit ratios for LRU caches of each capacity (no TTL), then unlimited caches with each TTL.

    `results`: replays already run, by (capacity, ttl), such as `replay_chains` gives; the
    others are simulated here."""
    results = {} if results is None else results
    configs = [(capacity, None) for capacity in capacities] + [(None, ttl) for ttl in ttls]
    return [
        (results.get(config) or simulate(requests, *config, block_size=block_size)).as_dict()
        for config in configs
    ]


def replay_chains(
    requests: Iterable[Request],
    capacities: Iterable[int | None] = CURVE_CAPACITIES,
    ttls: Iterable[float] = CURVE_TTLS,
    block_size: int = BLOCK_SIZE,
) -> dict[tuple[int | None, float | None], CacheResult]:
    """What `simulate` gives for each LRU capacity (no TTL) and each TTL (unlimited), in one pass,
    for requests whose hash ids are prefix chains, as `load_requests` builds them: an id stands
    for its block and every block before it, so it is at the same position in every request that
    holds it (ids unique to one request, such as its unreused tail, are chains too).

    `simulate` touches every block of every request once per cache; with chains, what a cache
    holds follows from less. A block is last touched by one request, its owner. Walking a request's
    ids, those seen before come first, with owners from the most recent back (a request touches
    its prefix last), and the blocks of one owner are consecutive. Under LRU a block is cached
    while fewer than `capacity` distinct blocks were touched after it: the blocks owned by requests
    since its owner (a Fenwick tree of blocks per owner sums them), plus those its owner touched
    after it, which are the run's earlier blocks of that owner. Under a TTL a block is cached while
    its owner is recent enough. So each request costs a few operations per owner, not per block.
    """
    ordered = sorted(requests, key=lambda r: r.timestamp_ms)
    capacities, ttls = list(capacities), list(ttls)
    results = {(c, None): CacheResult(c, None, block_size) for c in capacities}
    results.update({(None, t): CacheResult(None, t, block_size) for t in ttls})
    size = len(ordered)
    tree = array("q", [0]) * (size + 1)  # Fenwick tree: blocks owned by each request, by position
    owned = array("q", [0]) * size
    times = array("d", (r.timestamp_ms for r in ordered))
    owner: dict[int, int] = {}
    windows = [[t * 1000.0, 0, 0, 0] for t in ttls]  # ttl_ms, first request within it, blocks, peak
    distinct = 0

    def add(position: int, blocks: int) -> None:
        owned[position] += blocks
        position += 1
        while position <= size:
            tree[position] += blocks
            position += position & -position

    def owned_before(position: int) -> int:  # blocks owned by requests before `position`
        total = 0
        while position:
            total += tree[position]
            position -= position & -position
        return total

    for r, request in enumerate(ordered):
        ids = request.hash_ids
        now = times[r]
        # The seen run's owners, most recent first: (owner, its blocks in the run, blocks owned by
        # the requests since it).
        owners = map(owner.__getitem__, takewhile(owner.__contains__, ids))
        owned_now = owned_before(r)
        groups = [(q, len(list(run)), owned_now - owned_before(q + 1)) for q, run in groupby(owners)]
        for capacity in capacities:
            hits = 0
            for _, blocks, since in groups:
                room = blocks if capacity is None else capacity - since
                hits += max(0, min(blocks, room))
                if room < blocks:
                    break
            _count(results[capacity, None], request, hits)
        for ttl, window in zip(ttls, windows, strict=True):
            cutoff = now - window[0]
            while times[window[1]] < cutoff:
                window[2] -= owned[window[1]]
                window[1] += 1
            hits = 0
            for q, blocks, _ in groups:
                if times[q] < cutoff:
                    break
                hits += blocks
            _count(results[None, ttl], request, hits)
        seen = 0
        for q, blocks, _ in groups:
            add(q, -blocks)
            seen += blocks
            for window in windows:
                if q >= window[1]:
                    window[2] -= blocks
        touched = dict.fromkeys(ids, r)
        owner.update(touched)
        add(r, len(touched))
        distinct += len(touched) - seen
        for capacity in capacities:
            results[capacity, None].peak_blocks = distinct if capacity is None else min(capacity, distinct)
        for ttl, window in zip(ttls, windows, strict=True):
            window[2] += len(touched)
            window[3] = max(window[3], window[2])
            results[None, ttl].peak_blocks = window[3]
    return results


def _count(result: CacheResult, request: Request, run: int) -> None:
    """Count one request that hit on its first `run` blocks."""
    hit = min(run * result.block_size, request.input_length)
    result.requests += 1
    result.total_tokens += request.input_length
    result.hit_tokens += hit
    result.total_blocks += len(request.hash_ids)
    result.hit_blocks += run
    result.per_request_hit_tokens.append(hit)


# --- building requests from the store -------------------------------------------------------


@dataclass
class _Call:
    call_id: str
    trace_id: str
    seq: int
    model: str
    workload: str | None
    start_ms: float | None
    end_ms: float | None
    duration_ms: float | None
    trace_start_ms: float | None
    input_tokens: int | None
    cache_read_tokens: int | None
    output_tokens: int | None
    usage_reported: bool
    output_partial: bool  # output_tokens is a lower bound: the larger of it and the estimate is used
    input_chars: int | None = None  # None: no conversation text for this call
    output_chars: int = 0
    context: int = 0  # which of its trace's rendered contexts: one more after each compaction


def render_tools(defs: list[tuple[str, str | None, str | None]]) -> str:
    """The tool definitions as one text segment (name, description, JSON schema per tool)."""
    if not defs:
        return ""
    lines = [f"{name}: {description or ''}\n{parameters or ''}" for name, description, parameters in defs]
    return "<tools>\n" + "\n".join(lines) + "\n</tools>\n"


# json.dumps(..., sort_keys=True, ensure_ascii=False) builds an encoder per call; one does for all.
_TOOL_CALL_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False)


def render_message(role: str, content: str | None, tool_calls: str | None, name: str | None) -> str:
    """One message as the model reads it again in later requests (reasoning excluded)."""
    parts = [_head(role, name)]
    if content:
        parts.append(content + "\n")
    if tool_calls:
        parts.extend(_rendered_call(call) for call in json.loads(tool_calls))
    return "".join(parts)


def rendered_length(role: str, content_chars: int | None, tool_calls: str | None, name: str | None) -> int:
    """`len(render_message(...))` of a message whose content has `content_chars` characters, from
    that count: the calibration needs only lengths, and reading them spares moving every text."""
    length = len(_head(role, name)) + (content_chars + 1 if content_chars else 0)
    if tool_calls:
        length += sum(len(_rendered_call(call)) for call in json.loads(tool_calls))
    return length


def _head(role: str, name: str | None) -> str:
    return f"<|{role}|>" + (f" {name}" if role == "tool" and name else "") + "\n"


def _rendered_call(call: dict[str, Any]) -> str:
    return _TOOL_CALL_JSON.encode({"name": call.get("name"), "arguments": call.get("arguments")}) + "\n"


# Conversations are read a batch of traces at a time, each batch one stretch of each table
# (analysis.batches): sorting every message of the store at once would spill to disk on a big one.
# A batch is read as Arrow tables, which makes no Python object per row, so that rendering it (the
# costly part) can run in worker processes: reading the rows as Python tuples here to send them
# would cost this process about as much as rendering them.
CONVERSATION_TABLES = ("llm_calls", "messages", "tool_defs")
CONVERSATION_BATCH_CALLS = 20_000
# Up to this many LLM calls, worker processes cost more than they save: the main process keeps
# the numbering of every block, so the workers relieve it of little (measured:
# docs/performance.md#worker-processes-when-they-pay).
PARALLEL_MIN_CALLS = 50_000


def _calls_sql(where: str) -> str:
    return f"""
    SELECT c.trace_id, c.call_id, c.seq, coalesce(c.model, '(unknown)'), w.workload,
           epoch_ms(c.started_at), epoch_ms(c.ended_at), c.duration_ms, epoch_ms(t.started_at),
           c.input_tokens, c.cache_read_tokens, c.output_tokens, c.usage_reported,
           coalesce(c.output_tokens_partial, false), {store.COMPACTION_STARTS_SQL}
    FROM llm_calls c JOIN _tf_batch USING (trace_id) JOIN traces t USING (trace_id)
    LEFT JOIN trace_workloads w USING (trace_id)
    {where}
"""


def _messages_sql(where: str, lengths: bool = False) -> str:
    content, reasoning = ("m.content", "m.reasoning")
    if lengths:
        content, reasoning = f"length({content})", f"length({reasoning})"
    return f"""
    SELECT m.trace_id, m.seq, m.role, {content}, m.tool_calls, m.name, m.call_id, {reasoning}
    FROM messages m JOIN _tf_batch USING (trace_id)
    {where}
"""


def _defs_sql(where: str) -> str:
    return f"""
    SELECT d.trace_id, d.name, d.description, d.parameters
    FROM tool_defs d JOIN _tf_batch USING (trace_id)
    {where}
"""


# The columns each of a batch's tables is sorted by once it reaches the process that renders it:
# sorting rows that carry long texts costs DuckDB more than it costs polars, and costs there.
CONVERSATION_ORDER = (["trace_id", "seq"], ["trace_id", "seq"], ["trace_id", "name"])


@dataclass
class ConversationBatch:
    """Some traces' calls, messages and tool definitions as Arrow tables, in no particular order;
    with `lengths`, the messages' content and reasoning as their lengths in characters."""

    trace_ids: list[str]
    tables: tuple[Any, Any, Any]  # pyarrow.Table each: what DuckDB hands over without copying
    lengths: bool = False


def _read_batch(con: duckdb.DuckDBPyConnection, lengths: bool, batch: TraceBatch) -> ConversationBatch:
    tables = []
    with store.registered_ids(con, "_tf_batch", batch.trace_ids):
        for sql, alias, table, condition in (
            # a response a resumed session logged again is in its conversation, not a request of its own
            (_calls_sql, "c", "llm_calls", "c.copy_of IS NULL"),
            (functools.partial(_messages_sql, lengths=lengths), "m", "messages", None),
            (_defs_sql, "d", "tool_defs", None),
        ):
            where, values = batch.within(alias, table, condition)
            tables.append(con.sql(sql(where), params=values).to_arrow_table())
    return ConversationBatch(batch.trace_ids, (tables[0], tables[1], tables[2]), lengths)


def _map_batches(
    con: duckdb.DuckDBPyConnection,
    function: Callable[..., Any],
    shared: tuple,
    workers: int | None,
    lengths: bool = False,
) -> Iterator[Any]:
    """`function(*shared, batch)` for every `ConversationBatch` of the store (read with `lengths`),
    in order: in `workers` processes (by default one per CPU when there are over
    `PARALLEL_MIN_CALLS` LLM calls) while this one reads the next batches, else here."""
    spans = trace_spans(con, CONVERSATION_TABLES)
    count = worker_count(workers, spans.main_rows, PARALLEL_MIN_CALLS)
    batches = spans.batches(max(1, CONVERSATION_BATCH_CALLS // count))
    read = (_read_batch(con, lengths, batch) for batch in batches)
    if count > 1:
        return ordered_map(f"{function.__module__}:{function.__name__}", read, count, shared)
    return (function(*shared, batch) for batch in read)


def _conversations(batch: ConversationBatch) -> Iterator[tuple[list[_Call], dict[int, str]]]:
    """Per trace of `batch`: its calls (with input and output character counts filled in) and its
    rendered contexts (see `_conversation`; none when the batch holds only lengths)."""
    calls, messages, defs = (
        rows_by_trace(pl.from_arrow(table).sort(order, maintain_order=True).rows())
        for table, order in zip(batch.tables, CONVERSATION_ORDER, strict=True)
    )
    for trace_id in batch.trace_ids:
        yield _conversation(
            trace_id,
            calls.get(trace_id, []),
            messages.get(trace_id, []),
            defs.get(trace_id, []),
            texts=not batch.lengths,
        )


def _conversation(
    trace_id: str, call_rows: list[tuple], message_rows: list[tuple], def_rows: list[tuple], texts: bool
) -> tuple[list[_Call], dict[int, str]]:
    """A trace's calls and its rendered contexts: the tool definitions and the messages, and after
    each compaction the tool definitions again and the messages from its summary on. A call's
    `input_chars` is the length of its context's text before the assistant message it produced.

    Without `texts`, the message rows hold their content's and reasoning's lengths in place of
    them: the calls' sizes are the same, and no context is rendered."""
    calls = [
        _Call(
            call_id=r[0],
            trace_id=trace_id,
            seq=r[1],
            model=r[2],
            workload=r[3],
            start_ms=r[4],
            end_ms=r[5],
            duration_ms=r[6],
            trace_start_ms=r[7],
            input_tokens=r[8],
            cache_read_tokens=r[9],
            output_tokens=r[10],
            usage_reported=bool(r[11]),
            output_partial=r[12],
        )
        for r in call_rows
    ]
    starts = store.context_starts(call_rows[0][13]) if call_rows else []  # every call row has them
    tools = render_tools(def_rows)
    contexts: dict[int, list[str]] = {}  # context -> its rendered pieces
    offset = 0
    ends: dict[str, tuple[int, int]] = {}  # call id -> (context, offset)
    output_chars: dict[str, int] = {}
    for seq, role, content, tool_calls, name, call_id, reasoning in message_rows:
        context = store.context_of(starts, seq)
        if context not in contexts:  # every context starts with the tool definitions
            contexts[context] = [tools]
            offset = len(tools)
        if texts:
            text = render_message(role, content, tool_calls, name)
            contexts[context].append(text)
            size, reasoning_chars = len(text), len(reasoning or "")
        else:
            size, reasoning_chars = rendered_length(role, content, tool_calls, name), reasoning or 0
        if role == "assistant" and call_id is not None and call_id not in ends:
            ends[call_id] = (context, offset)
            output_chars[call_id] = size + reasoning_chars
        offset += size
    for call in calls:
        if call.call_id in ends:
            call.context, call.input_chars = ends[call.call_id]
            call.output_chars = output_chars[call.call_id]
    return calls, {context: "".join(pieces) for context, pieces in contexts.items()} if texts else {}


PLAUSIBLE_CHARS_PER_TOKEN = (1.0, 10.0)


@dataclass
class Calibration:
    """How rendered characters become tokens: a characters-per-token ratio per model, and per
    workload and model an overhead of tokens the conversation text does not show (system prompt,
    tool schemas, chat template), fitted on the calls that reported usage."""

    chars_per_token: dict[str, float] = field(default_factory=dict)
    method: dict[str, str] = field(default_factory=dict)  # fixed-effects | ratio | default-slope | default
    calls: dict[str, int] = field(default_factory=dict)
    overhead_tokens: dict[tuple[str | None, str], int] = field(default_factory=dict)
    # Output apart from input: a response's text can hide tokens its input never had (reasoning
    # the log leaves out, tool calls the client re-renders), so one ratio would undercount it.
    output_chars_per_token: dict[str, float] = field(default_factory=dict)
    output_method: dict[str, str] = field(default_factory=dict)  # ratio | input
    output_calls: dict[str, int] = field(default_factory=dict)

    def overhead(self, workload: str | None, model: str) -> int:
        return self.overhead_tokens.get((workload, model), 0)

    def input_tokens(self, workload: str | None, model: str, chars: int) -> int:
        return self.overhead(workload, model) + math.ceil(chars / self.chars_per_token[model])

    def output_tokens(self, model: str, chars: int) -> int:
        return math.ceil(chars / self.output_chars_per_token[model])

    def report(self) -> dict[str, dict[str, Any]]:
        return {
            model: {
                "chars_per_token": ratio,
                "method": self.method[model],
                "calibrated_on_calls": self.calls[model],
                "overhead_tokens": {
                    str(w): n
                    for (w, m), n in sorted(self.overhead_tokens.items(), key=lambda kv: str(kv[0]))
                    if m == model
                },
                "output_chars_per_token": self.output_chars_per_token[model],
                "output_method": self.output_method[model],
                "output_calibrated_on_calls": self.output_calls[model],
            }
            for model, ratio in sorted(self.chars_per_token.items())
        }


def fit_calibration(
    points: dict[str, dict[str | None, list[tuple[int, int]]]],
    models: Iterable[str],
    output_points: dict[str, list[tuple[int, int]]] | None = None,
) -> Calibration:
    """Fit tokens = overhead[workload] + characters / chars_per_token per model, and output tokens =
    response characters / output_chars_per_token.

    `points[model][workload]` are (rendered characters, reported input tokens) of calls. The slope
    is the within-workload least-squares slope (a fixed-effects regression: each workload has its
    own overhead, the model one tokenizer); each overhead is its workload's mean tokens minus
    slope x mean characters, kept between 0 and the workload's smallest reported input, and where
    an overhead is held at such a bound the slope is fitted again with it fixed there. When the
    slope is undefined or implausible (outside 1-10 characters per token, as when logs hold a
    history the model never saw after a context compaction they do not mark), the plain ratio of
    the sums is used with no overhead; where that ratio is under 1 character per token (the log
    hides most of the input, as a system prompt around a short conversation), the text counts at
    4 characters per token and each workload's overhead is its mean tokens minus that, within the
    same bounds. Models without reported usage get 4 characters per token.

    `output_points[model]` are (response characters, reported output tokens) of calls that reported
    their whole output; the output ratio is the ratio of their sums. Where a model has none, or
    the ratio is implausible (outside 1-10: output mostly hidden from the log), the input's ratio
    is used.

    >>> fit = fit_calibration({"m": {"w": [(400, 150), (800, 250)]}}, ["m"], {"m": [(300, 100)]})
    >>> fit.chars_per_token["m"], fit.overhead("w", "m"), fit.output_chars_per_token["m"]
    (4.0, 50, 3.0)
    """
    calibration = Calibration()
    low, high = PLAUSIBLE_CHARS_PER_TOKEN
    for model in models:
        _fit_input(calibration, model, points.get(model, {}))
        pairs = (output_points or {}).get(model, [])
        tokens = sum(y for _, y in pairs)
        ratio = sum(x for x, _ in pairs) / tokens if tokens else None
        calibration.output_calls[model] = len(pairs)
        if ratio is not None and low <= ratio <= high:
            calibration.output_chars_per_token[model], calibration.output_method[model] = ratio, "ratio"
        else:
            calibration.output_chars_per_token[model] = calibration.chars_per_token[model]
            calibration.output_method[model] = "input"
    return calibration


def _fit_input(calibration: Calibration, model: str, groups: dict[str | None, list[tuple[int, int]]]) -> None:
    """`fit_calibration`'s input fit for one model, from its (characters, tokens) per workload."""
    low, high = PLAUSIBLE_CHARS_PER_TOKEN
    n = sum(len(g) for g in groups.values())
    calibration.calls[model] = n
    if not n:
        calibration.chars_per_token[model] = DEFAULT_CHARS_PER_TOKEN
        calibration.method[model] = "default"
        return
    means = {}
    for workload, group in groups.items():
        mean_x = sum(x for x, _ in group) / len(group)
        mean_y = sum(y for _, y in group) / len(group)
        means[workload] = (mean_x, mean_y)
    floors = {workload: min(y for _, y in group) for workload, group in groups.items()}
    # An overhead is kept between 0 and its workload's smallest reported input; where it is held
    # at a bound, the slope is fitted again with that overhead fixed (the least-squares fit under
    # the bound), until no other overhead crosses one.
    fixed: dict[str | None, float] = {}
    while True:
        sxx = sxy = 0.0
        for workload, group in groups.items():
            if workload in fixed:
                sxx += sum(x * x for x, _ in group)
                sxy += sum(x * (y - fixed[workload]) for x, y in group)
            else:
                mean_x, mean_y = means[workload]
                sxx += sum((x - mean_x) ** 2 for x, _ in group)
                sxy += sum((x - mean_x) * (y - mean_y) for x, y in group)
        slope = sxy / sxx if sxx > 0 else 0.0
        overheads = {w: fixed.get(w, mean_y - slope * mean_x) for w, (mean_x, mean_y) in means.items()}
        crossed = {w: min(max(v, 0.0), floors[w]) for w, v in overheads.items() if not 0.0 <= v <= floors[w]}
        if not crossed or slope <= 0:
            break
        fixed.update(crossed)
    if slope > 0 and low <= 1 / slope <= high:
        calibration.chars_per_token[model] = 1 / slope
        calibration.method[model] = "fixed-effects"
        for workload, overhead in overheads.items():
            calibration.overhead_tokens[(workload, model)] = round(overhead)
        return
    chars = sum(x for g in groups.values() for x, _ in g)
    tokens = sum(y for g in groups.values() for _, y in g)
    if chars / tokens >= low:
        calibration.chars_per_token[model] = chars / tokens
        calibration.method[model] = "ratio"
        return
    # Under one character per token, the log hides most of the input (a system prompt and tool
    # schemas it never shows, around a short conversation): the text counts at the default ratio
    # and each workload's overhead holds the rest, within the same bounds as the line's.
    calibration.chars_per_token[model] = DEFAULT_CHARS_PER_TOKEN
    calibration.method[model] = "default-slope"
    for workload, (mean_x, mean_y) in means.items():
        overhead = min(max(mean_y - mean_x / DEFAULT_CHARS_PER_TOKEN, 0.0), floors[workload])
        calibration.overhead_tokens[(workload, model)] = round(overhead)


class CallSize(NamedTuple):
    """What the calibration needs of a call, and the token estimate after it."""

    call_id: str
    trace_id: str
    context: int
    model: str
    workload: str | None
    input_chars: int | None
    output_chars: int
    usage_reported: bool
    input_tokens: int | None
    output_tokens: int | None
    output_partial: bool


def call_sizes(batch: ConversationBatch) -> list[CallSize]:
    """Every call of `batch` with its rendered sizes: the calibration's pass over a batch."""
    return [
        CallSize(
            c.call_id,
            c.trace_id,
            c.context,
            c.model,
            c.workload,
            c.input_chars,
            c.output_chars,
            c.usage_reported,
            c.input_tokens,
            c.output_tokens,
            c.output_partial,
        )
        for calls, _ in _conversations(batch)
        for c in calls
    ]


def _calibrate(
    con: duckdb.DuckDBPyConnection, workers: int | None = None, collect: list[CallSize] | None = None
) -> Calibration:
    """Fit the calibration over every conversation; `collect`, when given, receives every call."""
    points: dict[str, dict[str | None, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    output_points: dict[str, list[tuple[int, int]]] = defaultdict(list)
    models: set[str] = set()
    for sizes in _map_batches(con, call_sizes, (), workers, lengths=True):
        for call in sizes:
            models.add(call.model)
            if call.usage_reported and call.input_tokens and call.input_chars:
                points[call.model][call.workload].append((call.input_chars, call.input_tokens))
            if call.usage_reported and not call.output_partial and call.output_tokens and call.output_chars:
                output_points[call.model].append((call.output_chars, call.output_tokens))
        if collect is not None:
            collect.extend(sizes)
    # in a fixed order, so the fit's floating-point sums do not depend on where traces sit in the store
    ordered = {
        model: {
            workload: sorted(groups[workload])
            for workload in sorted(groups, key=lambda w: (w is None, w or ""))
        }
        for model, groups in points.items()
    }
    return fit_calibration(ordered, sorted(models), {m: sorted(p) for m, p in output_points.items()})


ESTIMATE_METHOD = (
    "input: the workload's unrendered overhead + rendered characters / characters per token, both fitted "
    "per model on its calls that reported usage (see chars_per_token; "
    f"{DEFAULT_CHARS_PER_TOKEN:g} characters per token where none did), + the tokens the calls before it "
    "in its context reported beyond their text; output: response characters / "
    "characters per output token, fitted per model on its calls that reported their whole output (else "
    "the input's ratio); where the source logged only part of a call's output count, the larger of the "
    "two"
)


def estimate_tokens(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Estimated input and output tokens of every call that has conversation text.

    Returns a frame (call_id, input_tokens, output_tokens); the method is `ESTIMATE_METHOD`.
    Calls with no conversation text are absent.
    """
    calls: list[CallSize] = []
    calibration = _calibrate(con, collect=calls)
    rows = []
    # (model, context) of the current trace -> the tokens its calls reported beyond their text,
    # which the calls after them hold too (as in the profile's chains)
    hidden: dict[tuple[str, int], _HiddenTokens] = {}
    trace_id = None
    for c in calls:
        if c.input_chars is None:
            continue
        if c.trace_id != trace_id:
            hidden, trace_id = {}, c.trace_id
        chain = hidden.setdefault((c.model, c.context), _HiddenTokens())
        rendered = calibration.input_tokens(c.workload, c.model, c.input_chars)
        before = chain.hidden_before(c.input_chars)
        if c.usage_reported and c.input_tokens and c.input_tokens > rendered + before:
            chain.hide(c.input_chars, c.input_tokens - rendered - before)
        chain.cut_to(c.input_chars)
        rows.append((c.call_id, rendered + before, calibration.output_tokens(c.model, c.output_chars)))
    return pl.DataFrame(
        rows,
        schema={"call_id": pl.Utf8, "input_tokens": pl.Int64, "output_tokens": pl.Int64},
        orient="row",
    )


def _block_digests(
    text: str | _ChainText, end: int, chars_per_block: float, seed: bytes, cache: list[bytes]
) -> tuple[int, bytes | None]:
    """The blocks of text[:end]: how many full blocks it has (their digests are `cache[:full]`,
    `cache` being the chain of full blocks of `text` computed so far, extended here as needed) and
    the digest of the partial last block, or None."""
    full = int(end // chars_per_block)
    while len(cache) < full:
        k = len(cache)
        start, stop = round(k * chars_per_block), round((k + 1) * chars_per_block)
        previous = cache[-1] if cache else seed
        cache.append(hashlib.blake2b(previous + text[start:stop].encode(), digest_size=DIGEST_BYTES).digest())
    start = round(full * chars_per_block)
    if end <= start:
        return full, None
    previous = cache[full - 1] if full else seed
    return full, hashlib.blake2b(previous + text[start:end].encode(), digest_size=DIGEST_BYTES).digest()


class _HiddenTokens:
    """Tokens the calls of one chain reported beyond their rendered text, by where in the text
    each call's input ends: a later call's input holds those before its own end."""

    __slots__ = ("_reach", "_tokens_through", "at")

    def __init__(self) -> None:
        self.at: list[int] = []  # where each call's hidden tokens go in the text, in order
        self._tokens_through: list[int] = []  # hidden tokens up to and including each
        self._reach = 0  # the furthest position in the text a call's blocks have been cut to

    def hidden_before(self, position: int) -> int:
        """Hidden tokens a call whose input ends at text[:position] holds."""
        k = bisect.bisect_right(self.at, position)
        return self._tokens_through[k - 1] if k else 0

    def cut_to(self, position: int) -> None:
        """Note that a call's blocks were cut up to text[:position] (and the stand-ins there)."""
        self._reach = max(self._reach, position)

    def hide(self, position: int, tokens: int) -> bool:
        """Note `tokens` hidden at text[position], after those already there; refused where a
        call's blocks were cut past it, which would change them."""
        if position < self._reach:
            return False
        self.at.append(position)
        self._tokens_through.append((self._tokens_through[-1] if self._tokens_through else 0) + tokens)
        return True


class _ChainText:
    """A chain's text (the overhead's stand-in, then one rendered context) with stand-ins for the
    tokens a call reported beyond it inserted where that call's input ends.

    A log may not hold everything the client sent (Claude Code leaves out the reminders and
    attachments it adds to a turn, and the thinking it re-sends): a call's reported input then
    exceeds its rendered text's estimate. Those tokens were in the conversation from that turn on,
    and the later calls of the context re-sent them as part of their prefix, so the stand-in goes
    into the chain's text, where every later call's blocks hold it, and only the part of a call's
    shortfall that the calls before it did not already show is added. Sliced like a string."""

    __slots__ = ("_chars_through", "_stand_ins", "_starts", "hidden", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.hidden = _HiddenTokens()  # the stand-ins' positions in `text`, and their tokens
        self._starts: list[int] = []  # where each stand-in starts in the chain's text
        self._stand_ins: list[str] = []
        self._chars_through: list[int] = []  # stand-in characters up to and including each

    def end(self, position: int) -> int:
        """Where text[:position] ends in the chain's text: after the stand-ins inserted up to it."""
        k = bisect.bisect_right(self.hidden.at, position)
        return position + self._chars_through[k - 1] if k else position

    def hide(self, position: int, tokens: int, stand_in: str) -> bool:
        """Insert `stand_in` (for `tokens` tokens) at text[position], after the stand-ins already
        there; refused where a call's blocks were cut past it, which would change them."""
        start = self.end(position)
        if not self.hidden.hide(position, tokens):
            return False
        self._starts.append(start)
        self._stand_ins.append(stand_in)
        self._chars_through.append((self._chars_through[-1] if self._chars_through else 0) + len(stand_in))
        return True

    def __getitem__(self, part: slice) -> str:
        start, stop = part.start, part.stop
        if not self._starts:
            return self.text[start:stop]
        pieces = []
        i = bisect.bisect_right(self._starts, start) - 1  # the last stand-in starting at or before `start`
        if i < 0 or start >= self._starts[i] + len(self._stand_ins[i]):
            i += 1  # `start` is in the text, before stand-in i
        position = start
        while position < stop:
            if i < len(self._starts) and self._starts[i] <= position:
                first = self._starts[i]
                upto = min(stop, first + len(self._stand_ins[i]))
                pieces.append(self._stand_ins[i][position - first : upto - first])
                i += 1
            else:  # the text between stand-in i - 1 and stand-in i
                upto = min(stop, self._starts[i]) if i < len(self._starts) else stop
                shift = self._chars_through[i - 1] if i else 0
                pieces.append(self.text[position - shift : upto - shift])
            position = upto
        return "".join(pieces)


@functools.cache
def _model_seed(model: str) -> bytes:
    """The digest a model's chains start from: two models never share a block."""
    return hashlib.blake2b(model.encode(), digest_size=DIGEST_BYTES).digest()


def _stand_in(unit: str, chars: int) -> str:
    """`chars` characters of `unit` repeated."""
    return (unit * (chars // len(unit) + 1))[:chars] if chars > 0 else ""


def _overhead_text(workload: str | None, model: str, chars: int) -> str:
    """Stand-in text for a workload's unrendered overhead: the same for every trace of the
    workload and model (they share that system prompt and those tools), different otherwise."""
    return _stand_in(f"\x00{workload}\x00{model}", chars)


REQUEST_COUNTS = (
    "calls",
    "without_text",
    "without_size",
    "input_estimated",
    "output_estimated",
    "without_time",
    "padded",
)


@dataclass(slots=True)
class _TraceRequests:
    """One trace's requests as a batch's pass makes them, before their blocks get ids: per chain
    (a model and one of the trace's contexts), the digests of its full blocks (8 bytes each,
    joined) as far as a request uses them, and per request (the request, its call's seq, the
    chain it starts with or None, how many of the chain's blocks it starts with, the digests of
    the blocks after them)."""

    chains: dict[tuple[str, int], bytes]
    requests: list[tuple[Request, int, tuple[str, int] | None, int, list[bytes]]]


def batch_requests(
    calibration: Calibration, block_size: int, batch: ConversationBatch
) -> tuple[list[_TraceRequests], dict[str, int]]:
    """Every call of `batch` as a Request, with the digests of its blocks, and the batch's
    `REQUEST_COUNTS`: the second pass over a batch, once the calibration is fitted."""
    counts = dict.fromkeys(REQUEST_COUNTS, 0)
    traces = []
    for calls, texts in _conversations(batch):
        # (model, context) -> the text its blocks are cut from, its full blocks so far
        chains: dict[tuple[str, int], tuple[_ChainText, list[bytes]]] = {}
        used: dict[tuple[str, int], int] = {}  # chain -> full blocks some request starts with
        made: list[tuple[Request, int, tuple[str, int] | None, int, list[bytes]]] = []
        previous: Request | None = None
        for call in calls:
            counts["calls"] += 1
            ratio = calibration.chars_per_token[call.model]
            chain_key, position, hidden, rendered_tokens = None, 0, 0, 0
            estimated_input = None
            if call.input_chars is not None:
                text = texts[call.context]
                chain_key = (call.model, call.context)
                if chain_key not in chains:
                    # every context starts with the same overhead and tools: their blocks are shared
                    overhead = _overhead_text(
                        call.workload,
                        call.model,
                        round(calibration.overhead(call.workload, call.model) * ratio),
                    )
                    chains[chain_key] = (_ChainText(overhead + text), [])
                chain_text, chain = chains[chain_key]
                position = len(chain_text.text) - len(text) + call.input_chars
                hidden = chain_text.hidden.hidden_before(position)
                rendered_tokens = calibration.input_tokens(call.workload, call.model, call.input_chars)
                estimated_input = rendered_tokens if call.input_chars else None
            if call.usage_reported and call.input_tokens:
                length, input_estimated = call.input_tokens, False
            elif estimated_input:
                # the tokens the calls before it reported beyond their text are in its input too
                length, input_estimated = estimated_input + hidden, True
            else:
                counts["without_size"] += 1
                continue
            needed = math.ceil(length / block_size)
            prefix, tail = 0, []
            if chain_key is not None:
                shortfall = length - rendered_tokens - hidden
                if shortfall > 0:  # tokens the log does not show: a stand-in for them joins the chain
                    counts["padded"] += 1
                    unit = f"\x01{call.trace_id}\x01{call.context}"
                    chain_text.hide(position, shortfall, _stand_in(unit, round(shortfall * ratio)))
                chain_text.hidden.cut_to(position)
                full, partial = _block_digests(
                    chain_text, chain_text.end(position), block_size * ratio, _model_seed(call.model), chain
                )
                prefix = min(full, needed)
                used[chain_key] = max(used.get(chain_key, 0), prefix)
                if partial is not None:
                    tail.append(partial)
            else:
                counts["without_text"] += 1
            if prefix + len(tail) < needed:  # the chain falls short (rounding, a stand-in refused) or no text
                for i in range(prefix + len(tail), needed):
                    tail.append(
                        hashlib.blake2b(f"{call.call_id}#{i}".encode(), digest_size=DIGEST_BYTES).digest()
                    )
            del tail[needed - prefix :]
            if call.usage_reported and call.output_tokens is not None and not call.output_partial:
                output, output_estimated = call.output_tokens, False
            else:
                output, output_estimated = calibration.output_tokens(call.model, call.output_chars), True
                if call.usage_reported and call.output_tokens is not None:  # a lower bound
                    output = max(output, call.output_tokens)
            start = call.start_ms
            if start is None and call.end_ms is not None and call.duration_ms is not None:
                start = call.end_ms - call.duration_ms
            timed = start is not None
            if not timed:
                counts["without_time"] += 1
                if previous is not None:
                    start = previous.end_ms if previous.end_ms is not None else previous.timestamp_ms
                else:
                    start = call.trace_start_ms
            end = call.end_ms
            if end is None and start is not None and call.duration_ms is not None:
                end = start + call.duration_ms
            request = Request(
                timestamp_ms=start if start is not None else math.nan,
                input_length=length,
                output_length=max(output, 1),
                hash_ids=(),
                session_id=call.trace_id,
                call_id=call.call_id,
                workload=call.workload,
                model=call.model,
                input_estimated=input_estimated,
                output_estimated=output_estimated,
                prefix_synthesized=call.input_chars is None,
                timed=timed,
                end_ms=end,
                cache_read_tokens=call.cache_read_tokens if call.usage_reported else None,
            )
            if previous is not None and timed and previous.timed and previous.end_ms is not None:
                request.delay_ms = max(start - previous.end_ms, 0.0)
            counts["input_estimated"] += input_estimated
            counts["output_estimated"] += output_estimated
            made.append((request, call.seq, chain_key, prefix, tail))
            previous = request
        traces.append(_TraceRequests({k: b"".join(chains[k][1][:n]) for k, n in used.items()}, made))
    return traces, counts


def load_requests(
    con: duckdb.DuckDBPyConnection, block_size: int = BLOCK_SIZE, workers: int | None = None
) -> RequestLog:
    """Every LLM call in the store as a Request with prefix-chained hash ids, in arrival order.

    Calls are grouped into workloads by `trace_workloads` (see
    `traceforge.analysis.workloads.assign_workloads`). A call with neither conversation text
    nor reported input tokens has no size and is left out (counted in `counts`). Conversations
    are rendered and hashed in `workers` processes (see `_map_batches`); every way gives the
    same requests.
    """
    # Two passes over the conversations: the first fits the calibration the second needs to place
    # block boundaries. Keeping every rendered conversation between them would hold the store's
    # text in memory; the first reads only the messages' lengths, and the second renders them.
    calibration = _calibrate(con, workers)
    # Each block digest gets a provisional id as it comes in, so a request holds a compact array
    # rather than its digests; the ids are renumbered by first use in arrival order at the end.
    provisional: dict[bytes, int] = {}
    requests: list[tuple[Request, str, int]] = []
    counts = dict.fromkeys(REQUEST_COUNTS, 0)
    # Each request arrives from a worker with its own copies of its trace id, workload and model:
    # one copy of each is kept (a few hundred bytes a request, with every request held).
    names: dict[str | None, str | None] = {}
    for traces, batch_counts in _map_batches(con, batch_requests, (calibration, block_size), workers):
        for key, value in batch_counts.items():
            counts[key] += value
        for trace in traces:
            chain_ids = {
                key: [
                    provisional.setdefault(blob[i : i + DIGEST_BYTES], len(provisional))
                    for i in range(0, len(blob), DIGEST_BYTES)
                ]
                for key, blob in trace.chains.items()
            }
            for request, seq, chain_key, prefix, tail in trace.requests:
                ids = chain_ids[chain_key][:prefix] if chain_key is not None else []
                ids.extend(provisional.setdefault(digest, len(provisional)) for digest in tail)
                request.hash_ids = array(_id_typecode(len(provisional)), ids)
                request.session_id = names.setdefault(request.session_id, request.session_id)
                request.workload = names.setdefault(request.workload, request.workload)
                request.model = names.setdefault(request.model, request.model)
                requests.append((request, request.session_id, seq))
    del names
    known = [r.timestamp_ms for r, *_ in requests if not math.isnan(r.timestamp_ms)]
    origin = min(known) if known else 0.0
    for request, *_ in requests:
        if math.isnan(request.timestamp_ms):
            request.timestamp_ms = origin  # no time anywhere in its trace
        request.timestamp_ms -= origin
        if request.end_ms is not None:
            request.end_ms -= origin
    requests.sort(key=lambda item: (item[0].timestamp_ms, item[1], item[2]))
    unique = len(provisional)
    del provisional
    typecode = _id_typecode(unique)
    renumbered = array(typecode, [-1]) * unique
    following = 0
    for request, *_ in requests:
        ids = array(typecode, map(renumbered.__getitem__, request.hash_ids))
        if -1 in ids:  # blocks first used here: mostly a request's tail, after its reused prefix
            for position in range(ids.index(-1), len(ids)):
                if ids[position] < 0:
                    old = request.hash_ids[position]
                    if renumbered[old] < 0:
                        renumbered[old] = following
                        following += 1
                    ids[position] = renumbered[old]
        request.hash_ids = ids
    return RequestLog(
        requests=[r for r, *_ in requests],
        block_size=block_size,
        chars_per_token=calibration.report(),
        counts=counts,
    )


def _id_typecode(ids: int) -> str:
    """The array typecode for block ids numbered 0 to `ids` - 1: 32-bit, half the memory, for all
    but enormous stores."""
    return "i" if ids <= 2**31 else "q"


def provider_comparison(
    requests: list[Request],
    block_size: int = BLOCK_SIZE,
    results: dict[tuple[int | None, float | None], CacheResult] | None = None,
) -> dict[str, Any] | None:
    """The hit ratio the provider reported beside the simulated one, on the calls whose usage had
    cache fields. The simulation runs over all requests (so earlier calls warm the cache) and
    counts only those calls. None when no call reported cache fields. `results`: replays already
    run, by (capacity, ttl), as `hit_ratio_curve` takes them."""
    with_cache = [i for i, r in enumerate(requests) if r.cache_read_tokens is not None]
    if not with_cache:
        return None
    total = sum(requests[i].input_length for i in with_cache)
    reported = sum(requests[i].cache_read_tokens for i in with_cache)
    out: dict[str, Any] = {
        "calls": len(with_cache),
        "input_tokens": total,
        "reported_cache_read_tokens": reported,
        "reported_hit_ratio": reported / total if total else None,
    }
    ordered = sorted(range(len(requests)), key=lambda i: requests[i].timestamp_ms)
    position = {index: k for k, index in enumerate(ordered)}
    for label, ttl in (("simulated_unlimited", None), ("simulated_ttl_300s", 300.0)):
        result = (results or {}).get((None, ttl)) or simulate(requests, None, ttl, block_size)
        hits = sum(result.per_request_hit_tokens[position[i]] for i in with_cache)
        out[f"{label}_hit_ratio"] = hits / total if total else None
    return out
