"""Choosing the traces an export is made of, removing duplicates, and splitting them.

Steps, each counted so the dataset card can say what was left out and why:

1. `matching_trace_ids`: the store's traces that match the criteria (workload, outcome, model,
   date range, minimum tool calls), in SQL.
2. `resumed_elsewhere`: a conversation a resumed session copied whole (`claude --resume` starts a
   new session with a copy of the one it resumes) is in the longer one already: exported there.
3. `over_limits`: length limits drop a conversation whole, never truncate it (a cut agent trace
   loses its outcome): messages, characters, and tokens (the largest recorded input + output of one
   LLM call in the trace; where the source reported no usage, characters / 4).
4. `Deduplicator`: exact duplicates by a hash of the normalised text (case folded, whitespace
   collapsed) of the system prompt, tools and messages; near duplicates by MinHash over 5-word
   shingles of the non-system messages (128-bin one-permutation MinHash, LSH with 16 bands of 8
   rows, then the estimated Jaccard similarity against `near_dup_threshold`). The first trace in
   (started_at, trace_id) order is kept, so a selection is
   read in that order, a conversation at a time (`Selection`).
5. `split_of`: a trace's split is a function of the seed and its id only (a hash mapped to [0, 1)
   against the cumulative split fractions), so a trace is in one split in every export made with
   that seed, whatever else is selected; proportions are therefore close to, not exactly, the
   fractions asked for. A compacted trace read by context (`source.trace_conversations`) has all
   its contexts in its split.
"""

from __future__ import annotations

import hashlib
import json
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, time

import duckdb

from traceforge import store
from traceforge.analysis.batches import cut
from traceforge.analysis.prefix_cache import DEFAULT_CHARS_PER_TOKEN
from traceforge.export.redact import redact
from traceforge.export.source import (
    Conversation,
    TraceRows,
    conversation_text,
    iter_trace_rows,
    trace_conversations,
    trim_unanswered,
)
from traceforge.workers import ordered_map, worker_count

SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")  # what `datasets` accepts as a split name
SHINGLE_WORDS = 5
MINHASH_PERMUTATIONS = 128
LSH_BANDS = 16
# A worker's piece of work: this many traces, or fewer holding this many messages.
BATCH_TRACES = 64
BATCH_MESSAGES = 5_000
# Up to this many traces, starting worker processes costs more than they save (measured:
# docs/performance.md#worker-processes-when-they-pay).
PARALLEL_MIN_TRACES = 300


class SelectionError(ValueError):
    """Criteria that cannot be applied (a bad split specification, an empty date range...)."""


@dataclass(frozen=True)
class Criteria:
    """Which traces to export and how to split them. Empty tuples and None mean "no filter"."""

    workloads: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    models: tuple[str, ...] = ()  # glob patterns, matched against any LLM call's model
    since: datetime | None = None  # started_at >= since
    until: datetime | None = None  # started_at < until
    min_tool_calls: int = 0
    max_messages: int | None = None
    max_chars: int | None = None
    max_tokens: int | None = None
    dedup: bool = True
    near_dup_threshold: float = 0.9
    splits: tuple[tuple[str, float], ...] = (("train", 0.9), ("test", 0.1))
    seed: int = 0

    def __post_init__(self) -> None:
        names = [name for name, _ in self.splits]
        if not names:
            raise SelectionError("at least one split is needed, e.g. train=1")
        for name, fraction in self.splits:
            if not SPLIT_NAME.match(name):
                raise SelectionError(f"split name {name!r}: use letters, digits and underscores")
            if not 0 < fraction <= 1:
                raise SelectionError(f"split {name}={fraction}: a fraction must be in (0, 1]")
        if len(set(names)) != len(names):
            raise SelectionError(f"split names repeat: {', '.join(names)}")
        total = sum(f for _, f in self.splits)
        if abs(total - 1) > 1e-6:
            raise SelectionError(f"split fractions add up to {total:g}, not 1")
        if self.since and self.until and self.since >= self.until:
            raise SelectionError(
                f"--since {self.since.isoformat()} is not before --until {self.until.isoformat()}"
            )
        if not 0 < self.near_dup_threshold <= 1:
            raise SelectionError("the near-duplicate threshold must be in (0, 1]")

    def describe(self) -> dict:
        """The criteria as plain JSON values, for the dataset card."""
        return {
            "workloads": list(self.workloads),
            "outcomes": list(self.outcomes),
            "models": list(self.models),
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "min_tool_calls": self.min_tool_calls,
            "max_messages": self.max_messages,
            "max_chars": self.max_chars,
            "max_tokens": self.max_tokens,
            "dedup": self.dedup,
            "near_dup_threshold": self.near_dup_threshold if self.dedup else None,
            "splits": dict(self.splits),
            "seed": self.seed,
        }


def parse_splits(text: str) -> tuple[tuple[str, float], ...]:
    """`"train=0.9,test=0.1"` -> (("train", 0.9), ("test", 0.1)).

    >>> parse_splits("train=0.8, validation=0.1, test=0.1")
    (('train', 0.8), ('validation', 0.1), ('test', 0.1))
    """
    splits = []
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = None
        if not sep or fraction is None:
            raise SelectionError(f"split {part.strip()!r}: write NAME=FRACTION, e.g. train=0.9,test=0.1")
        splits.append((name.strip(), fraction))
    return tuple(splits)


@dataclass(frozen=True)
class Preparation:
    """What is done to each usable conversation before the limits and dedup: the user messages
    nothing answered trimmed (`source.trim_unanswered`) and redaction (`redact.redact`, its counts
    kept in `Conversation.redactions`). Plain data, so worker processes can apply it."""

    trim_unanswered: bool = False
    redact: bool = False

    def __call__(self, conversation: Conversation) -> Conversation:
        if self.trim_unanswered:
            conversation = trim_unanswered(conversation)
        if self.redact:
            conversation, counts = redact(conversation)
            conversation.redactions = dict(counts)
        return conversation


@dataclass
class Candidate:
    """A conversation as it comes to the dedup: prepared, with why it is dropped if it is, and
    its dedup key and signature (`dedup_keys`) if it is not and the criteria deduplicate."""

    conversation: Conversation
    dropped: str | None = None
    key: bytes | None = None
    signature: array | None = None


def candidates(
    criteria: Criteria, preparation: Preparation, by_context: bool, traces: list[TraceRows]
) -> list[Candidate]:
    """The conversations of a batch of traces, checked, prepared, limited and keyed for the dedup:
    everything a selection does to a conversation that does not depend on the ones before it, so
    worker processes can do it while the selection decides, in order, which are duplicates."""
    out = []
    for rows in traces:
        for conversation in trace_conversations(rows, by_context):
            candidate = Candidate(conversation, conversation.problem)
            if candidate.dropped is None:
                candidate.conversation = conversation = preparation(conversation)
                conversation.chars = text_chars(conversation)
                candidate.dropped = over_limits(conversation, criteria, conversation.chars)
            if candidate.dropped is None and criteria.dedup:
                candidate.key, candidate.signature = dedup_keys(conversation)
            out.append(candidate)
    return out


class Selection:
    """The conversations an export is made of, each with its split: the traces matching the
    criteria are found when the selection is made (`matched`); iterating it loads, checks,
    prepares, limits and deduplicates them as it goes (with `by_context`, one conversation per
    context of a compacted trace: see `source.trace_conversations`), holding a few batches of
    traces and the dedup's keys and signatures, never the whole selection.

    The work on each conversation (`candidates`) runs in worker processes when there are more than
    `PARALLEL_MIN_TRACES` traces (`workers`: how many; default one per CPU, `TRACEFORGE_WORKERS`),
    while this process reads the store and keeps the first of each group of duplicates, in order.
    Conversations that cannot be training examples (see `Conversation.problem`) are dropped under
    their problem's name. `dropped` (reason -> conversations: with `by_context`, a compacted
    trace's contexts count apart, as its rows do), `selected` and `later_contexts` are complete
    once a pass has ended.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        criteria: Criteria,
        preparation: Preparation = Preparation(),
        by_context: bool = False,
        workers: int | None = None,
    ) -> None:
        self.con = con
        self.criteria = criteria
        self.preparation = preparation
        self.by_context = by_context
        self.workers = workers
        self.trace_ids = matching_trace_ids(con, criteria)
        self.matched = len(self.trace_ids)
        self.dropped: Counter = Counter()
        self.selected = 0
        self.later_contexts = 0  # of `selected`: contexts after a compaction (see export.source)
        self.traces_read = 0  # traces whose conversations the pass has read, for progress

    def __iter__(self) -> Iterator[tuple[Conversation, str]]:
        criteria = self.criteria
        self.dropped = Counter()
        self.selected = self.later_contexts = 0
        copied = resumed_elsewhere(self.con, self.trace_ids)
        if copied:
            self.dropped["resumed_elsewhere"] = len(copied)
        self.traces_read = len(copied)
        wanted = [t for t in self.trace_ids if t not in copied]
        duplicates = Deduplicator(criteria.near_dup_threshold)
        shared = (criteria, self.preparation, self.by_context)
        batches = cut(  # a worker's piece of work each
            iter_trace_rows(self.con, wanted), lambda rows: len(rows.messages), BATCH_TRACES, BATCH_MESSAGES
        )
        count = worker_count(self.workers, len(wanted), PARALLEL_MIN_TRACES)
        if count > 1:
            results = ordered_map("traceforge.export.selection:candidates", batches, count, shared)
        else:
            results = (candidates(*shared, batch) for batch in batches)
        for batch in results:
            self.traces_read += len({c.conversation.trace_id for c in batch})
            for candidate in batch:
                reason = candidate.dropped
                if reason is None and criteria.dedup:
                    reason = duplicates.check(candidate.key, candidate.signature)
                if reason is not None:
                    self.dropped[reason] += 1
                    continue
                conversation = candidate.conversation
                self.selected += 1
                self.later_contexts += bool(conversation.context)
                yield conversation, split_of(conversation.trace_id, criteria.splits, criteria.seed)


def matching_trace_ids(con: duckdb.DuckDBPyConnection, criteria: Criteria) -> list[str]:
    """Trace ids that match the criteria, oldest first (then by id)."""
    where, params = _matching(criteria)
    sql = f"SELECT t.trace_id FROM traces t WHERE {where} ORDER BY t.started_at NULLS LAST, t.trace_id"
    return [row[0] for row in con.execute(sql, params).fetchall()]


def any_trace_matches(con: duckdb.DuckDBPyConnection, criteria: Criteria) -> bool:
    """Whether a trace matches the criteria, without reading which."""
    where, params = _matching(criteria)
    return con.execute(f"SELECT EXISTS (SELECT 1 FROM traces t WHERE {where})", params).fetchone()[0]


def _matching(criteria: Criteria) -> tuple[str, list]:
    """The WHERE condition on `traces t` that the criteria make, and its parameters."""
    where, params = ["true"], []
    if criteria.workloads:
        # A workload by the trace's own name or by the one the last profile / analyze gave it under
        # its workload key (the names its report printed).
        where.append(
            "(list_contains(?::VARCHAR[], t.workload) OR t.trace_id IN "
            "(SELECT trace_id FROM trace_workloads WHERE list_contains(?::VARCHAR[], workload)))"
        )
        params.extend([list(criteria.workloads), list(criteria.workloads)])
    if criteria.outcomes:
        where.append(f"t.outcome IN ({', '.join('?' * len(criteria.outcomes))})")
        params.extend(criteria.outcomes)
    if criteria.models:
        patterns = " OR ".join("c.model GLOB ?" for _ in criteria.models)
        where.append(f"EXISTS (SELECT 1 FROM llm_calls c WHERE c.trace_id = t.trace_id AND ({patterns}))")
        params.extend(criteria.models)
    if criteria.since:
        where.append("t.started_at >= ?")
        params.append(criteria.since)
    if criteria.until:
        where.append("t.started_at < ?")
        params.append(criteria.until)
    if criteria.min_tool_calls > 0:
        where.append("(SELECT count(*) FROM tool_calls tc WHERE tc.trace_id = t.trace_id) >= ?")
        params.append(criteria.min_tool_calls)
    return " AND ".join(where), params


@dataclass(frozen=True)
class Unmatched:
    """A filter that alone matches no trace (`given`, as typed: `--workload nope`), and what the
    store holds instead: per value of `noun` ("workloads", "outcomes", "models") its traces, most
    first; for dates (`noun` "starts"), the first and last trace start (None: no recorded time)."""

    given: str
    noun: str
    held: list[tuple[str, int]] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None


def unmatched_filters(con: duckdb.DuckDBPyConnection, criteria: Criteria) -> list[Unmatched]:
    """For a selection that matched nothing: each of --workload, --outcome and --model that alone
    matches no trace, with the values the store holds, so a misspelt name says what to write
    instead; and dates that match no trace, with the store's first and last start.

    The workloads are the traces' own and those the last profile or analyze gave them, as
    `_matching` reads them."""
    found = []
    checks = [
        (
            "--workload",
            criteria.workloads,
            "workloads",
            "SELECT workload, count(DISTINCT trace_id) FROM (SELECT trace_id, workload FROM traces "
            "UNION ALL SELECT trace_id, workload FROM trace_workloads) WHERE workload IS NOT NULL "
            "GROUP BY 1 ORDER BY 2 DESC, 1",
        ),
        (
            "--outcome",
            criteria.outcomes,
            "outcomes",
            "SELECT outcome, count(*) FROM traces WHERE outcome IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1",
        ),
        (
            "--model",
            criteria.models,
            "models",
            "SELECT model, count(DISTINCT trace_id) FROM llm_calls WHERE model IS NOT NULL "
            "GROUP BY 1 ORDER BY 2 DESC, 1",
        ),
    ]
    for option, wanted, noun, query in checks:
        if not wanted or any_trace_matches(con, Criteria(**{noun: wanted})):
            continue
        given = " ".join(f"{option} {value}" for value in wanted)
        found.append(Unmatched(given, noun, held=con.execute(query).fetchall()))
    dates = {"since": criteria.since, "until": criteria.until}
    if any(dates.values()) and not any_trace_matches(con, Criteria(**dates)):
        first, last = con.execute("SELECT min(started_at), max(started_at) FROM traces").fetchone()
        given = " ".join(f"--{name} {when(value)}" for name, value in dates.items() if value)
        found.append(Unmatched(given, "starts", first=first, last=last))
    return found


def when(moment: datetime) -> str:
    """A time as a person writes one: the date alone at midnight UTC, else to the second, in UTC.

    >>> when(datetime(2026, 11, 1, tzinfo=UTC)), when(datetime(2025, 8, 1, 16, 20, 44, 298854, tzinfo=UTC))
    ('2026-11-01', '2025-08-01 16:20:44 UTC')
    """
    moment = moment.astimezone(UTC)
    if moment.time() == time():
        return moment.date().isoformat()
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def resumed_elsewhere(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> set[str]:
    """The traces among `trace_ids` whose every LLM call was logged again in another trace (see
    `traceforge.ingest.copies`): a session a resumed session copied whole."""
    with store.registered_ids(con, "_tf_selected_ids", trace_ids):
        rows = con.execute(
            """
            SELECT c.trace_id
            FROM llm_calls c JOIN _tf_selected_ids USING (trace_id)
            LEFT JOIN (SELECT DISTINCT copy_of AS call_id FROM llm_calls WHERE copy_of IS NOT NULL) k
                   USING (call_id)
            GROUP BY c.trace_id
            HAVING bool_and(c.copy_of IS NOT NULL OR k.call_id IS NOT NULL)
            """
        ).fetchall()
    return {row[0] for row in rows}


def text_chars(conversation: Conversation) -> int:
    """The characters of a conversation's text (`conversation_text`) and tool schemas (as JSON)."""
    return len(conversation_text(conversation.messages)) + len(json.dumps(conversation.tools))


def over_limits(conversation: Conversation, criteria: Criteria, chars: int) -> str | None:
    """The first length limit the conversation exceeds (a reason for the counts), or None.
    `chars`: its `text_chars`."""
    if criteria.max_messages is not None and len(conversation.messages) > criteria.max_messages:
        return "over_max_messages"
    if criteria.max_chars is not None and chars > criteria.max_chars:
        return "over_max_chars"
    if criteria.max_tokens is not None:
        tokens = conversation.peak_tokens
        if tokens is None:
            tokens = int(chars // DEFAULT_CHARS_PER_TOKEN)
        if tokens > criteria.max_tokens:
            return "over_max_tokens"
    return None


def normalized(text: str) -> str:
    """Case folded, whitespace collapsed: the text duplicates are compared on."""
    return " ".join(text.casefold().split())


def exact_key(conversation: Conversation) -> bytes:
    tools = json.dumps(conversation.tools, sort_keys=True, ensure_ascii=False)
    text = normalized(tools + "\n" + conversation_text(conversation.messages))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


_UINT64 = (1 << 64) - 1
# Words' hashes, kept across conversations, since most words recur: 1,500 traces of the benchmark
# corpus hold 1.7M words counted once per conversation, 86k distinct. Emptied when full (~25 MB).
WORD_CACHE_SIZE = 200_000
_WORD_HASHES: dict[str, int] = {}
EMPTY = _UINT64  # each entry of the signature of a text without words


def shingles(text: str, words: int = SHINGLE_WORDS) -> set[int]:
    """64-bit hashes of the runs of `words` consecutive words of the normalised text.

    Each word is hashed (BLAKE2b) once per process while `_WORD_HASHES` holds it, and a run is
    the tuple of its words' hashes, hashed by Python's tuple hash: of integers, it is the same in
    every process (a string's is not), and it runs in C over `zip`, where a digest per run cost
    most of an export's time."""
    tokens = text.casefold().split()  # the words of `normalized(text)`
    if not tokens:
        return set()
    new = set(tokens).difference(_WORD_HASHES)
    if len(_WORD_HASHES) + len(new) > WORD_CACHE_SIZE:
        _WORD_HASHES.clear()
        new = set(tokens)
    for word in new:
        _WORD_HASHES[word] = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
    hashes = list(map(_WORD_HASHES.__getitem__, tokens))
    runs = [tuple(hashes)] if len(hashes) <= words else zip(*(hashes[i:] for i in range(words)), strict=False)
    return set(map(_UINT64.__and__, map(hash, runs)))


class MinHasher:
    """MinHash signatures by one-permutation hashing: each shingle hash goes to one of
    `permutations` bins by its low bits, a bin keeps its smallest value, and an empty bin borrows
    from the next non-empty one to its right (rotation densification). One pass over the shingles
    instead of one per hash function (Li, Owen & Zhang 2012; Shrivastava & Li 2014).

    The fraction of equal positions in two signatures estimates the Jaccard similarity of the
    two shingle sets.

    >>> h = MinHasher()
    >>> a = h.signature(shingles("the quick brown fox jumps over the lazy dog again"))
    >>> h.similarity(a, a)
    1.0
    """

    def __init__(self, permutations: int = MINHASH_PERMUTATIONS) -> None:
        if permutations & (permutations - 1):
            raise ValueError("the number of bins must be a power of two")
        self.bins = permutations
        self.shift = permutations.bit_length() - 1

    def signature(self, hashes: set[int]) -> array:
        """Per bin, its smallest value and the distance it was borrowed from, packed in 64 bits
        (the value in the hash's bits above the bin's, the distance in the bin's): equal packed
        entries are equal pairs. No hashes: every entry `EMPTY`."""
        if not hashes:
            return array("Q", [EMPTY]) * self.bins
        # Uniform 64-bit hashes put about 16 per bin under `below`: the smallest of each bin is
        # among them unless a bin has none there (about 1 set in 50,000), when all are read.
        below = (16 * self.bins << 64) // len(hashes)
        lowest = self._lowest(sorted(filter(below.__gt__, hashes)))
        if None in lowest:
            lowest = self._lowest(sorted(hashes))
        out = array("Q")
        for b in range(self.bins):
            distance = 0
            while lowest[(b + distance) % self.bins] is None:
                distance += 1
            out.append(lowest[(b + distance) % self.bins] << self.shift | distance)
        return out

    def _lowest(self, ascending: list[int]) -> list[int | None]:
        """Each bin's smallest value (the bits above the bin's), None where it has none: in
        ascending order a bin's first hash holds it, so the loop ends once every bin has one."""
        mask = self.bins - 1
        lowest: list[int | None] = [None] * self.bins
        empty = self.bins
        for x in ascending:
            b = x & mask
            if lowest[b] is None:
                lowest[b] = x >> self.shift
                empty -= 1
                if not empty:
                    break
        return lowest

    @staticmethod
    def similarity(a: array, b: array) -> float:
        return sum(map(int.__eq__, a, b)) / len(a)


_HASHER = MinHasher()


class Deduplicator:
    """Exact and near duplicates of the conversations seen before, in the order they are checked:
    the first of each group is kept. Holds a 16-byte key and a 1 KB signature per kept
    conversation.

    >>> from traceforge.export.source import message
    >>> said = [message("user", "what is the weather in Paris today"), message("assistant", "sunny")]
    >>> duplicates = Deduplicator(threshold=0.9)
    >>> duplicates.check(*dedup_keys(Conversation("a", None, "unknown", None, said, [])))
    >>> duplicates.check(*dedup_keys(Conversation("b", None, "unknown", None, said, [])))
    'exact_duplicate'
    """

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.band_rows = MINHASH_PERMUTATIONS // LSH_BANDS
        self.exact_keys: set[bytes] = set()
        self.signatures: list[array] = []
        # Per LSH band key (the band's number and values, hashed in this process: a collision only
        # adds a candidate, which the similarity then rules out), the kept signature that has it,
        # or a list of them when several do (most keys have one: a list each would double this).
        self.buckets: dict[int, int | list[int]] = {}

    def check(self, key: bytes, signature: array) -> str | None:
        """Whether a conversation checked before was the same ("exact_duplicate") or nearly so
        ("near_duplicate"); None, remembering this one, when none was. `key` and `signature`:
        the conversation's `dedup_keys`."""
        if key in self.exact_keys:
            return "exact_duplicate"
        self.exact_keys.add(key)
        rows = self.band_rows
        bands = [hash((b, signature[b * rows : (b + 1) * rows].tobytes())) for b in range(LSH_BANDS)]
        candidates: set[int] = set()
        for band in bands:
            held = self.buckets.get(band)
            if isinstance(held, list):
                candidates.update(held)
            elif held is not None:
                candidates.add(held)
        similarity = MinHasher.similarity
        if any(similarity(signature, self.signatures[index]) >= self.threshold for index in candidates):
            return "near_duplicate"
        index = len(self.signatures)
        for band in bands:
            held = self.buckets.setdefault(band, index)
            if isinstance(held, list):
                held.append(index)
            elif held != index:
                self.buckets[band] = [held, index]
        self.signatures.append(signature)
        return None


def dedup_keys(conversation: Conversation) -> tuple[bytes, array]:
    """What the dedup compares: the exact key (`exact_key`) and the MinHash signature of the
    5-word shingles of the non-system messages."""
    text = conversation_text(conversation.messages, roles=("user", "assistant", "tool"))
    return exact_key(conversation), _HASHER.signature(shingles(text))


def split_of(trace_id: str, splits: tuple[tuple[str, float], ...], seed: int) -> str:
    """The split of a trace: its seeded hash in [0, 1) against the cumulative fractions.

    >>> split_of("trace-1", (("train", 1.0),), seed=0)
    'train'
    """
    digest = hashlib.blake2b(f"{seed}\x00{trace_id}".encode(), digest_size=8).digest()
    position = int.from_bytes(digest, "big") / 2**64
    cumulative = 0.0
    for name, fraction in splits:
        cumulative += fraction
        if position < cumulative:
            return name
    return splits[-1][0]
