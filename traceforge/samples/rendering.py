"""What every renderer shares: the rendered records, timestamps, gateway metadata, log order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from traceforge.samples.scenario import Scenario

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Rendering:
    """A file's records and, for each scenario in the order given, the index of its first record
    and the conversation id the file gives it (None where only the content ties its records)."""

    records: list[Any]
    first_record: list[int]
    conversation_ids: list[str | None]


def iso(epoch_ms: int) -> str:
    """`2026-03-10T14:02:11.482Z` for an epoch in milliseconds."""
    return (
        (EPOCH + timedelta(milliseconds=epoch_ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def metadata(scenario: Scenario) -> dict[str, str]:
    """What a gateway records about the caller: the environment always, the workload where the
    application tags its requests, the session where the client sends one."""
    meta = {"environment": "production"}
    if scenario.tagged:
        meta["workload"] = scenario.workload
    if scenario.session_id:
        meta["session_id"] = scenario.session_id
    return meta


def log_order(scenarios: list[Scenario], calls: list[tuple[int, Scenario, Any]]) -> Rendering:
    """Records of several conversations in the order a gateway writes them (by completion time),
    with each scenario's first record located."""
    position = {id(s): k for k, s in enumerate(scenarios)}
    ordered = sorted(enumerate(calls), key=lambda item: (item[1][0], position[id(item[1][1])], item[0]))
    first: dict[int, int] = {}
    for index, (_, (_, scenario, _)) in enumerate(ordered):
        first.setdefault(position[id(scenario)], index)
    return Rendering(
        [record for _, (_, _, record) in ordered],
        [first[k] for k in range(len(scenarios))],
        [s.session_id for s in scenarios],
    )
