"""Choosing the traces an export is made of, removing duplicates, and splitting them.

Steps, each counted so the dataset card can say what was left out and why:

1. `matching_trace_ids`: the store's traces that match the criteria (workload, outcome, model,
   date range, minimum tool calls), in SQL.
2. `resumed_elsewhere`: a conversation a resumed session copied whole (`claude --resume` starts a
   new session with a copy of the one it resumes) is in the longer one already: exported there.
3. `over_limits`: length limits drop a conversation whole, never truncate it (a cut agent trace
   loses its outcome): messages, characters, and tokens (the largest recorded input + output of one
   LLM call in the trace; where the source reported no usage, characters / 4).
4. `deduplicate`: exact duplicates by a hash of the normalised text (case folded, whitespace
   collapsed) of the system prompt, tools and messages; near duplicates by MinHash over 5-word
   shingles of the non-system messages (128-bin one-permutation MinHash, LSH with 16 bands of 8
   rows, then the estimated Jaccard similarity against `near_dup_threshold`). The first trace in
   (started_at, trace_id) order is kept.
5. `split_of`: a trace's split is a function of the seed and its id only (a hash mapped to [0, 1)
   against the cumulative split fractions), so a trace is in one split in every export made with
   that seed, whatever else is selected; proportions are therefore close to, not exactly, the
   fractions asked for. A compacted trace read by context (`source.load_conversations`) has all
   its contexts in its split.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import duckdb

from traceforge import store
from traceforge.analysis.prefix_cache import DEFAULT_CHARS_PER_TOKEN
from traceforge.export.source import Conversation, conversation_text, load_conversations

SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")  # what `datasets` accepts as a split name
SHINGLE_WORDS = 5
MINHASH_PERMUTATIONS = 128
LSH_BANDS = 16


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


@dataclass
class Selection:
    """The conversations chosen, each with its split, and what was left out on the way."""

    conversations: list[Conversation]
    split: dict[str, str]  # trace_id -> split name
    matched: int  # traces that matched the criteria in the store
    dropped: Counter = field(default_factory=Counter)  # reason -> conversations (see `select`)

    def by_split(self) -> dict[str, list[Conversation]]:
        out: dict[str, list[Conversation]] = {}
        for conversation in self.conversations:
            out.setdefault(self.split[conversation.trace_id], []).append(conversation)
        return out


def select(
    con: duckdb.DuckDBPyConnection,
    criteria: Criteria,
    prepare: Callable[[Conversation], Conversation] | None = None,
    by_context: bool = False,
) -> Selection:
    """Match, load, check, limit, deduplicate and split: the conversations an export is made of
    (with `by_context`, one per context of a compacted trace: see `source.load_conversations`).

    `prepare` is applied to each usable conversation before the limits and dedup (the export
    pipeline passes the trimming of unanswered user messages and the redactor). Conversations that
    cannot be training examples (see `Conversation.problem`) are dropped under their problem's
    name. `dropped` counts conversations: with `by_context`, a compacted trace's contexts count
    apart, as its rows do.
    """
    trace_ids = matching_trace_ids(con, criteria)
    dropped: Counter = Counter()
    copied = resumed_elsewhere(con, trace_ids)
    if copied:
        dropped["resumed_elsewhere"] = len(copied)
    usable = []
    for conversation in load_conversations(con, [t for t in trace_ids if t not in copied], by_context):
        if conversation.problem:
            dropped[conversation.problem] += 1
            continue
        if prepare is not None:
            conversation = prepare(conversation)
        reason = over_limits(conversation, criteria)
        if reason:
            dropped[reason] += 1
            continue
        usable.append(conversation)
    if criteria.dedup:
        usable = deduplicate(usable, criteria.near_dup_threshold, dropped)
    split = {c.trace_id: split_of(c.trace_id, criteria.splits, criteria.seed) for c in usable}
    return Selection(usable, split, matched=len(trace_ids), dropped=dropped)


def matching_trace_ids(con: duckdb.DuckDBPyConnection, criteria: Criteria) -> list[str]:
    """Trace ids that match the criteria, oldest first (then by id)."""
    where, params = [], []
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
    sql = "SELECT t.trace_id FROM traces t"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY t.started_at NULLS LAST, t.trace_id"
    return [row[0] for row in con.execute(sql, params).fetchall()]


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


def over_limits(conversation: Conversation, criteria: Criteria) -> str | None:
    """The first length limit the conversation exceeds (a reason for the counts), or None."""
    if criteria.max_messages is not None and len(conversation.messages) > criteria.max_messages:
        return "over_max_messages"
    chars = len(conversation_text(conversation.messages)) + len(json.dumps(conversation.tools))
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


def exact_key(conversation: Conversation) -> str:
    tools = json.dumps(conversation.tools, sort_keys=True, ensure_ascii=False)
    text = normalized(tools + "\n" + conversation_text(conversation.messages))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


_UINT64 = (1 << 64) - 1


def shingles(text: str, words: int = SHINGLE_WORDS) -> set[int]:
    """64-bit hashes of the runs of `words` consecutive words of the normalised text.

    Each distinct word is hashed once (BLAKE2b), and a run is the tuple of its words' hashes,
    hashed by Python's tuple hash: of integers, it is the same in every process (a string's is
    not), and it runs in C over `zip`, where a digest per run cost most of an export's time."""
    tokens = text.casefold().split()  # the words of `normalized(text)`
    if not tokens:
        return set()
    word_hash = {
        w: int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "big") for w in set(tokens)
    }
    hashes = list(map(word_hash.__getitem__, tokens))
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

    def signature(self, hashes: set[int]) -> tuple[tuple[int, int], ...]:
        if not hashes:
            return tuple((0, -1) for _ in range(self.bins))
        # Uniform 64-bit hashes put about 16 per bin under `below`: the smallest of each bin is
        # among them unless a bin has none there (about 1 set in 50,000), when all are read.
        below = (16 * self.bins << 64) // len(hashes)
        lowest = self._lowest(sorted(filter(below.__gt__, hashes)))
        if None in lowest:
            lowest = self._lowest(sorted(hashes))
        out = []
        for b in range(self.bins):
            distance = 0
            while lowest[(b + distance) % self.bins] is None:
                distance += 1
            out.append((lowest[(b + distance) % self.bins], distance))
        return tuple(out)

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
    def similarity(a: tuple, b: tuple) -> float:
        return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def deduplicate(conversations: list[Conversation], threshold: float, dropped: Counter) -> list[Conversation]:
    """Conversations without exact and near duplicates; the first of each group is kept.

    Drops are counted in `dropped` as `exact_duplicate` and `near_duplicate`.
    """
    seen: set[str] = set()
    unique = []
    for conversation in conversations:
        key = exact_key(conversation)
        if key in seen:
            dropped["exact_duplicate"] += 1
            continue
        seen.add(key)
        unique.append(conversation)

    hasher = MinHasher()
    rows = MINHASH_PERMUTATIONS // LSH_BANDS
    buckets: dict[tuple[int, tuple], list[tuple]] = {}
    kept = []
    for conversation in unique:
        text = conversation_text(conversation.messages, roles=("user", "assistant", "tool"))
        signature = hasher.signature(shingles(text))
        keys = [(band, signature[band * rows : (band + 1) * rows]) for band in range(LSH_BANDS)]
        candidates = {id(s): s for key in keys for s in buckets.get(key, [])}
        if any(hasher.similarity(signature, other) >= threshold for other in candidates.values()):
            dropped["near_duplicate"] += 1
            continue
        for key in keys:
            buckets.setdefault(key, []).append(signature)
        kept.append(conversation)
    return kept


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
