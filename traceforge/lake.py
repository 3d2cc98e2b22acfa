"""The store as a data lake: hive-partitioned Parquet out, the same dataset read back from a path or
an object-store URL, and the per-trace dependency analysis run one partition at a time.

>>> from traceforge import store, lake
>>> con = store.connect("traceforge.duckdb")                               # doctest: +SKIP
>>> lake.export_parquet(con, "lake/").files                               # doctest: +SKIP
37
>>> lake.export_parquet(con, "s3://bucket/traces-lake")                   # doctest: +SKIP
>>> lake_con = store.connect("lake.duckdb")                               # doctest: +SKIP
>>> lake.attach_parquet(lake_con, "s3://bucket/traces-lake")              # doctest: +SKIP

Layout (`export_parquet`): one folder per table. The tables whose rows belong to a trace (traces,
llm_calls, tool_calls, messages, tool_defs and the dependency analysis) are partitioned by the
trace's `source_format` and `day` (the UTC date it started; `__HIVE_DEFAULT_PARTITION__` when it has
no time), so all rows of a trace share one partition in every table:

    lake/traces/source_format=openai-chat/day=2026-03-01/data_0.parquet
    lake/tool_calls/source_format=openai-chat/day=2026-03-01/data_0.parquet
    lake/sources/data_0.parquet
    lake/_traceforge_lake.json         what was written: tables, rows, files, partitions (last)

A partition is therefore a unit of work for the per-trace analysis (`analyze_partition`): a worker
reads its traces from the lake, analyses them and writes its `tool_deps`, `tool_schedule` and
`trace_dag` rows back under the same partition (`traceforge.lake_ray` does this on a Ray cluster).

Reading (`attach_parquet`): in a store, the ingest tables become views over the dataset, so every
analysis (`traceforge deps`, `profile`, `sql`) runs on it unchanged; the analysis tables stay local.
URLs other than local paths (`s3://`, `gs://`, `az://`, `https://`) are read through DuckDB's httpfs
(or azure) extension, loaded on demand; credentials come from DuckDB's secrets
(`CREATE SECRET (TYPE s3, PROVIDER credential_chain)`) or the environment.
"""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from traceforge import store

MANIFEST = "_traceforge_lake.json"
LAKE_SCHEMA = "traceforge.lake"
PARTITION_COLUMNS = ("source_format", "day")
# Tables whose rows belong to one trace: partitioned like their trace.
TRACE_TABLES = (
    "traces",
    "llm_calls",
    "tool_calls",
    "messages",
    "tool_defs",
    "tool_deps",
    "tool_schedule",
    "trace_dag",
)
# Whole-store tables: one folder each, not partitioned.
PLAIN_TABLES = ("sources", "rejects", "trace_workloads", "workloads", "inference_profile")
# What `attach_parquet` reads from the lake; the analysis tables stay in the local store.
INGEST_TABLES = ("traces", "llm_calls", "tool_calls", "messages", "tool_defs", "sources", "rejects")
ANALYSIS_TABLES = ("tool_deps", "tool_schedule", "trace_dag")
REMOTE_SCHEMES = {
    "s3": "httpfs",
    "s3a": "httpfs",
    "gs": "httpfs",
    "gcs": "httpfs",
    "r2": "httpfs",
    "http": "httpfs",
    "https": "httpfs",
    "hf": "httpfs",
    "az": "azure",
    "abfss": "azure",
}
DAY = "CAST(timezone('UTC', t.started_at) AS DATE)"
BATCH_TRACES = 2_000  # traces read from the lake at once by `analyze_partition`


class LakeError(Exception):
    """A lake that cannot be written or read, with what to do about it."""


@dataclass
class LakeExport:
    """What `export_parquet` wrote."""

    out: str
    tables: dict[str, int] = field(default_factory=dict)  # table -> rows
    partitions: list[dict[str, Any]] = field(default_factory=list)  # {"source_format", "day", "traces"}
    files: int = 0
    bytes: int = 0


def export_parquet(con: duckdb.DuckDBPyConnection, out: str | Path) -> LakeExport:
    """Write every table of the store behind `con` under `out`, a folder or an object-storage URL
    (see the module doc).

    A folder must be new, empty, or a lake traceforge wrote before (then it is replaced). A URL
    must hold no lake yet: files in object storage are not deleted here. The manifest is written
    last, so a lake without one is an export that did not finish (rerunning it there finishes it).
    Empty tables get no folder. Returns the tables and rows written and the partitions.
    """
    remote = bool(_scheme(str(out)))
    if remote:
        location = str(out).rstrip("/")
        check_writable(location)
        prepare_url(con, location)
        _refuse_existing_lake(con, location)
    else:
        _prepare_folder(Path(out))
        location = str(Path(out))
    try:
        export = _write_lake(con, location, remote)
    except duckdb.IOException as exc:  # object storage refused (no such bucket, no access)
        raise LakeError(f"writing the lake to {location} failed: {exc}") from exc
    return export


def _write_lake(con: duckdb.DuckDBPyConnection, location: str, remote: bool) -> LakeExport:
    """`export_parquet`'s writing, once `location` is ready for it."""
    present = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    export = LakeExport(out=location)
    # In object storage, files of an export that did not finish are overwritten, not refused.
    options = "FORMAT parquet, COMPRESSION zstd" + (", OVERWRITE_OR_IGNORE" if remote else "")
    for table in (*TRACE_TABLES, *PLAIN_TABLES):
        if table not in present:
            continue
        rows = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if not rows:
            continue
        if table == "traces":
            query = f"SELECT t.*, {DAY} AS day FROM traces t"
        elif table in TRACE_TABLES:
            query = (
                f"SELECT x.*, coalesce(t.source_format, 'unknown') AS source_format, {DAY} AS day "
                f"FROM {table} x LEFT JOIN traces t USING (trace_id)"
            )
        else:
            query = f"SELECT * FROM {table}"
        if table in TRACE_TABLES:
            target = _quote(_join(location, table))
            con.execute(f"COPY ({query}) TO {target} (PARTITION_BY (source_format, day), {options})")
        else:
            if not remote:
                Path(location, table).mkdir()
            con.execute(f"COPY ({query}) TO {_quote(_join(location, table, 'data_0.parquet'))} ({options})")
        export.tables[table] = rows
    if "traces" in export.tables:
        export.partitions = [
            {"source_format": source_format, "day": day.isoformat() if day else None, "traces": traces}
            for source_format, day, traces in con.execute(
                f"SELECT t.source_format, {DAY} AS day, count(*) FROM traces t GROUP BY ALL ORDER BY ALL"
            ).fetchall()
        ]
    written = {table: _files(con, _join(location, table), remote) for table in export.tables}
    export.files = sum(len(files) for files in written.values())
    export.bytes = sum(size for files in written.values() for size in files.values())
    from traceforge import __version__
    from traceforge.store import SCHEMA_VERSION

    manifest = {
        "schema": LAKE_SCHEMA,
        "traceforge_version": __version__,
        "store_schema_version": SCHEMA_VERSION,
        "partition_by": list(PARTITION_COLUMNS),
        "tables": {
            table: {
                "rows": rows,
                "partitioned": table in TRACE_TABLES,
                "columns": _columns(con, table),
                # for URLs that cannot be listed (http, https): the table's files, under its folder
                "files": list(written[table]),
            }
            for table, rows in export.tables.items()
        },
        "partitions": export.partitions,
    }
    if remote:
        _write_text(con, _join(location, MANIFEST), json.dumps(manifest))
    else:
        Path(location, MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return export


def _files(con: duckdb.DuckDBPyConnection, folder: str, remote: bool) -> dict[str, int]:
    """The Parquet files under `folder` (relative, with forward slashes, sorted) and their sizes: a
    bucket listed through DuckDB (read_blob reads only the sizes), a local folder by Python (whose
    name may hold glob characters)."""
    if not remote:
        paths = sorted(Path(folder).rglob("*.parquet"))
        return {p.relative_to(folder).as_posix(): p.stat().st_size for p in paths if p.is_file()}
    rows = con.execute(
        "SELECT filename, size FROM read_blob(?) ORDER BY filename", [_join(folder, "**", "*.parquet")]
    ).fetchall()
    return {name[len(folder) + 1 :]: size for name, size in rows}


def _refuse_existing_lake(con: duckdb.DuckDBPyConnection, url: str) -> None:
    try:  # glob() of a plain key in object storage names it whether it is there or not: read it
        con.execute("SELECT size FROM read_blob(?)", [_join(url, MANIFEST)]).fetchall()
    except duckdb.Error:
        return  # no lake there (a URL that cannot be written fails at the first table, saying why)
    raise LakeError(
        f"{url} already holds a traceforge lake; traceforge does not delete files in object "
        "storage. Export to a new prefix, or remove that one first (aws s3 rm --recursive ...)."
    )


def _write_text(con: duckdb.DuckDBPyConnection, url: str, text: str) -> None:
    """Write `text` (one line, no control characters: json.dumps escapes them) as the file at `url`,
    through DuckDB, which writes to object storage: one CSV field, its delimiter and quote control
    characters that never occur in it, so it is written as it is."""
    con.execute(
        f"COPY (SELECT ?::VARCHAR) TO {_quote(url)} "
        "(FORMAT csv, HEADER false, DELIMITER '\x1f', QUOTE '\x1e', ESCAPE '\x1e')",
        [text],
    )


def _prepare_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise LakeError(f"{folder} is a file; give a folder for the Parquet dataset")
    if folder.is_dir() and any(folder.iterdir()):
        if not (folder / MANIFEST).is_file():
            raise LakeError(
                f"{folder} is not empty and holds no traceforge lake ({MANIFEST}); give a new or empty folder"
            )
        for child in folder.iterdir():
            if child.is_dir() and child.name in (*TRACE_TABLES, *PLAIN_TABLES):
                shutil.rmtree(child)
        (folder / MANIFEST).unlink()
    folder.mkdir(parents=True, exist_ok=True)


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[list[str]]:
    return [
        [name, kind]
        for name, kind in con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
            "ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def _quote(text: str) -> str:
    """A SQL string literal: for paths and values DuckDB will not take as parameters (COPY targets,
    read_parquet patterns, partition values)."""
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    """A quoted SQL identifier, for column names read from a lake's manifest (data from outside)."""
    return '"' + str(name).replace('"', '""') + '"'


def _join(url: str, *parts: str) -> str:
    return "/".join([url.rstrip("/"), *parts])


def _scheme(url: str) -> str:
    """A URL's scheme, lower-cased ("s3", "https"); "" for a path."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def prepare_url(con: duckdb.DuckDBPyConnection, url: str) -> None:
    """Load the extension a remote URL needs (httpfs for s3/gs/http(s), azure for az); raises
    LakeError saying how to install it when it cannot be loaded."""
    scheme = _scheme(url)
    extension = REMOTE_SCHEMES.get(scheme)
    if scheme and extension is None and scheme != "file":
        raise LakeError(
            f"{url}: unknown URL scheme {scheme!r}; use a path or one of {', '.join(REMOTE_SCHEMES)}"
        )
    if extension is None:
        return
    try:
        con.execute(f"LOAD {extension}")
    except duckdb.Error:
        try:
            con.execute(f"INSTALL {extension}")
            con.execute(f"LOAD {extension}")
        except duckdb.Error as exc:
            # The DuckDB shell is another DuckDB version: installing there would not reach this one.
            raise LakeError(
                f"reading {url} needs DuckDB's {extension} extension, which could not be installed "
                f"({exc}). Install it for DuckDB {duckdb.__version__} with the Python traceforge runs "
                f"in, where the network allows (python -c \"import duckdb; duckdb.execute('INSTALL "
                f"{extension}')\") or from a file built for that version (INSTALL '/path/to/"
                f"{extension}.duckdb_extension'); or copy the dataset to a local folder."
            ) from exc


def read_manifest(con: duckdb.DuckDBPyConnection, url: str) -> dict[str, Any]:
    """The lake's manifest (what `export_parquet` wrote), read through DuckDB so URLs work too."""
    prepare_url(con, url)
    location = _join(url, MANIFEST)
    hint = "Write one with `traceforge export parquet --out DIR`."
    try:
        found = con.execute("SELECT content FROM read_text(?)", [location]).fetchone()
    except duckdb.Error as exc:
        raise LakeError(f"{url} holds no traceforge lake: {location} cannot be read ({exc}). {hint}") from exc
    if found is None:
        raise LakeError(f"{url} holds no traceforge lake: there is no {location}. {hint}")
    (text,) = found
    manifest = json.loads(text)
    if manifest.get("schema") != LAKE_SCHEMA:
        raise LakeError(f"{location} is not a traceforge lake manifest")
    return manifest


def _scan(url: str, table: str, info: dict[str, Any]) -> str:
    """`read_parquet` of one table of the lake: its files by a glob, or, at a URL that cannot be
    listed (http, https), by the list the manifest keeps."""
    hive = str(info["partitioned"]).lower()
    if not _listable(url):
        if "files" not in info:
            raise LakeError(
                f"{url}: an http(s) URL cannot be listed, and this lake's manifest has no file list "
                "(written by an older traceforge). Export it again with `traceforge export parquet`."
            )
        files = ", ".join(_quote(_join(url, table, name)) for name in info["files"])
        return f"read_parquet([{files}], hive_partitioning = {hive})"
    pattern = _join(url, table, "**", "*.parquet") if info["partitioned"] else _join(url, table, "*.parquet")
    return f"read_parquet({_quote(pattern)}, hive_partitioning = {hive})"


def _listable(url: str) -> bool:
    """Whether DuckDB can list the files under `url`: a path or object storage, not plain http(s)."""
    return _scheme(url) not in ("http", "https")


def check_writable(url: str) -> None:
    """Raise LakeError for a URL the analysis rows cannot be written to (or listed at)."""
    if not _listable(url):
        raise LakeError(
            f"{url}: an http(s) URL can be read, not written or listed; write the analysis rows to a "
            "folder or to object storage (--out)"
        )


def attach_parquet(con: duckdb.DuckDBPyConnection, url: str) -> dict[str, int]:
    """Make the store behind `con` read its traces from the lake at `url` (a path or a URL).

    The ingest tables (traces, llm_calls, tool_calls, messages, tool_defs, sources, rejects) become
    views over the lake's Parquet files, with the store's own columns in its own order; analyses
    then run as on any store and write their tables locally. The store must hold no ingested data
    of its own (use a new one). Returns the rows per table the lake holds.
    """
    manifest = read_manifest(con, url)
    tables = manifest["tables"]
    kinds = {
        row[0]: row[1]
        for row in con.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_name IN "
            "(SELECT unnest(?))",
            [list(INGEST_TABLES)],
        ).fetchall()
    }
    for table in INGEST_TABLES:
        if kinds.get(table) == "BASE TABLE" and con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]:
            raise LakeError(
                f"this store already holds ingested data ({table} has rows); attach the lake to a new store"
            )
    for table in INGEST_TABLES:
        info = tables.get(table)
        if info is None:
            continue  # nothing of it in the lake: the (empty) local table stays
        wanted = _store_columns(table)
        in_lake = {name for name, _ in info["columns"]}
        # The store's columns in its order; one the lake was written without reads as NULL.
        selected = ", ".join(
            f'"{name}"' if name in in_lake else f'NULL::{kind} AS "{name}"' for name, kind in wanted
        )
        if kinds.get(table) == "BASE TABLE":
            con.execute(f"DROP TABLE {table}")
        con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT {selected} FROM {_scan(url, table, info)}")
    con.execute("CREATE TABLE IF NOT EXISTS lake_source (url TEXT, attached_at TIMESTAMPTZ DEFAULT now())")
    con.execute("DELETE FROM lake_source")
    con.execute("INSERT INTO lake_source (url) VALUES (?)", [url])
    return {table: info["rows"] for table, info in tables.items() if table in INGEST_TABLES}


# --- the per-trace analysis, one partition at a time -------------------------------------------------


@dataclass(frozen=True)
class Partition:
    source_format: str
    day: str | None  # ISO date, None for traces without a start time

    def as_dict(self) -> dict[str, Any]:
        return {"source_format": self.source_format, "day": self.day}


def partitions(url: str, con: duckdb.DuckDBPyConnection | None = None) -> list[Partition]:
    """The lake's partitions, from its manifest."""
    connection = con or duckdb.connect()
    try:
        manifest = read_manifest(connection, url)
    finally:
        if con is None:
            connection.close()
    return [Partition(p["source_format"], p["day"]) for p in manifest["partitions"]]


def partition_connection(url: str, partition: Partition) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB whose ingest tables are the rows of one partition of the lake."""
    con = duckdb.connect()
    manifest = read_manifest(con, url)
    day_filter = "day IS NULL" if partition.day is None else f"day = DATE {_quote(partition.day)}"
    for table in ("traces", "llm_calls", "tool_calls", "messages", "tool_defs"):
        info = manifest["tables"].get(table)
        wanted = _store_columns(table)
        if info is None:
            declared = ", ".join(f'"{name}" {kind}' for name, kind in wanted)
            con.execute(f"CREATE TABLE {table} ({declared})")
            continue
        in_lake = [name for name, _ in info["columns"]]
        # the lake's columns, and the store's it was written without (an older traceforge) as NULL
        missing = [f'NULL::{kind} AS "{name}"' for name, kind in wanted if name not in set(in_lake)]
        columns = ", ".join([*map(_ident, in_lake), *missing])
        con.execute(
            f"CREATE VIEW {table} AS SELECT {columns} FROM {_scan(url, table, info)} "
            f"WHERE source_format = {_quote(partition.source_format)} AND {day_filter}"
        )
    return con


@functools.cache
def _store_columns(table: str) -> tuple[tuple[str, str], ...]:
    """A table's columns as a fresh store declares them (for a table the lake has no rows of, or
    the columns a lake written by an older traceforge lacks)."""
    from traceforge import store

    con = duckdb.connect()
    try:
        store.migrate(con)
        return tuple(tuple(row) for row in _columns(con, table))
    finally:
        con.close()


def analyze_partition(
    url: str, partition: Partition, mode: str = "conservative", config: Any = None
) -> dict[str, pl.DataFrame]:
    """Dependency inference and parallel schedules for the traces of one partition of the lake.

    Returns the `tool_deps`, `tool_schedule` and `trace_dag` rows (as `analyze_dependencies`
    writes them into a store) as polars frames. Pure work on one partition: runnable anywhere the
    lake can be read (a process pool, a Ray worker).
    """
    from traceforge.analysis import dag
    from traceforge.analysis.deps import read_traces
    from traceforge.analysis.effects import DepsConfig

    config = config or DepsConfig()
    settings = dag.settings_key(mode, config)
    con = partition_connection(url, partition)
    try:
        ids = [
            row[0] for row in con.execute("SELECT DISTINCT trace_id FROM tool_calls ORDER BY 1").fetchall()
        ]
        rows = dag._Rows()
        for start in range(0, len(ids), BATCH_TRACES):
            for trace in read_traces(con, ids[start : start + BATCH_TRACES]):
                rows.add(trace, mode, config, settings)
    finally:
        con.close()
    return {
        "tool_deps": pl.DataFrame(rows.deps, schema=dag._DEPS_SCHEMA),
        "tool_schedule": pl.DataFrame(rows.calls, schema=dag._SCHEDULE_SCHEMA),
        "trace_dag": pl.DataFrame(rows.dags, schema=dag._DAG_SCHEMA),
    }


def write_partition_results(
    out: str, partition: Partition, frames: dict[str, pl.DataFrame]
) -> dict[str, int]:
    """Write one partition's analysis rows under `out` in the lake's layout
    (`out/trace_dag/source_format=.../day=.../data_0.parquet`); returns the rows per table."""
    check_writable(out)
    con = duckdb.connect()
    try:
        prepare_url(con, out)
        if not _scheme(out):
            Path(out).mkdir(parents=True, exist_ok=True)
        written = {}
        for table, frame in frames.items():
            day = "NULL::DATE" if partition.day is None else f"DATE {_quote(partition.day)}"
            with store.registered(con, "_tf_part", frame):
                con.execute(
                    f"COPY (SELECT *, {_quote(partition.source_format)} AS source_format, {day} AS day "
                    f"FROM _tf_part) TO {_quote(_join(out, table))} "
                    "(FORMAT parquet, COMPRESSION zstd, PARTITION_BY (source_format, day), "
                    "OVERWRITE_OR_IGNORE)"
                )
            written[table] = frame.height
        return written
    finally:
        con.close()


def analyze_lake(
    url: str, out: str | None = None, mode: str = "conservative", config: Any = None
) -> dict[str, int]:
    """The per-trace analysis of a whole lake on this machine, partition by partition, writing each
    partition's rows under `out` (default: the lake itself). Returns the rows written per table.
    `traceforge.lake_ray.analyze_lake_on_ray` does the same with one Ray task per partition."""
    check_writable(out or url)
    totals: dict[str, int] = {}
    for partition in partitions(url):
        for table, n in analyze_and_write(url, out or url, partition, mode, config).items():
            totals[table] = totals.get(table, 0) + n
    return totals


def analyze_and_write(
    url: str, out: str, partition: Partition, mode: str = "conservative", config: Any = None
) -> dict[str, int]:
    """`analyze_partition` then `write_partition_results`: one partition's whole job."""
    return write_partition_results(out, partition, analyze_partition(url, partition, mode, config))


def load_analysis(con: duckdb.DuckDBPyConnection, url: str) -> dict[str, int]:
    """Copy the analysis rows written under `url` (by `analyze_lake` or a Ray run) into the store's
    own `tool_deps`, `tool_schedule` and `trace_dag`, replacing those of the same traces."""
    check_writable(url)  # where they could not have been written, they cannot be listed either
    prepare_url(con, url)
    loaded = {}
    for table in ANALYSIS_TABLES:
        pattern = _quote(_join(url, table, "**", "*.parquet"))
        try:
            con.execute(
                f"CREATE OR REPLACE TEMP VIEW _tf_lake_{table} AS SELECT * EXCLUDE (source_format, day) "
                f"FROM read_parquet({pattern}, hive_partitioning = true)"
            )
        except duckdb.IOException:
            loaded[table] = 0
            continue
        with store.transaction(con):
            con.execute(f"DELETE FROM {table} WHERE trace_id IN (SELECT trace_id FROM _tf_lake_{table})")
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _tf_lake_{table}")
        loaded[table] = con.execute(f"SELECT count(*) FROM _tf_lake_{table}").fetchone()[0]
        con.execute(f"DROP VIEW _tf_lake_{table}")
    return loaded
