"""`traceforge export parquet` and `traceforge lake`: the store as a hive-partitioned Parquet dataset,
read back as a store, and the per-trace analysis run partition by partition (locally, on a local Ray
instance where Ray is installed), and a lake in an S3 bucket and on a web server (where DuckDB's
httpfs extension, and for S3 a local S3 stand-in, are installed)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import duckdb
import polars as pl
import pytest

from traceforge import lake, store
from traceforge.analysis.dag import analyze_dependencies
from traceforge.cli import cli
from traceforge.ingest import ingest_paths

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import corpus as bench_corpus  # noqa: E402

DAG_COLUMNS = "* EXCLUDE (settings)"
# The tests that need DuckDB's httpfs extension (object storage, https). Where the installed DuckDB
# has no httpfs build at hand, `test_the_object_store_tests_run_under_a_duckdb_with_an_httpfs_build`
# runs them under the newest DuckDB PyPI has one for.
needs_httpfs = pytest.mark.needs_httpfs
HTTPFS_DUCKDB = ("duckdb==1.5.5", "duckdb-extension-httpfs==1.5.5")
# The S3 stand-in, and pytz, through which DuckDB 1.5 hands TIMESTAMPTZ values to Python.
S3_STAND_IN = ("moto[s3]", "flask", "flask-cors", "pytz")
ANALYSIS_ORDER = {
    "trace_dag": "trace_id",
    "tool_deps": "trace_id, src_tool_call_id, dst_tool_call_id, kind",
    "tool_schedule": "trace_id, tool_call_id",
}


@pytest.fixture(scope="module")
def analysed_store(tmp_path_factory) -> Path:
    """A store of every generated format, with its dependency analysis."""
    folder = tmp_path_factory.mktemp("lake")
    bench_corpus.generate(folder / "logs", tool_calls=500, file_mb=0.5)
    db = folder / "store.duckdb"
    con = store.connect(db)
    try:
        ingest_paths(con, [folder / "logs"], workers=1)
        analyze_dependencies(con)
    finally:
        con.close()
    return db


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def analysis_rows(db: Path) -> dict[str, list[tuple]]:
    return {
        table: rows(
            db, f"SELECT {DAG_COLUMNS if table == 'trace_dag' else '*'} FROM {table} ORDER BY {order}"
        )
        for table, order in ANALYSIS_ORDER.items()
    }


def export(runner, db: Path, out: Path | str, *extra: str):
    return runner.invoke(cli, ["export", "parquet", "--db", str(db), "--out", str(out), *extra])


def test_every_table_is_written_partitioned_by_source_format_and_day(runner, analysed_store, tmp_path):
    out = tmp_path / "lake"
    result = export(runner, analysed_store, out, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    expected_partitions = rows(
        analysed_store,
        "SELECT source_format, CAST(timezone('UTC', started_at) AS DATE), count(*) FROM traces "
        "GROUP BY ALL ORDER BY ALL",
    )
    assert [(p["source_format"], p["day"], p["traces"]) for p in report["partitions"]] == [
        (f, d.isoformat() if d else None, n) for f, d, n in expected_partitions
    ]
    folders = {
        p.parent.relative_to(out / "tool_calls").as_posix() for p in (out / "tool_calls").rglob("*.parquet")
    }
    assert "source_format=otlp" in {f.split("/")[0] for f in folders}
    assert all(f.split("/")[1].startswith("day=") for f in folders)
    con = duckdb.connect()
    for table, count in report["tables"].items():
        assert count == rows(analysed_store, f"SELECT count(*) FROM {table}")[0][0]
        partitioned = table in lake.TRACE_TABLES
        pattern = out / table / ("**/*.parquet" if partitioned else "*.parquet")
        columns = [
            name for name, _ in json.loads((out / lake.MANIFEST).read_text())["tables"][table]["columns"]
        ]
        selected = ", ".join(f'"{c}"' for c in columns)
        hive = str(partitioned).lower()
        from_lake = con.execute(
            f"SELECT {selected} FROM read_parquet('{pattern}', hive_partitioning = {hive}) ORDER BY ALL"
        ).fetchall()
        assert from_lake == rows(analysed_store, f"SELECT {selected} FROM {table} ORDER BY ALL"), table
    # all rows of a trace sit in its trace's partition, in every table
    misplaced = con.execute(
        f"""
        SELECT count(*) FROM read_parquet('{out}/tool_calls/**/*.parquet', hive_partitioning = true) c
        JOIN read_parquet('{out}/traces/**/*.parquet', hive_partitioning = true) t USING (trace_id)
        WHERE c.source_format <> t.source_format OR c.day IS DISTINCT FROM t.day
        """
    ).fetchone()[0]
    assert misplaced == 0


def test_a_second_export_replaces_the_first_and_a_foreign_folder_is_refused(runner, analysed_store, tmp_path):
    out = tmp_path / "lake"
    assert export(runner, analysed_store, out).exit_code == 0
    stale = out / "traces" / "source_format=stale" / "day=2001-01-01"
    stale.mkdir(parents=True)
    (stale / "data_0.parquet").write_bytes(b"old")
    assert export(runner, analysed_store, out).exit_code == 0
    assert not stale.exists()
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"\xff\xd8")
    result = export(runner, analysed_store, foreign)
    assert result.exit_code == 1
    assert "not empty" in result.output and (foreign / "cat.jpg").exists()


def test_dataset_options_are_refused_for_parquet(runner, analysed_store, tmp_path):
    result = export(runner, analysed_store, tmp_path / "lake", "--workload", "support-agent")
    assert result.exit_code == 2
    assert "--workload" in result.output


def test_an_attached_store_reads_the_lake_and_analyses_it_as_the_original(runner, analysed_store, tmp_path):
    out = tmp_path / "lake"
    assert export(runner, analysed_store, out).exit_code == 0
    attached = tmp_path / "attached.duckdb"
    result = runner.invoke(cli, ["lake", "attach", str(out), "--db", str(attached), "--json"])
    assert result.exit_code == 0, result.output
    assert (
        json.loads(result.output)["rows"]["tool_calls"]
        == rows(analysed_store, "SELECT count(*) FROM tool_calls")[0][0]
    )
    summary = "SELECT * FROM v_trace_summary ORDER BY trace_id"
    assert rows(attached, summary) == rows(analysed_store, summary)
    result = runner.invoke(cli, ["deps", "--db", str(attached), "--json"])
    assert result.exit_code == 0, result.output
    assert analysis_rows(attached) == analysis_rows(analysed_store)
    result = runner.invoke(cli, ["profile", "--db", str(attached), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert rows(attached, "SELECT count(*) FROM workloads")[0][0] > 0


def test_attaching_to_a_store_with_data_of_its_own_is_refused(runner, analysed_store, tmp_path):
    out = tmp_path / "lake"
    assert export(runner, analysed_store, out).exit_code == 0
    result = runner.invoke(cli, ["lake", "attach", str(out), "--db", str(analysed_store)])
    assert result.exit_code == 1
    assert "already holds ingested data" in result.output


def test_a_folder_without_a_lake_and_an_unreadable_url_fail_with_the_reason(runner, tmp_path):
    result = runner.invoke(cli, ["lake", "attach", str(tmp_path), "--db", str(tmp_path / "a.duckdb")])
    assert result.exit_code == 1 and "holds no traceforge lake" in result.output
    result = runner.invoke(cli, ["lake", "attach", "ftp://host/lake", "--db", str(tmp_path / "b.duckdb")])
    assert result.exit_code == 1 and "unknown URL scheme" in result.output
    # Object storage goes through DuckDB's httpfs: where it cannot be loaded (no network to fetch it)
    # or the bucket cannot be read, the error says so; no traceback either way.
    result = runner.invoke(
        cli, ["lake", "attach", "s3://traceforge-no-such-bucket/lake", "--db", str(tmp_path / "c.duckdb")]
    )
    assert result.exit_code == 1 and "s3://traceforge-no-such-bucket/lake" in result.output
    if "could not be installed" in result.output:  # no httpfs here: how to install it, for this DuckDB
        assert f"Install it for DuckDB {duckdb.__version__}" in result.output
        assert "INSTALL '/path/to/httpfs.duckdb_extension'" in result.output


def test_a_web_server_is_refused_as_a_place_to_write_or_list_before_it_is_reached(
    runner, analysed_store, tmp_path
):
    url = "https://127.0.0.1:9/lake"  # nothing listens there: refused before any request
    for args in (
        ["lake", "deps", url],
        ["lake", "deps", str(tmp_path), "--out", url],
        ["lake", "load", url, "--db", str(tmp_path / "l.duckdb")],
        ["export", "parquet", "--db", str(analysed_store), "--out", url],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1 and "can be read, not written or listed" in result.output, args


def test_the_analysis_partition_by_partition_gives_the_store_s_rows(runner, analysed_store, tmp_path):
    out = tmp_path / "lake"
    assert export(runner, analysed_store, out).exit_code == 0
    results = tmp_path / "results"
    result = runner.invoke(cli, ["lake", "deps", str(out), "--out", str(results), "--json"])
    assert result.exit_code == 0, result.output
    totals = json.loads(result.output)
    assert totals["trace_dag"] == rows(analysed_store, "SELECT count(*) FROM trace_dag")[0][0]
    parts = lake.partitions(str(out))
    assert len(parts) > 3
    loaded = tmp_path / "loaded.duckdb"
    result = runner.invoke(cli, ["lake", "load", str(results), "--db", str(loaded)])
    assert result.exit_code == 0, result.output
    assert analysis_rows(loaded) == analysis_rows(analysed_store)


def test_a_lake_written_before_a_column_existed_is_analysed_with_it_empty(runner, analysed_store, tmp_path):
    """A lake exported by an older traceforge lacks columns added since (here the partial output
    flag and the resumed-session marks): the partition analysis reads them as NULL, as attaching does."""
    out = tmp_path / "lake"
    assert export(runner, analysed_store, out).exit_code == 0
    manifest = json.loads((out / lake.MANIFEST).read_text())
    older = {"llm_calls": ["output_tokens_partial", "response_key", "copy_of"], "tool_calls": ["copy_of"]}
    for table, dropped in older.items():
        for path in (out / table).rglob("*.parquet"):
            frame = pl.read_parquet(path, hive_partitioning=False)
            assert set(dropped) <= set(frame.columns)
            frame.drop(dropped).write_parquet(path)
        info = manifest["tables"][table]
        info["columns"] = [column for column in info["columns"] if column[0] not in dropped]
    (out / lake.MANIFEST).write_text(json.dumps(manifest))
    results = tmp_path / "results"
    result = runner.invoke(cli, ["lake", "deps", str(out), "--out", str(results), "--json"])
    assert result.exit_code == 0, result.output
    loaded = tmp_path / "loaded.duckdb"
    assert runner.invoke(cli, ["lake", "load", str(results), "--db", str(loaded)]).exit_code == 0
    assert analysis_rows(loaded) == analysis_rows(analysed_store)


def test_the_analysis_runs_on_a_local_ray_instance(analysed_store, tmp_path):
    ray = pytest.importorskip(
        "ray",
        reason="Ray is not installed (the test extra has it on Python < 3.15): pip install 'traceforge[ray]'",
    )
    from traceforge.lake_ray import analyze_lake_on_ray

    out = tmp_path / "lake"
    con = store.connect(analysed_store, read_only=True)
    try:
        lake.export_parquet(con, out)
    finally:
        con.close()
    results = tmp_path / "results"
    try:
        totals = analyze_lake_on_ray(str(out), str(results))
    finally:
        ray.shutdown()
    assert totals["partitions"] == len(lake.partitions(str(out)))
    loaded = tmp_path / "loaded.duckdb"
    con = store.connect(loaded)
    try:
        lake.load_analysis(con, str(results))
    finally:
        con.close()
    assert analysis_rows(loaded) == analysis_rows(analysed_store)


def test_the_single_machine_path_does_not_import_ray(tmp_path):
    import subprocess

    code = (
        "import sys, traceforge.lake, traceforge.cli.lake, traceforge.cli;"
        "[traceforge.cli.cli.get_command(None, name) for name in traceforge.cli.cli.list_commands(None)];"
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _httpfs_binary() -> str | None:
    """An httpfs extension built for this DuckDB: installed already (DuckDB's repository), or from
    the PyPI package `duckdb-extension-httpfs` (which has builds up to DuckDB 1.5.5)."""
    con = duckdb.connect()
    try:
        con.execute("LOAD httpfs")
        return con.execute(
            "SELECT install_path FROM duckdb_extensions() WHERE extension_name = 'httpfs'"
        ).fetchone()[0]
    except duckdb.Error:
        pass
    finally:
        con.close()
    try:
        import duckdb_extension_httpfs
    except ImportError:
        return None
    folder = Path(duckdb_extension_httpfs.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    binary = folder / "httpfs.duckdb_extension"
    return str(binary) if binary.is_file() else None


@pytest.fixture
def httpfs_home(tmp_path, monkeypatch) -> Path:
    """A DuckDB home of the test's own (extensions, persistent secrets) with httpfs installed, or a
    skip saying what to install."""
    binary = _httpfs_binary()
    if binary is None:
        pytest.skip(
            f"no httpfs extension for DuckDB {duckdb.__version__} here (DuckDB's extension repository "
            "is out of reach): test_the_object_store_tests_run_under_a_duckdb_with_an_httpfs_build "
            "runs this test under DuckDB 1.5.5"
        )
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    con = duckdb.connect()
    try:
        con.execute(f"INSTALL '{binary}'")
    finally:
        con.close()
    return home


@pytest.fixture
def s3_bucket(httpfs_home):
    """A bucket on a local S3 endpoint (moto's server, in this process), with a DuckDB secret for it:
    DuckDB reaches it through httpfs as it would AWS, R2 or MinIO; only the secret's endpoint
    differs. Yields the boto3 client and an upload function: folder, prefix -> s3:// URL."""
    moto_server = pytest.importorskip(
        "moto.moto_server.threaded_moto_server",
        reason="the S3 stand-in is not installed: pip install 'moto[server]'",
    )
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    credentials = {"aws_access_key_id": "traceforge", "aws_secret_access_key": "traceforge"}
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1", **credentials)
    client.create_bucket(Bucket="traceforge-lake")
    con = duckdb.connect()
    con.execute("LOAD httpfs")
    con.execute(
        "CREATE PERSISTENT SECRET lake (TYPE s3, KEY_ID 'traceforge', SECRET 'traceforge', "
        f"ENDPOINT '{host}:{port}', USE_SSL false, URL_STYLE 'path', REGION 'us-east-1')"
    )
    con.close()

    def upload(folder: Path, prefix: str) -> str:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                key = f"{prefix}/{path.relative_to(folder).as_posix()}"
                client.upload_file(str(path), "traceforge-lake", key)
        return f"s3://traceforge-lake/{prefix}"

    try:
        yield SimpleNamespace(client=client, upload=upload)
    finally:
        server.stop()


@needs_httpfs
def test_a_lake_in_object_storage_is_attached_analysed_and_written_back(
    runner, analysed_store, tmp_path, s3_bucket
):
    local = tmp_path / "lake"
    assert export(runner, analysed_store, local).exit_code == 0
    url = s3_bucket.upload(local, "lake")
    attached = tmp_path / "attached.duckdb"
    result = runner.invoke(cli, ["lake", "attach", url, "--db", str(attached), "--json"])
    assert result.exit_code == 0, result.output
    summary = "SELECT * FROM v_trace_summary ORDER BY trace_id"
    assert rows(attached, summary) == rows(analysed_store, summary)
    result = runner.invoke(cli, ["deps", "--db", str(attached), "--json"])
    assert result.exit_code == 0, result.output
    assert analysis_rows(attached) == analysis_rows(analysed_store)
    # the per-partition analysis reads the bucket and writes its rows back to it
    results = "s3://traceforge-lake/results"
    result = runner.invoke(cli, ["lake", "deps", url, "--out", results, "--json"])
    assert result.exit_code == 0, result.output
    assert (
        json.loads(result.output)["trace_dag"] == rows(analysed_store, "SELECT count(*) FROM trace_dag")[0][0]
    )
    loaded = tmp_path / "loaded.duckdb"
    result = runner.invoke(cli, ["lake", "load", results, "--db", str(loaded)])
    assert result.exit_code == 0, result.output
    assert analysis_rows(loaded) == analysis_rows(analysed_store)
    # a prefix with no lake in the bucket fails with the reason
    result = runner.invoke(
        cli, ["lake", "attach", "s3://traceforge-lake/nothing", "--db", str(tmp_path / "x.duckdb")]
    )
    assert result.exit_code == 1 and "holds no traceforge lake" in result.output


@pytest.fixture
def http_site(tmp_path, httpfs_home):
    """A folder served over plain HTTP (no listing for DuckDB): yields (folder, its http:// URL)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    site = tmp_path / "site"
    site.mkdir()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@needs_httpfs
def test_a_lake_over_https_is_read_by_its_file_list(runner, analysed_store, tmp_path, http_site):
    site, base = http_site
    assert export(runner, analysed_store, site / "lake").exit_code == 0
    url = f"{base}/lake"
    attached = tmp_path / "attached.duckdb"
    result = runner.invoke(cli, ["lake", "attach", url, "--db", str(attached)])
    assert result.exit_code == 0, result.output
    summary = "SELECT * FROM v_trace_summary ORDER BY trace_id"
    assert rows(attached, summary) == rows(analysed_store, summary)
    results = tmp_path / "results"
    result = runner.invoke(cli, ["lake", "deps", url, "--out", str(results)])
    assert result.exit_code == 0, result.output
    loaded = tmp_path / "loaded.duckdb"
    assert runner.invoke(cli, ["lake", "load", str(results), "--db", str(loaded)]).exit_code == 0
    assert analysis_rows(loaded) == analysis_rows(analysed_store)
    # a lake exported before manifests listed their files cannot be read over http
    manifest_path = site / "lake" / lake.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for info in manifest["tables"].values():
        del info["files"]
    manifest_path.write_text(json.dumps(manifest))
    result = runner.invoke(cli, ["lake", "attach", url, "--db", str(tmp_path / "old.duckdb")])
    assert result.exit_code == 1 and "Export it again" in result.output


@needs_httpfs
def test_a_store_is_exported_straight_to_object_storage(runner, analysed_store, tmp_path, s3_bucket):
    url = "s3://traceforge-lake/direct"
    result = export(runner, analysed_store, url, "--json")
    assert result.exit_code == 0, result.output
    written = json.loads(result.output)
    listed = s3_bucket.client.list_objects_v2(Bucket="traceforge-lake", Prefix="direct/")["Contents"]
    parquet = [o for o in listed if o["Key"].endswith(".parquet")]
    assert written["files"] == len(parquet) and written["bytes"] == sum(o["Size"] for o in parquet)
    attached = tmp_path / "attached.duckdb"
    result = runner.invoke(cli, ["lake", "attach", url, "--db", str(attached)])
    assert result.exit_code == 0, result.output
    summary = "SELECT * FROM v_trace_summary ORDER BY trace_id"
    assert rows(attached, summary) == rows(analysed_store, summary)
    # a lake there is never overwritten: files in object storage are not deleted
    result = export(runner, analysed_store, url)
    assert result.exit_code == 1 and "already holds a traceforge lake" in result.output
    # without its manifest (written last) it is an export that did not finish: a rerun finishes it
    s3_bucket.client.delete_object(Bucket="traceforge-lake", Key=f"direct/{lake.MANIFEST}")
    result = export(runner, analysed_store, url)
    assert result.exit_code == 0, result.output
    assert rows(attached, summary) == rows(analysed_store, summary)
    # a bucket that is not there: the reason, no traceback
    result = export(runner, analysed_store, "s3://traceforge-no-such-bucket/lake")
    assert (
        result.exit_code == 1 and "writing the lake to s3://traceforge-no-such-bucket/lake" in result.output
    )


def _installed(*requirements: str, deps: bool = True) -> Path:
    """A folder holding `requirements` (pip install --target), kept in the user's cache between
    runs. Where the package registry cannot be reached, the test skips saying so; in CI, fails."""
    key = hashlib.sha256(repr((requirements, deps, sys.version_info[:2])).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "traceforge-tests" / f"site-{key}"
    if (folder / ".complete").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(folder), *requirements]
    if not deps:
        command.append("--no-deps")
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        message = f"cannot install {' '.join(requirements)} from the package registry: {done.stderr[-800:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    (folder / ".complete").touch()
    return folder


CHILD_PYTEST = (
    "import site, sys; site.addsitedir(sys.argv[1]); import pytest; sys.exit(pytest.main(sys.argv[2:]))"
)


@pytest.mark.slow
def test_the_object_store_tests_run_under_a_duckdb_with_an_httpfs_build(tmp_path):
    """DuckDB 2.0 fetches httpfs from its extension repository, which CI and the machines this was
    built on cannot reach, and PyPI has httpfs builds up to DuckDB 1.5.5 (which pyproject allows).
    So the tests marked `needs_httpfs` run in a child Python whose path holds DuckDB 1.5.5 and its
    httpfs package before this environment's packages, and moto's S3 server after them: each must
    pass there, none skip."""
    if _httpfs_binary() is not None:
        pytest.skip(
            f"DuckDB {duckdb.__version__} has httpfs here: the object-store tests ran in this process"
        )
    first = _installed(*HTTPFS_DUCKDB, deps=False)
    last = _installed(*S3_STAND_IN)
    report = tmp_path / "junit.xml"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")])),
    }
    command = [
        sys.executable,
        "-c",
        CHILD_PYTEST,
        str(last),
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "needs_httpfs",
    ]
    done = subprocess.run(
        [*command, f"--junitxml={report}", __file__],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = next(
            (child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed"
        )
        outcomes[case.get("name")] = outcome
    marked = {
        name
        for name, function in globals().items()
        if name.startswith("test_")
        and any(mark.name == "needs_httpfs" for mark in getattr(function, "pytestmark", []))
    }
    assert len(marked) == 3
    assert outcomes == dict.fromkeys(marked, "passed")


def test_a_dataset_exported_from_an_attached_lake_is_the_store_s(
    runner, analysed_store, tmp_path, monkeypatch
):
    """A lake's tables are views, without row ids: the export reads each chunk of traces by its
    ids alone, and writes what the store gives (chunks of a few messages, to have many)."""
    from datasets import load_dataset

    from traceforge.export import source

    monkeypatch.setattr(source, "CHUNK_MESSAGES", 40)
    assert export(runner, analysed_store, tmp_path / "lake").exit_code == 0
    attached = tmp_path / "attached.duckdb"
    assert (
        runner.invoke(cli, ["lake", "attach", str(tmp_path / "lake"), "--db", str(attached)]).exit_code == 0
    )
    loaded = {}
    for name, db in (("store", analysed_store), ("lake", attached)):
        out = tmp_path / f"from-{name}"
        args = ["export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1", "--json"]
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["rows"]["train"] > 5
        loaded[name] = load_dataset(str(out), "sft", split="train", cache_dir=str(tmp_path / name)).to_list()
    assert loaded["lake"] == loaded["store"]
