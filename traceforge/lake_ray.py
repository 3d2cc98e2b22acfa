"""The per-trace analysis of a lake on Ray Data: one task per partition of the lake.

An optional extra (`pip install 'traceforge[ray]'`); nothing else in traceforge imports Ray. Each
task runs `traceforge.lake.analyze_and_write` on one partition (source format x day): it reads that
partition's traces from the lake, infers their dependencies and schedules, and writes its
`tool_deps`, `tool_schedule` and `trace_dag` rows back under the same partition. Workers need the
lake's URL to be readable (and `out` writable) from where they run: object storage on a cluster, a
shared or local folder on one machine.

>>> from traceforge.lake_ray import analyze_lake_on_ray
>>> analyze_lake_on_ray("s3://bucket/lake", address="ray://head:10001")   # doctest: +SKIP
{'tool_deps': 51234, 'tool_schedule': 99812, 'trace_dag': 9120, 'partitions': 31}
"""

from __future__ import annotations

from typing import Any

from traceforge import lake


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise lake.LakeError(
            "the Ray runner needs Ray: pip install 'traceforge[ray]' (or pip install 'ray[data]'); "
            "without it, `traceforge lake deps` analyses the partitions on this machine"
        ) from exc
    return ray


def analyze_lake_on_ray(
    url: str,
    out: str | None = None,
    mode: str = "conservative",
    config: Any = None,
    *,
    address: str | None = None,
    concurrency: int | None = None,
) -> dict[str, int]:
    """Analyse every partition of the lake at `url` as a Ray Data map, writing under `out` (default:
    the lake). Connects to the cluster at `address` (or the one `ray.init()` finds, or starts a local
    instance). Returns the rows written per table and the number of partitions."""
    lake.check_writable(out or url)
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    todo = lake.partitions(url)
    if not todo:
        return {"partitions": 0}
    target = out or url

    def run(row: dict[str, Any]) -> dict[str, Any]:
        partition = lake.Partition(row["source_format"], row["day"])
        written = lake.analyze_and_write(url, target, partition, mode, config)
        return {**row, **written}

    dataset = ray.data.from_items([p.as_dict() for p in todo])
    results = dataset.map(run, concurrency=concurrency).take_all()
    totals: dict[str, int] = {"partitions": len(results)}
    for row in results:
        for table in lake.ANALYSIS_TABLES:
            totals[table] = totals.get(table, 0) + int(row.get(table) or 0)
    return totals
