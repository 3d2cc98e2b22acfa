"""The benchmark's memory sampler (`benchmarks/run.py`): it must count a measured process's worker
processes too, or the peak it prints for a parallel run would be too low."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import run as bench

HOLD = "import time; block = b'x' * (200 << 20); time.sleep(2)"  # 200 MB written, so resident
needs_proc = pytest.mark.skipif(
    not Path("/proc/self/statm").exists(), reason="the benchmark samples memory from Linux's /proc"
)


@needs_proc
def test_the_peak_counts_the_memory_of_a_grandchild():
    # a parent that holds little and starts a child holding 200 MB, as traceforge starts its workers
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {HOLD!r}])"]
    )
    sampler = bench._TreeMemory(parent.pid)
    parent.wait(timeout=60)
    time.sleep(0.3)
    sampler.stop()
    assert sampler.peak_mb >= 200


@needs_proc
def test_a_measurement_never_reports_the_tree_below_its_main_process(tmp_path):
    # A sampler that wakes every 0.2 s can miss the main process's short peak (a run printed
    # "395 (478 main)"); the main process's own peak, from the kernel, is exact.
    folder = tmp_path / "corpus"
    bench.corpus_module.generate(folder, tool_calls=50, traces=None, shape="mixed")
    result = bench.measure("read_json", folder, tmp_path / "raw.duckdb")
    assert result["rows"] > 0
    assert result["rss_tree_mb"] >= result["rss_self_mb"] > 0
    # the input's size, for the memory figure (benchmarks/plot.py): the corpus, not its manifest
    written = json.loads((folder / bench.corpus_module.MANIFEST).read_text())["totals"]["bytes"]
    assert result["input_mb"] == written / 1e6


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_run_records_the_commit_it_measured():
    here = Path(bench.__file__).parent
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    recorded = bench.machine()["commit"]
    assert recorded.removesuffix("-dirty") == head.stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True
    )
    assert recorded.endswith("-dirty") == bool(changed.stdout.strip())


def test_a_run_outside_a_git_checkout_records_no_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "HERE", tmp_path)  # a folder no git repository holds
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert bench._commit() is None
    assert bench.machine()["commit"] is None
