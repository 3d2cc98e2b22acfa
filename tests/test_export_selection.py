"""Selection pieces on their own: near-duplicate detection, the MinHash estimate, split assignment."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from traceforge.export.selection import (
    Criteria,
    MinHasher,
    SelectionError,
    deduplicate,
    parse_splits,
    shingles,
    split_of,
)
from traceforge.export.source import Conversation, message

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
]


def text(seed: int, n: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(n))


def conversation(trace_id: str, user: str, system: str = "You are an agent.") -> Conversation:
    messages = [message("system", system), message("user", user), message("assistant", "ok")]
    return Conversation(trace_id, None, "unknown", None, messages, [])


def test_near_duplicates_go_exact_duplicates_go_distinct_stay():
    base = text(1)
    words = base.split()
    one_word_changed = " ".join([*words[:150], "zulu", *words[151:]])
    conversations = [
        conversation("a", base),
        conversation("b", one_word_changed),  # near duplicate of a
        conversation("c", base.upper()),  # same text once case is folded: exact duplicate
        conversation("d", text(2)),  # another task
        conversation("e", text(3), system="A long shared system prompt. " * 200),  # only the prompt in common
        conversation("f", text(4), system="A long shared system prompt. " * 200),
    ]
    dropped = Counter()
    kept = deduplicate(conversations, threshold=0.9, dropped=dropped)
    assert [c.trace_id for c in kept] == ["a", "d", "e", "f"]
    assert dropped == {"exact_duplicate": 1, "near_duplicate": 1}


def test_minhash_estimates_jaccard():
    hasher = MinHasher()
    rng = random.Random(5)
    for _ in range(20):
        universe = list(range(2000))
        a = set(rng.sample(universe, 600))
        b = set(rng.sample(sorted(a), rng.randrange(100, 600))) | set(rng.sample(universe, 200))
        true = len(a & b) / len(a | b)
        estimate = hasher.similarity(hasher.signature(a), hasher.signature(b))
        assert abs(estimate - true) < 0.15


def test_shingles_of_short_and_long_texts():
    assert len(shingles("one two")) == 1
    assert len(shingles("a b c d e f g")) == 3  # 5-word windows
    assert shingles("") == set()


def test_split_assignment_is_seeded_stable_and_proportional():
    ids = [f"trace-{i}" for i in range(4000)]
    splits = (("train", 0.8), ("validation", 0.1), ("test", 0.1))
    first = {i: split_of(i, splits, seed=0) for i in ids}
    assert first == {i: split_of(i, splits, seed=0) for i in reversed(ids)}  # order does not matter
    counts = Counter(first.values())
    assert abs(counts["train"] / len(ids) - 0.8) < 0.03
    assert abs(counts["test"] / len(ids) - 0.1) < 0.02
    other = {i: split_of(i, splits, seed=1) for i in ids}
    assert sum(first[i] != other[i] for i in ids) > 500


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("train", "NAME=FRACTION"),
        ("train=0.7,test=0.2", "add up to 0.9"),
        ("train=1,train=0", "(0, 1]"),
        ("my-train=1", "letters, digits"),
        ("train=0.5,train=0.5", "repeat"),
    ],
)
def test_bad_split_specifications(spec, message):
    with pytest.raises(SelectionError, match=message.replace("(", r"\(").replace("]", r"\]")):
        Criteria(splits=parse_splits(spec))
