"""The performance benchmark: ingest against DuckDB's own JSON reader and a plain Python loader,
full analyses at scale, peak memory, and the growth curve, all measured in one run.

    python benchmarks/run.py --quick          # small corpora, every table: about 3 minutes on 2 cores
    python benchmarks/run.py                  # the full run (1M tool calls; about 50 minutes on 2 cores)
    python benchmarks/run.py --json out.json  # also write every measurement as JSON
    python benchmarks/run.py --rounds 5       # each 1x loader measured 5 times (default 3)
    python benchmarks/run.py --plot out/      # also draw growth.svg and memory.svg (benchmarks/plot.py)

Every measurement runs in a child process of its own (`run.py --task ...`): the child reports its
wall time, its CPU time and its workers' (os.times) and its own peak RSS (getrusage); the runner
samples the resident memory of the child and all its worker processes together (`_TreeMemory`),
whose peak is the "peak RSS" printed, beside the main process's own. Corpora are written by
`benchmarks/corpus.py` under `benchmarks/corpus/` (git-ignored) and reused when already there.

Every time includes closing the database, which may write to it what it held. The traceforge
package's bytecode is compiled before anything is measured (`compileall`), as an installed package
has it: where Python is told not to write bytecode (PYTHONDONTWRITEBYTECODE), each worker process
would otherwise compile the modules it imports again in every measurement.

What is compared, on the same files in the same run, in rounds (`--rounds`, 3 by default: each
loader once per round; the medians, their ranges and the median of the rounds' ratios printed):
- `read_json`: DuckDB's own reader, `CREATE TABLE raw AS SELECT * FROM read_json([...],
  union_by_name = true)` into a fresh database file: the floor, since traceforge's store is a file
  too (the same into an in-memory database is shown beside it).
- `plain loader`: what a user would write: `json.loads` per line, then the record inserted as a row
  (path, line, record JSON) with `executemany` in batches of 1,000. It does less than traceforge
  (no normalising, no grouping, no tool calls): a conservative baseline.
- `traceforge ingest`: `traceforge.ingest.ingest_paths` into a fresh store (parsing workers: one per
  CPU).

The growth curve (1x, 2x, 4x) measures `analyze` and then `export sft` of the store it left: an
export reads the store a conversation at a time, so its peak RSS should stay flat as the input grows.

The same comparison is made for each format alone (the 1x corpus's files of each, and as many tool
calls written alone as a Responses API log and as Claude Code sessions): which adapter costs most
per byte.

Last, one big file (transcripts, then a gateway log, from a corpus written without rotation) is
ingested alone: half its lines, all of them, and all of them in files of 64 MB, each peak printed
against the 64 MB files': whether memory grows with a single file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus as corpus_module  # noqa: E402

CORPUS_ROOT = HERE / "corpus"
PLAIN_BATCH = 1_000

# name: (shape, tool calls, traces) per mode
SIZES = {
    "quick": {
        "growth": 2_000,  # tool calls at 1x; 2x and 4x follow
        "scale": ("mixed", 10_000, None),
        "long": ("long", 1_000, None),
        "small": ("small", None, 2_000),
        "big_file": 10_000,  # tool calls of a corpus written without rotation: one file per format
        "big_responses": 10_000,  # tool calls of a Responses API log written without rotation
    },
    "full": {
        "growth": 62_500,
        "scale": ("mixed", 1_000_000, None),
        "long": ("long", 5_000, None),
        "small": ("small", None, 100_000),
        "big_file": 500_000,  # a 1 GB transcripts file, a 0.9 GB gateway log, a 0.4 GB OTel export
        "big_responses": 80_000,  # a 0.5 GB Responses API log
    },
}


# --- the measured tasks (each runs in its own process) -------------------------------------------


def _files(corpus: Path) -> list[str]:
    return sorted(str(p) for p in corpus.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))


def task_read_json(corpus: Path, db: str) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect(db)
    started = time.perf_counter()
    con.execute("CREATE TABLE raw AS SELECT * FROM read_json(?, union_by_name = true)", [_files(corpus)])
    rows = con.execute("SELECT count(*) FROM raw").fetchone()[0]
    con.close()
    return {"seconds": time.perf_counter() - started, "rows": rows}


def task_plain(corpus: Path, db: str) -> dict[str, Any]:
    """The loader a user would write: json.loads per line, executemany of (path, line, JSON)."""
    import duckdb

    con = duckdb.connect(db)
    con.execute("CREATE TABLE records (path TEXT, line BIGINT, record JSON)")
    started = time.perf_counter()
    rows = 0
    for path in _files(corpus):
        batch = []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                record = json.loads(line)
                batch.append((path, number, json.dumps(record)))
                if len(batch) >= PLAIN_BATCH:
                    con.executemany("INSERT INTO records VALUES (?, ?, ?)", batch)
                    rows += len(batch)
                    batch = []
        if batch:
            con.executemany("INSERT INTO records VALUES (?, ?, ?)", batch)
            rows += len(batch)
    con.close()
    return {"seconds": time.perf_counter() - started, "rows": rows}


def task_ingest(corpus: Path, db: str, workers: int | None) -> dict[str, Any]:
    from traceforge import store
    from traceforge.ingest import ingest_paths

    con = store.connect(db)
    started = time.perf_counter()
    report = ingest_paths(con, [corpus], workers=workers)
    con.close()  # timed, as the baselines' are: DuckDB may write what it holds when it closes
    seconds = time.perf_counter() - started
    # what the store holds: a conversation spread over files once, not once per file that holds part
    held = report.after_joins or report.totals()
    return {"seconds": seconds, "tool_calls": held["tool_calls"], "traces": held["traces"]}


def task_analyze(corpus: Path, db: str, workers: int | None) -> dict[str, Any]:
    """Ingest, dependency analysis and the inference profile: what `traceforge analyze` computes."""
    from traceforge import store
    from traceforge.analysis.dag import analyze_dependencies
    from traceforge.export.profile import build_profile
    from traceforge.ingest import ingest_paths

    con = store.connect(db)
    phases = {}
    started = time.perf_counter()
    report = ingest_paths(con, [corpus], workers=workers)
    phases["ingest"] = time.perf_counter() - started
    mark = time.perf_counter()
    deps = analyze_dependencies(con)
    phases["deps"] = time.perf_counter() - mark
    mark = time.perf_counter()
    build_profile(con)
    con.close()  # in the profile's phase: the store is written when it closes
    phases["profile"] = time.perf_counter() - mark
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "phases": phases,
        "tool_calls": report.totals()["tool_calls"],
        "traces": report.totals()["traces"],
        "dag_traces": deps["traces"],
    }


def task_export(db: str) -> dict[str, Any]:
    """`traceforge export sft` of an analysed store (redaction and dedup on, as by default), into a
    folder beside it that is removed after."""
    from traceforge import store
    from traceforge.export.pipeline import ExportOptions, export

    out = Path(db).with_name("export-sft")
    con = store.connect(db, read_only=True)
    started = time.perf_counter()
    report = export(con, ExportOptions(kind="sft", out=out))
    con.close()
    seconds = time.perf_counter() - started
    shutil.rmtree(out)
    return {"seconds": seconds, "rows": report.total_rows, "traces": report.matched}


def run_task(args: argparse.Namespace) -> None:
    from traceforge.workers import collect_garbage_less_often

    collect_garbage_less_often()  # as the command line does
    before = os.times()
    corpus, db = Path(args.corpus), args.db
    if args.task == "read_json":
        result = task_read_json(corpus, db)
    elif args.task == "plain":
        result = task_plain(corpus, db)
    elif args.task == "ingest":
        result = task_ingest(corpus, db, args.workers)
    elif args.task == "export":
        result = task_export(db)
    else:
        result = task_analyze(corpus, db, args.workers)
    after = os.times()
    result["cpu_self"] = after.user - before.user + after.system - before.system
    result["cpu_workers"] = (
        after.children_user - before.children_user + after.children_system - before.children_system
    )
    result["rss_self_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


# --- the runner ---------------------------------------------------------------------------------


def measure(
    task: str, corpus: Path, db: Path | str, workers: int | None = None, keep: bool = False
) -> dict[str, Any]:
    """Run `task` in a child process on a fresh database file (an existing one for `export`, which
    reads the store `analyze` left), removed after unless `keep`."""
    on_disk = str(db) != ":memory:"
    stale_files = (Path(db), Path(f"{db}.wal")) if on_disk else ()
    for stale in stale_files if task != "export" else ():
        stale.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--task", task, "--corpus", str(corpus), "--db", str(db)]
    if workers is not None:
        command += ["--workers", str(workers)]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = _TreeMemory(child.pid)
    stdout, stderr = child.communicate()
    peak.stop()
    if child.returncode != 0:
        raise SystemExit(f"{task} on {corpus.name} failed:\n{stderr[-4000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - started
    # Sampling can miss a spike of the main process shorter than its period; its own peak is exact.
    result["rss_tree_mb"] = None if peak.peak_mb is None else max(peak.peak_mb, result["rss_self_mb"])
    result["task"] = task
    result["corpus"] = corpus.name
    result["input_mb"] = input_mb(corpus)
    for stale in stale_files if not keep else ():
        stale.unlink(missing_ok=True)
    return result


def input_mb(corpus: Path) -> float:
    """The megabytes of input in a corpus folder: its files, not its hidden manifest."""
    return sum(path.stat().st_size for path in corpus.iterdir() if not path.name.startswith(".")) / 1e6


class _TreeMemory:
    """The peak, sampled every 0.2 s, of the resident memory of a process and all its descendants
    together (Linux /proc): what the measured run held at once, its worker processes included.

    getrusage cannot say it: a child's ru_maxrss counts the parent's pages it shared between fork
    and exec, so a worker started by a big process reads as big as it."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak_mb: float | None = 0.0 if Path("/proc/self/statm").exists() else None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        if self.peak_mb is not None:
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _sample(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._done.wait(0.2):
            pages = 0
            for pid in self._tree():
                try:
                    pages += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
                except (OSError, IndexError, ValueError):
                    continue  # exited meanwhile
            self.peak_mb = max(self.peak_mb, pages * page / 2**20)

    def _tree(self) -> set[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
        tree, frontier = {self.root}, [self.root]
        while frontier:
            for child in children.get(frontier.pop(), ()):
                tree.add(child)
                frontier.append(child)
        return tree


def corpus_for(
    name: str,
    shape: str,
    tool_calls: int | None,
    traces: int | None,
    file_mb: float = 64.0,
    only: str | None = None,
) -> tuple[Path, dict]:
    folder = CORPUS_ROOT / name
    manifest_path = folder / corpus_module.MANIFEST
    wanted = {"shape": shape, "tool_calls": tool_calls, "traces": traces, "seed": corpus_module.DEFAULT_SEED}
    if file_mb != 64.0:
        wanted["file_mb"] = file_mb
    if only is not None:
        wanted["only"] = only
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("request") == wanted:
            return folder, manifest
    print(f"  writing corpus {name} ...", file=sys.stderr, flush=True)
    # In a child process: the generator holds each format's file until it rotates (a whole file for
    # the big-file corpus), and a measured child's own peak (getrusage) counts the pages of the
    # process that started it.
    command = [
        sys.executable,
        str(HERE / "corpus.py"),
        str(folder),
        "--shape",
        shape,
        "--file-mb",
        str(file_mb),
    ]
    if tool_calls is not None:
        command += ["--tool-calls", str(tool_calls)]
    if traces is not None:
        command += ["--traces", str(traces)]
    if only is not None:
        command += ["--only", only]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    manifest = json.loads(manifest_path.read_text())
    manifest["request"] = wanted
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    # The kernel writes a new corpus's gigabytes back to disk for a while after: measured then, the
    # first loaders compete with that writing (a 1x ingest took 9.0 s, 6.0 s once it was done).
    os.sync()
    return folder, manifest


def big_file_table(mode: str, scratch: Path, workers: int | None, note: Any) -> Any:
    """Peak RSS of one big file (transcripts, a gateway log, an OTel export, a Responses API log)
    ingested alone, against half its lines, against its records as one JSON array (as platforms
    export them) and against all of them in files of 64 MB: whether memory grows with one file."""
    from rich.table import Table

    from traceforge.ingest.parts import PARTS_MIN_BYTES

    folder, _ = corpus_for(f"bigfile-{mode}", "mixed", SIZES[mode]["big_file"], None, file_mb=1e6)
    responses, _ = corpus_for(
        f"bigfile-responses-{mode}", "mixed", SIZES[mode]["big_responses"], None, 1e6, "openai-responses"
    )
    table = Table(
        title="One big file, ingested alone: half its lines, all of them, all of them as one JSON "
        f"array, and in 64 MB files (files of {PARTS_MIN_BYTES >> 20} MiB or more are written in parts)"
    )
    for column in ("file", "MB", "traces", "tool calls", "ingest s", "peak RSS MB", "against 64 MB files"):
        table.add_column(column, justify="right" if column != "file" else "left")
    sources = [next(folder.glob(f"{fmt}-*.jsonl")) for fmt in ("transcripts", "openai-log", "otlp")]
    for source in [*sources, next(responses.glob("openai-responses-*.jsonl"))]:
        fmt = source.name.rsplit("-", 1)[0]
        measured = {}
        for layout in ("split", "half", "whole", "array"):
            files = big_file_layout(source, scratch / f"{fmt}-{layout}", layout)
            result = measure("ingest", files, scratch / INGEST_DB, workers)
            result["format"], result["layout"] = fmt, layout
            measured[layout] = note(result)
            shutil.rmtree(files)
        baseline = peak_mb(measured["split"])
        for label, layout in (
            ("half", "half"),
            ("whole", "whole"),
            ("as one JSON array", "array"),
            ("in 64 MB files", "split"),
        ):
            result = measured[layout]
            table.add_row(
                f"{fmt}, {label}",
                f"{result['input_mb']:,.0f}",
                f"{result['traces']:,}",
                f"{result['tool_calls']:,}",
                f"{result['seconds']:.1f}",
                _rss(result),
                f"{peak_mb(result) / baseline:.2f}",
            )
    return table


def format_table(
    sources: list[tuple[str, Path]], scratch: Path, rounds: int, workers: int | None, note: Any
) -> Any:
    """Each format alone, against DuckDB's `read_json` and the plain loader as the 1x corpus is
    (`compare_loaders`): per (format, corpus folder), the folder's files of that format. What a user
    whose traces are all of one format can expect, and which adapter costs most per byte."""
    from rich.table import Table

    table = Table(
        title=f"Ingest per format: each format's files alone, {rounds} round"
        f"{'s' if rounds > 1 else ''} (medians; the ratios' medians and ranges)"
    )
    for column in (
        "format",
        "files",
        "MB",
        "tool calls",
        "traceforge s",
        "read_json s",
        "traceforge against read_json",
        "plain loader s",
        "traceforge against plain",
        "MB/s",
    ):
        table.add_column(column, justify="right" if column != "format" else "left")
    for fmt, corpus in sources:
        files = sorted(corpus.glob(f"{fmt}-*.jsonl"))
        if not files:
            continue
        folder = scratch / f"format-{fmt}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for source in files:
            _link_or_copy(source, folder / source.name)
        loaders = compare_loaders(folder, scratch, rounds, workers)
        for result in loaders["rounds"]:
            result["format"] = fmt
            note(result)
        ingest = loaders["ingest"]
        table.add_row(
            fmt,
            str(len(files)),
            f"{ingest['input_mb']:,.0f}",
            f"{ingest['tool_calls']:,}",
            f"{ingest['seconds']:.1f}",
            f"{loaders['read_json']['seconds']:.1f}",
            relation_to(loaders["ratio"]["read_json"], floor=True),
            f"{loaders['plain']['seconds']:.1f}",
            relation_to(loaders["ratio"]["plain"], floor=False),
            f"{ingest['input_mb'] / ingest['seconds']:.0f}",
        )
        shutil.rmtree(folder)
    return table


SPLIT_BYTES = 64 << 20  # the files `big_file_layout` cuts a big file into, as `split -C 64m` does


def big_file_layout(source: Path, folder: Path, layout: str) -> Path:
    """A folder holding `source` as it is (`whole`, a hard link where the file system allows), its
    first lines up to half its bytes (`half`), its lines as the elements of one JSON array, one a
    line (`array`), or its lines in files of at most `SPLIT_BYTES` (`split`: what `split -C 64m`
    writes)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    target = folder / source.name
    if layout == "whole":
        _link_or_copy(source, target)
        return folder
    if layout == "array":
        with source.open("rb") as lines, target.with_suffix(".json").open("wb") as out:
            out.write(b"[")
            for n, line in enumerate(lines):
                out.write((b"\n" if n == 0 else b",\n") + line.rstrip(b"\r\n"))
            out.write(b"\n]\n")
        return folder
    limit = source.stat().st_size // 2 if layout == "half" else SPLIT_BYTES
    part, written, out = 0, 0, None
    with source.open("rb") as lines:
        for line in lines:
            if out is None or written + len(line) > limit:
                if out is not None:
                    out.close()
                    if layout == "half":
                        return folder
                out = (folder / f"part-{part:03d}.jsonl").open("wb")
                part, written = part + 1, 0
            out.write(line)
            written += len(line)
    if out is not None:
        out.close()
    return folder


def _link_or_copy(source: Path, target: Path) -> None:
    """`source` at `target` too: a hard link where the file system allows, else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def compile_package() -> None:
    """Compile traceforge's modules to bytecode, as installing the package does (see the module's
    docstring)."""
    import compileall

    import traceforge

    compileall.compile_dir(Path(traceforge.__file__).parent, quiet=1)


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import duckdb
    import polars

    from traceforge import store
    from traceforge.workers import default_workers

    return {
        "commit": _commit(),
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": round(memory, 1),
        "python": sys.version.split()[0],
        "duckdb": duckdb.__version__,
        "polars": polars.__version__,
        "duckdb_memory_limit": {**store.DEFAULT_SETTINGS, **store.settings_from_env()}["memory_limit"],
        "workers": default_workers(),
        "load_average_at_start": os.getloadavg(),
    }


def _commit() -> str | None:
    """The checkout's commit, marked `-dirty` where it has changes; None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}-dirty" if changed else head


def _mb(manifest: dict) -> float:
    return manifest["totals"]["bytes"] / 1e6


def _cores(result: dict) -> float:
    return (result["cpu_self"] + result["cpu_workers"]) / result["seconds"] if result["seconds"] else 0.0


def peak_mb(result: dict) -> float:
    """A measurement's peak RSS: all its processes together, or its main process's where /proc
    could not be sampled."""
    return result["rss_tree_mb"] or result["rss_self_mb"]


def _rss(result: dict) -> str:
    """All processes together at their peak, and the main process's own peak."""
    tree, main = result["rss_tree_mb"], result["rss_self_mb"]
    return f"{main:,.0f}" if tree is None else f"{tree:,.0f} ({main:,.0f} main)"


INGEST_DB = "ingest.duckdb"  # the store traceforge's ingest writes, in the loaders' rounds and alone
LOADERS = (  # (name, task, database file or ":memory:")
    ("ingest", "ingest", INGEST_DB),
    ("read_json", "read_json", "read_json.duckdb"),
    ("read_json_memory", "read_json", ":memory:"),
    ("plain", "plain", "plain.duckdb"),
)


def compare_loaders(folder: Path, scratch: Path, rounds: int, workers: int | None) -> dict[str, Any]:
    """Every loader on the same files, `rounds` times, one loader after another in each round.

    A single measurement of each is at the mercy of the machine's moment (the first measurement of
    a run has come out slow, and a shared VM's neighbours come and go): each loader's figure is
    its median round by wall time (the lower of the middle two for an even count), with the range
    beside it, and each ratio is traceforge's time over the other loader's within the same round,
    of which the median is reported.
    Returns {loader: median result, "range": {loader: (min s, max s)}, "ratio": {loader: (median,
    (min, max))}, "rounds": every result}."""
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in LOADERS}
    for number in range(rounds):
        for name, task, db in LOADERS:
            target = db if db == ":memory:" else scratch / db
            result = measure(task, folder, target, workers if task == "ingest" else None)
            result["loader"], result["round"] = name, number + 1
            measured[name].append(result)
    every = [result for results in measured.values() for result in results]
    summary: dict[str, Any] = {"range": {}, "ratio": {}, "rounds": every}
    for name, results in measured.items():
        by_time = sorted(results, key=lambda r: r["seconds"])
        summary[name] = by_time[(len(by_time) - 1) // 2]
        summary["range"][name] = (by_time[0]["seconds"], by_time[-1]["seconds"])
        if name != "ingest":
            ratios = sorted(
                ours["seconds"] / theirs["seconds"]
                for ours, theirs in zip(measured["ingest"], results, strict=True)
            )
            summary["ratio"][name] = (ratios[(len(ratios) - 1) // 2], (ratios[0], ratios[-1]))
    return summary


def relation_to(ratio: tuple[float, tuple[float, float]], floor: bool) -> str:
    """How traceforge compares with another loader, from `compare_loaders`' ratio of traceforge's
    time to the loader's (median, (min, max)): a multiple of a floor's time, else how many times
    faster (the range inverted with it) or slower."""
    median, (low, high) = ratio
    if floor:
        return f"{median:.2f}x its time ({low:.2f}-{high:.2f})"
    if median <= 1:
        return f"{1 / median:.2f}x faster ({1 / high:.2f}-{1 / low:.2f})"
    return f"{median:.2f}x slower ({low:.2f}-{high:.2f})"


def run(
    mode: str, json_path: str | None, workers: int | None, rounds: int = 3, plot: str | None = None
) -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table

    sizes = SIZES[mode]
    compile_package()
    console = Console(stderr=True, width=max(Console(stderr=True).width, 132))
    scratch = CORPUS_ROOT / "_stores"
    scratch.mkdir(parents=True, exist_ok=True)
    info = machine()
    # Every traceforge run uses the same number of parsing workers (by default one per CPU), so the
    # growth curve is not bent by small inputs being parsed in-process.
    workers = workers or info["workers"]
    results: dict[str, Any] = {"mode": mode, "rounds": rounds, "machine": info, "measurements": []}

    def note(result: dict, **tags: Any) -> dict:
        """Keep `result`, with `tags` saying where it belongs (read by benchmarks/plot.py)."""
        result.update(tags)
        results["measurements"].append(result)
        return result

    console.print(
        f"[bold]traceforge benchmark ({mode})[/]: {info['cpus']} CPUs, {info['cpu_model']}, "
        f"{info['memory_gib']} GiB, load average {info['load_average_at_start'][0]:.2f}, "
        f"DuckDB memory limit {info['duckdb_memory_limit']}"
    )

    # 1. ingest against the floor and the plain loader, then the growth curve
    growth = []
    for factor in (1, 2, 4):
        folder, manifest = corpus_for(f"growth-{factor}x-{mode}", "mixed", sizes["growth"] * factor, None)
        console.print(f"  growth {factor}x: {_mb(manifest):,.0f} MB")
        entry = {"factor": factor, "manifest": manifest, "folder": folder}
        if factor == 1:
            loaders = compare_loaders(folder, scratch, rounds, workers)
            for result in loaders["rounds"]:
                note(result, factor=factor)
            entry["loaders"] = loaders
            entry["ingest"] = loaders["ingest"]
        else:
            entry["ingest"] = note(measure("ingest", folder, scratch / INGEST_DB, workers), factor=factor)
        analyzed = measure("analyze", folder, scratch / "analyze.duckdb", workers, keep=True)
        entry["analyze"] = note(analyzed, factor=factor)
        entry["export"] = note(measure("export", folder, scratch / "analyze.duckdb"), factor=factor)
        growth.append(entry)
    base = growth[0]
    loaders = base["loaders"]

    table = Table(
        title=f"Ingest, {_mb(base['manifest']):,.0f} MB ({base['manifest']['totals']['tool_calls']:,} "
        f"tool calls), same files, {rounds} round{'s' if rounds > 1 else ''}: medians, ranges, "
        "and the median of the rounds' ratios"
    )
    for column in ("loader", "wall s", "range s", "CPU s", "cores", "peak RSS MB", "traceforge is"):
        table.add_column(column, justify="right" if column != "loader" else "left")
    for label, loader in (
        ("DuckDB read_json into a file (floor)", "read_json"),
        ("DuckDB read_json in memory", "read_json_memory"),
        ("plain Python loader", "plain"),
        ("traceforge ingest", "ingest"),
    ):
        result, (low, high) = loaders[loader], loaders["range"][loader]
        ratio = loaders["ratio"].get(loader)
        relation = "—" if ratio is None else relation_to(ratio, floor=label.startswith("DuckDB"))
        table.add_row(
            label,
            f"{result['seconds']:.1f}",
            f"{low:.1f}-{high:.1f}",
            f"{result['cpu_self'] + result['cpu_workers']:.1f}",
            f"{_cores(result):.2f}",
            _rss(result),
            relation,
        )
    console.print(table)
    # each format alone: the 1x corpus's, and as many tool calls written alone as a Responses API
    # log and as Claude Code sessions
    sources = [(fmt, base["folder"]) for fmt in corpus_module.FORMATS]
    for fmt in ("openai-responses", "claude-code"):
        sources.append((fmt, corpus_for(f"format-{fmt}-{mode}", "mixed", sizes["growth"], None, only=fmt)[0]))
    console.print(format_table(sources, scratch, rounds, workers, note))

    table = Table(title="Growth: the same mix at 1x, 2x, 4x")
    for column in ("input", "MB", "tool calls", "ingest s", "ratio", "analyze s", "ratio", "peak RSS MB"):
        table.add_column(column, justify="right")
    for entry in growth:
        table.add_row(
            f"{entry['factor']}x",
            f"{_mb(entry['manifest']):,.0f}",
            f"{entry['manifest']['totals']['tool_calls']:,}",
            f"{entry['ingest']['seconds']:.1f}",
            f"{entry['ingest']['seconds'] / base['ingest']['seconds']:.2f}",
            f"{entry['analyze']['seconds']:.1f}",
            f"{entry['analyze']['seconds'] / base['analyze']['seconds']:.2f}",
            _rss(entry["analyze"]),
        )
    console.print(table)

    table = Table(title="Export sft of the analysed store at 1x, 2x, 4x")
    for column in ("input", "traces", "rows", "export s", "ratio", "peak RSS MB"):
        table.add_column(column, justify="right")
    for entry in growth:
        table.add_row(
            f"{entry['factor']}x",
            f"{entry['export']['traces']:,}",
            f"{entry['export']['rows']:,}",
            f"{entry['export']['seconds']:.1f}",
            f"{entry['export']['seconds'] / base['export']['seconds']:.2f}",
            _rss(entry["export"]),
        )
    console.print(table)

    # 2. full analyses at scale
    table = Table(title="Full analysis (ingest + dependencies + profile)")
    for column in (
        "corpus",
        "MB",
        "traces",
        "tool calls",
        "ingest s",
        "deps s",
        "profile s",
        "total s",
        "cores",
        "peak RSS MB",
    ):
        table.add_column(column, justify="right" if column != "corpus" else "left")
    for name in ("scale", "long", "small"):
        shape, tool_calls, traces = sizes[name]
        folder, manifest = corpus_for(f"{name}-{mode}", shape, tool_calls, traces)
        console.print(f"  {name}: {_mb(manifest):,.0f} MB")
        result = note(measure("analyze", folder, scratch / "analyze.duckdb", workers), analysis=name)
        phases = result["phases"]
        label = {
            "scale": f"{manifest['totals']['tool_calls']:,} tool calls, mixed",
            "long": f"one {manifest['totals']['tool_calls']:,}-call trace",
            "small": f"{manifest['totals']['traces']:,} small traces",
        }[name]
        table.add_row(
            label,
            f"{_mb(manifest):,.0f}",
            f"{result['traces']:,}",
            f"{result['tool_calls']:,}",
            f"{phases['ingest']:.1f}",
            f"{phases['deps']:.1f}",
            f"{phases['profile']:.1f}",
            f"{result['seconds']:.1f}",
            f"{_cores(result):.2f}",
            _rss(result),
        )
    console.print(table)

    # 3. one big file, against the same lines in files of 64 MB
    console.print(big_file_table(mode, scratch, workers, note))
    results["load_average_at_end"] = os.getloadavg()
    shutil.rmtree(scratch, ignore_errors=True)
    if json_path:
        for entry in results["measurements"]:
            entry.pop("folder", None)
        Path(json_path).write_text(json.dumps(results, indent=1, default=str) + "\n")
    if plot:
        from plot import write_figures  # here: the measured children need not import it

        for path in write_figures(results, Path(plot)):
            console.print(f"wrote {path}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small corpora, every table: about 3 minutes")
    parser.add_argument("--json", help="also write every measurement to this JSON file")
    parser.add_argument(
        "--plot", metavar="FOLDER", help="also draw the growth and memory figures there (benchmarks/plot.py)"
    )
    parser.add_argument("--workers", type=int, help="parsing workers (default: one per CPU)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="times each loader is measured on the 1x corpus (medians and ranges are printed)",
    )
    parser.add_argument(
        "--task", choices=("read_json", "plain", "ingest", "analyze", "export"), help=argparse.SUPPRESS
    )
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    if args.task:
        run_task(args)
    else:
        run("quick" if args.quick else "full", args.json, args.workers, args.rounds, args.plot)


if __name__ == "__main__":
    main()
