"""Grouping per-request API log records into conversations by prefix chaining.

A gateway logs each API call on its own: the request (the whole conversation so far) and the
response. A request whose messages begin with an earlier request's messages followed by that
request's response continues that conversation. Conversations are recognised by hashing: each
record contributes the chain of hashes of its request's message prefixes and the hash of the state
after its response, so grouping is one dictionary lookup per message, not a comparison of records.

Two requests that continue the same earlier call (a retry, a re-sample, a user who edited a turn)
form a branch: the first continues the conversation, the later one starts a new conversation that
records the one it branched from. An explicit conversation id, where records carry one, keeps
records of different conversations apart even when their messages coincide.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class Chain:
    """One conversation: indices of its records in order, and where it branched from."""

    items: list[int] = field(default_factory=list)
    key: str | None = None  # the explicit conversation id shared by its records, if any
    parent: int | None = None  # index of the chain this one branched from
    branch_item: int | None = None  # the record of the parent chain this one continues


EMPTY = hashlib.blake2b(b"", digest_size=16).digest()  # the hash before any message


def message_hashes(message_keys: list[str], start: bytes | None = None) -> list[bytes]:
    """Rolling hashes: element k covers `message_keys[0..k]`, continuing from the hash `start`
    (the hash of the messages before these) when given."""
    hashes = []
    digest = start if start is not None else EMPTY
    for key in message_keys:
        digest = hashlib.blake2b(digest + key.encode(), digest_size=16).digest()
        hashes.append(digest)
    return hashes


class Chainer:
    """Prefix chaining one record at a time: `add` says which conversation a record joins, keeping
    only the states seen so far (not the records), so a log can be grouped while it is read."""

    def __init__(self) -> None:
        self.chains: list[Chain] = []
        self.chain_of: list[int] = []  # record -> chain
        self.owner: dict[tuple[str | None, bytes], int] = {}  # (conversation id, state) -> latest record
        self.continued: set[int] = set()

    def add(self, prefixes: list[bytes], state: bytes, key: str | None) -> int:
        """Record the next record (its request-prefix hashes, its state after the response, its
        conversation id) and return the index of the chain it joins (a new one when it starts a
        conversation or branches off one)."""
        i = len(self.chain_of)
        parent_item = None
        for digest in reversed(prefixes):
            parent_item = self.owner.get((key, digest))
            if parent_item is not None:
                break
        if parent_item is not None and parent_item not in self.continued:
            chain = self.chain_of[parent_item]
            self.chains[chain].items.append(i)
        else:
            chain = len(self.chains)
            self.chains.append(
                Chain(
                    items=[i],
                    key=key,
                    parent=self.chain_of[parent_item] if parent_item is not None else None,
                    branch_item=parent_item,
                )
            )
        if parent_item is not None:
            self.continued.add(parent_item)
        self.chain_of.append(chain)
        self.owner[(key, state)] = i
        return chain


def chain_records(
    prefix_hashes: list[list[bytes]], state_hashes: list[bytes], keys: list[str | None]
) -> list[Chain]:
    """Group records into conversations.

    `prefix_hashes[i]` are record i's request-prefix hashes (from `message_hashes`),
    `state_hashes[i]` the hash after its response, `keys[i]` its explicit conversation id or None.
    Records are taken in the order given (the log's order: a continuation is always logged after
    the call it continues).

    >>> a = message_hashes(["u1"]); a_state = message_hashes(["u1", "a1"])[-1]
    >>> b = message_hashes(["u1", "a1", "u2"]); b_state = message_hashes(["u1", "a1", "u2", "a2"])[-1]
    >>> [c.items for c in chain_records([a, b], [a_state, b_state], [None, None])]
    [[0, 1]]
    """
    chainer = Chainer()
    for prefixes, state, key in zip(prefix_hashes, state_hashes, keys, strict=True):
        chainer.add(prefixes, state, key)
    return chainer.chains
