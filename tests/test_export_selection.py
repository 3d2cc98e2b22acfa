"""Selection pieces on their own: near-duplicate detection, the MinHash estimate, split assignment."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from array import array
from collections import Counter

import pytest

from traceforge.export import selection
from traceforge.export.selection import (
    LSH_BANDS,
    MINHASH_PERMUTATIONS,
    Criteria,
    Deduplicator,
    MinHasher,
    SelectionError,
    dedup_keys,
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
    duplicates = Deduplicator(threshold=0.9)
    verdicts = {c.trace_id: duplicates.check(*dedup_keys(c)) for c in conversations}
    assert [t for t, verdict in verdicts.items() if verdict is None] == ["a", "d", "e", "f"]
    assert verdicts["b"] == "near_duplicate" and verdicts["c"] == "exact_duplicate"


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


def test_minhash_signature_keeps_each_bins_smallest_value():
    """Against the plain definition: the smallest value in every bin, an empty bin borrowing the
    next non-empty one's to its right. Sets of real shingles (large, small) and of a few hashes
    all in one part of the range, where the signature's first look finds bins empty."""
    hasher = MinHasher()
    rng = random.Random(7)
    words = [f"w{k}" for k in range(3000)]
    sets = [shingles(" ".join(rng.choices(words, k=n))) for n in (3, 40, 900, 20_000)]
    # bin 0's only hash is past where the first look stops
    crowded = {(rng.getrandbits(10) << 7) | rng.randrange(1, hasher.bins) for _ in range(5000)}
    sets.append(crowded | {(1 << 63) | (rng.getrandbits(20) << 7)})
    for hashes in sets:
        smallest = {}
        for x in hashes:
            b = x & (hasher.bins - 1)
            smallest[b] = min(smallest.get(b, x >> hasher.shift), x >> hasher.shift)
        expected = []
        for b in range(hasher.bins):
            distance = 0
            while (b + distance) % hasher.bins not in smallest:
                distance += 1
            expected.append((smallest[(b + distance) % hasher.bins], distance))
        packed = hasher.signature(hashes)
        assert [(entry >> hasher.shift, entry & (hasher.bins - 1)) for entry in packed] == expected


def test_shingles_of_short_and_long_texts():
    assert len(shingles("one two")) == 1
    assert len(shingles("a b c d e f g")) == 3  # 5-word windows
    assert shingles("") == set()


def test_shingles_do_not_depend_on_the_words_hashed_before(monkeypatch):
    """Word hashes are kept across texts (and dropped when too many): a text's shingles are the
    same whether its words were hashed before, partly, or the store of them was emptied half-way."""
    rng = random.Random(11)
    vocabulary = [f"w{k}" for k in range(300)]
    texts = [" ".join(rng.choices(vocabulary, k=rng.randrange(1, 60))) for _ in range(40)]
    selection._WORD_HASHES.clear()
    cold = [shingles(t) for t in texts]
    warm = [shingles(t) for t in texts]
    monkeypatch.setattr(selection, "WORD_CACHE_SIZE", 100)  # emptied again and again
    selection._WORD_HASHES.clear()
    crowded = [shingles(t) for t in texts]
    assert cold == warm == crowded
    assert len(selection._WORD_HASHES) <= 100
    word = "a-word-never-seen"
    expected = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
    assert shingles(word) == {hash((expected,)) & ((1 << 64) - 1)}


def test_shingles_are_the_same_in_every_process():
    """Exports keep the same traces run after run: shingle hashes may not depend on the process's
    string-hash seed."""
    code = "from traceforge.export.selection import shingles; print(sorted(shingles(open(0).read())))"
    text = "Refund order 4412 for Ada: the blue chair arrived broken, see photo IMG_20.jpg " * 3
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs == {f"{sorted(shingles(text))}\n"}


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


def test_a_band_key_several_kept_conversations_share_finds_each_of_them():
    """Two kept signatures with the same first band (and nothing else in common): a third that
    shares that band with both, and one entry in each other band with the second, is the second's
    near duplicate at threshold 0.1, found through the band they all share; a fourth, the same
    with the first, is the first's."""
    rows = MINHASH_PERMUTATIONS // LSH_BANDS
    rng = random.Random(3)

    def fresh() -> array:
        return array("Q", (rng.getrandbits(63) for _ in range(MINHASH_PERMUTATIONS)))

    first, second, third, fourth = fresh(), fresh(), fresh(), fresh()
    second[:rows] = third[:rows] = fourth[:rows] = first[:rows]
    for band in range(1, LSH_BANDS):
        third[band * rows] = second[band * rows]
        fourth[band * rows] = first[band * rows]
    duplicates = Deduplicator(threshold=0.1)
    assert duplicates.check(b"1", first) is None
    assert duplicates.check(b"2", second) is None  # 8 of 128 entries in common with the first
    assert MinHasher.similarity(third, first) < 0.1 <= MinHasher.similarity(third, second)
    assert duplicates.check(b"3", third) == "near_duplicate"
    assert MinHasher.similarity(fourth, second) < 0.1 <= MinHasher.similarity(fourth, first)
    assert duplicates.check(b"4", fourth) == "near_duplicate"
