"""Prefix chaining: recovering conversations from interleaved per-request records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from traceforge.ingest.grouping import chain_records, message_hashes


def records_of(conversation: list[str]) -> list[tuple[list[bytes], bytes]]:
    """The per-request records of one conversation of alternating user/assistant messages: request k
    holds the first 2k+1 messages, its response is message 2k+1."""
    out = []
    for k in range(0, len(conversation) - 1, 2):
        prefixes = message_hashes(conversation[: k + 1])
        state = message_hashes(conversation[: k + 2])[-1]
        out.append((prefixes, state))
    return out


@st.composite
def interleavings(draw):
    n = draw(st.integers(min_value=1, max_value=5))
    conversations = []
    for c in range(n):
        turns = draw(st.integers(min_value=1, max_value=5))
        # The first user message is unique per conversation; later messages may coincide across them.
        messages = [f"user-{c}"]
        for t in range(turns):
            messages += [
                draw(st.sampled_from(["ok", "done", f"a-{t}"])),
                draw(st.sampled_from(["go on", f"u-{t}"])),
            ]
        conversations.append(messages[: 2 * turns])
    queues = [list(enumerate(records_of(conv))) for conv in conversations]
    order = []
    while any(queues):
        c = draw(st.sampled_from([i for i, q in enumerate(queues) if q]))
        order.append((c, *queues[c].pop(0)))
    return order


@given(interleavings())
@settings(max_examples=200, deadline=None)
def test_interleaved_conversations_are_recovered_exactly(order):
    chains = chain_records([o[2][0] for o in order], [o[2][1] for o in order], [None] * len(order))
    recovered = sorted([[order[i][0] for i in chain.items] for chain in chains])
    expected = sorted([[c] * sum(1 for o in order if o[0] == c) for c in {o[0] for o in order}])
    assert recovered == expected
    for chain in chains:  # each conversation's records in their own order
        assert [order[i][1] for i in chain.items] == list(range(len(chain.items)))
        assert chain.parent is None


def test_a_retried_request_is_a_branch_of_the_same_parent():
    first = message_hashes(["u"])
    state = message_hashes(["u", "a"])[-1]
    second = message_hashes(["u", "a", "u2"])
    chains = chain_records(
        [first, second, second],
        [state, message_hashes(["u", "a", "u2", "x"])[-1], message_hashes(["u", "a", "u2", "y"])[-1]],
        [None, None, None],
    )
    assert [c.items for c in chains] == [[0, 1], [2]]
    assert chains[1].parent == 0 and chains[1].branch_item == 0


def test_explicit_ids_never_link_across_conversations():
    prefixes = message_hashes(["same"])
    state = message_hashes(["same", "reply"])[-1]
    following = message_hashes(["same", "reply", "next"])
    chains = chain_records(
        [prefixes, prefixes, following, following],
        [
            state,
            state,
            message_hashes(["same", "reply", "next", "a"])[-1],
            message_hashes(["same", "reply", "next", "b"])[-1],
        ],
        ["s1", "s2", "s2", "s1"],
    )
    assert sorted((c.key, c.items) for c in chains) == [("s1", [0, 3]), ("s2", [1, 2])]
