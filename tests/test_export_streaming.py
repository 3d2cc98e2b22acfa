"""Exports read the store a conversation at a time and write rows as they come: memory holds a
batch, the rows are the same whatever the batch, shards fill in order, and an export that stops
half-way leaves the folder as it was. On the analysed sample traces (21 traces)."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import Killed, killed_at_file_step
from datasets import load_dataset

from traceforge import store
from traceforge.cli import cli
from traceforge.export import card, folder, pipeline, selection, sft, source
from traceforge.export.hub import push_folder
from traceforge.export.pipeline import ExportOptions, export
from traceforge.export.selection import Criteria
from traceforge.export.source import Conversation

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module")
def samples_db(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("samples")
    db = workdir / "samples.duckdb"
    with contextlib.chdir(workdir):
        result = CliRunner().invoke(cli, ["analyze", str(SAMPLES), "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


def rows_of(out: Path, config: str, cache: Path) -> dict[str, list[dict]]:
    loaded = load_dataset(str(out), config, cache_dir=str(cache))
    return {split: loaded[split].to_list() for split in loaded}


def run_export(db: Path, out: Path, kind: str, **options) -> pipeline.ExportReport:
    con = store.connect(db, read_only=True)
    try:
        return export(con, ExportOptions(kind=kind, out=out, **options))
    finally:
        con.close()


@pytest.mark.parametrize("kind", ["sft", "parallel", "preference", "rl"])
def test_a_batch_of_conversations_is_held_and_the_rows_do_not_depend_on_it(
    samples_db, tmp_path, monkeypatch, kind
):
    whole = run_export(samples_db, tmp_path / "whole", kind)
    assert whole.total_rows > 4

    monkeypatch.setattr(pipeline, "BATCH_CONVERSATIONS", 2)
    monkeypatch.setattr(selection, "BATCH_TRACES", 2)
    alive = []

    def count_alive(done: int, total: int) -> None:
        alive.append(sum(isinstance(o, Conversation) for o in gc.get_objects()))

    con = store.connect(samples_db, read_only=True)
    try:
        batched = export(con, ExportOptions(kind=kind, out=tmp_path / "batched"), count_alive)
    finally:
        con.close()
    # the batch of rows just written and the batch of traces read ahead of it; never the selection
    assert max(alive) <= 2 * 2 + 1 < batched.selected
    assert batched.rows == whole.rows and batched.dropped == whole.dropped
    assert batched.left_out == whole.left_out and batched.turns == whole.turns
    assert batched.redaction == whole.redaction
    assert rows_of(tmp_path / "batched", kind, tmp_path / "c1") == rows_of(
        tmp_path / "whole", kind, tmp_path / "c2"
    )


@pytest.mark.parametrize("kind", ["sft", "preference"])
def test_worker_processes_give_the_export_one_process_gives(samples_db, tmp_path, monkeypatch, kind):
    """Conversations prepared and keyed in two worker processes, a few traces per piece of work so
    that pieces come back out of order: the same rows, drops, redactions and order."""
    monkeypatch.setattr(selection, "BATCH_TRACES", 2)
    alone = run_export(samples_db, tmp_path / "alone", kind, workers=1)
    shared = run_export(samples_db, tmp_path / "shared", kind, workers=2)
    assert alone.total_rows > 4
    assert (shared.rows, shared.dropped, shared.left_out) == (alone.rows, alone.dropped, alone.left_out)
    assert (shared.redaction, shared.turns) == (alone.redaction, alone.turns)
    assert rows_of(tmp_path / "shared", kind, tmp_path / "c1") == rows_of(
        tmp_path / "alone", kind, tmp_path / "c2"
    )


def test_progress_counts_traces_up_to_those_matched(samples_db, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "BATCH_CONVERSATIONS", 3)
    monkeypatch.setattr(selection, "BATCH_TRACES", 3)
    seen = []
    con = store.connect(samples_db, read_only=True)
    try:
        report = export(con, ExportOptions(kind="sft", out=tmp_path / "o"), lambda d, t: seen.append((d, t)))
    finally:
        con.close()
    assert len(seen) > 3
    assert all(total == report.matched for _, total in seen)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[0] < report.matched and done[-1] == report.matched


def test_shards_fill_in_order_to_about_their_size(samples_db, tmp_path):
    one = run_export(samples_db, tmp_path / "one", "sft", criteria=Criteria(splits=(("train", 1.0),)))
    assert one.files == ["sft/train-00000-of-00001.parquet"]
    limit = 20_000
    many = run_export(
        samples_db,
        tmp_path / "many",
        "sft",
        criteria=Criteria(splits=(("train", 1.0),)),
        max_shard_bytes=limit,
    )
    count = len(many.files)
    assert count > 3
    assert many.files == [f"sft/train-{i:05d}-of-{count:05d}.parquet" for i in range(count)]
    for name in many.files[:-1]:  # a shard ends when the next batch (at most a quarter) would not fit
        table = pq.read_table(tmp_path / "many" / name)
        assert table.nbytes <= limit * 1.5
    assert rows_of(tmp_path / "many", "sft", tmp_path / "c1") == rows_of(
        tmp_path / "one", "sft", tmp_path / "c2"
    )


def folder_bytes(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_an_export_that_stops_half_way_leaves_the_folder_as_it_was(samples_db, tmp_path, monkeypatch):
    out = tmp_path / "data"
    first = run_export(samples_db, out, "sft", max_shard_bytes=20_000)
    before = folder_bytes(out)
    made = sft.row
    calls = []

    def fails_on_the_sixth(conversation):
        calls.append(conversation.trace_id)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return made(conversation)

    monkeypatch.setattr(sft, "row", fails_on_the_sixth)
    with pytest.raises(KeyboardInterrupt):
        run_export(samples_db, out, "sft")
    assert folder_bytes(out) == before  # the shards written before the stop were removed
    assert not (out / folder.PARTIAL).exists()

    monkeypatch.setattr(sft, "row", made)
    again = run_export(samples_db, out, "sft")
    assert again.rows == first.rows and len(again.files) < len(first.files)
    assert not (out / folder.PARTIAL).exists()


def test_files_a_killed_export_left_do_not_stop_the_next(samples_db, tmp_path):
    """A kill leaves `.traceforge-partial/` (nothing else) in a new folder: the next export of that
    config clears it, and the folder counts as one traceforge writes."""
    out = tmp_path / "data"
    left = out / folder.PARTIAL / "sft"
    left.mkdir(parents=True)
    (left / "train-00000.parquet").write_bytes(b"half a shard")
    report = run_export(samples_db, out, "sft")
    assert report.total_rows > 0
    assert not (out / folder.PARTIAL).exists()
    assert sorted(p.name for p in (out / "sft").iterdir()) == [
        "test-00000-of-00001.parquet",
        "train-00000-of-00001.parquet",
    ]


def test_a_terminal_sees_the_traces_counted(samples_db, tmp_path):
    """On a terminal (rich's FORCE_COLOR stands in for one) the export counts traces on stderr,
    up to all of them; the report on stdout says the same (coloured, wrapped there)."""
    command = [sys.executable, "-m", "traceforge", "export", "sft", "--db", str(samples_db)]
    plain = subprocess.run([*command, "--out", str(tmp_path / "a")], capture_output=True, text=True)
    shown = subprocess.run(
        [*command, "--out", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        env={**os.environ, "FORCE_COLOR": "1"},
    )
    assert plain.returncode == shown.returncode == 0, shown.stderr
    assert "exporting sft" not in plain.stderr
    assert "exporting sft" in shown.stderr and "21/21" in shown.stderr and "traces" in shown.stderr
    uncoloured = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", shown.stdout).split())
    assert "sft: 21 traces matched, 20 usable; wrote train 18, test 2" in uncoloured
    assert "sft: 21 traces matched, 20 usable; wrote train 18, test 2" in plain.stdout


@pytest.mark.parametrize("stretches", [2, 64])
def test_chunks_of_a_few_messages_read_from_few_stretches_give_the_same_export(
    samples_db, tmp_path, monkeypatch, stretches
):
    """Messages and tool definitions are read a chunk of traces at a time, from the stretches of
    row ids the chunk's traces lie in: chunks of a few traces, read from their own stretches or
    from at most two (joined over rows of other traces), give the export one chunk gives."""
    whole = run_export(samples_db, tmp_path / "whole", "sft")
    monkeypatch.setattr(source, "CHUNK_MESSAGES", 60)
    monkeypatch.setattr(source, "CHUNK_RANGES", stretches)
    chunked = run_export(samples_db, tmp_path / "chunked", "sft")
    assert (chunked.rows, chunked.dropped, chunked.redaction) == (whole.rows, whole.dropped, whole.redaction)
    assert rows_of(tmp_path / "chunked", "sft", tmp_path / "c1") == rows_of(
        tmp_path / "whole", "sft", tmp_path / "c2"
    )


@pytest.mark.parametrize("old_shard_bytes", [20_000, folder.DEFAULT_MAX_SHARD_BYTES])
def test_an_export_killed_while_putting_its_files_in_place_is_finished_by_the_next(
    samples_db, tmp_path, old_shard_bytes
):
    """Killed at every step of its commit, an export replacing a config's files (9 shards by 2, or
    2 by 2 of the same names) leaves the old files whole (killed before its journal) or a journal
    the next export into the folder carries out: then the folder is what one never killed leaves."""
    reference = tmp_path / "reference"
    run_export(samples_db, reference, "sft", max_shard_bytes=old_shard_bytes)
    run_export(samples_db, reference, "sft")
    run_export(samples_db, reference, "parallel")
    expected = {n: b for n, b in folder_bytes(reference).items() if n.startswith(("sft/", "parallel/"))}
    manifest = folder.read_manifest(reference)["configs"]

    steps = None
    k = 0
    while steps is None or k <= steps:
        out = tmp_path / f"killed-{k}"
        run_export(samples_db, out, "sft", max_shard_bytes=old_shard_bytes)
        before = folder_bytes(out)
        with contextlib.suppress(Killed), killed_at_file_step(out, k) as taken:
            run_export(samples_db, out, "sft")
            steps = len(taken)  # not killed: k is past the commit's last step
        if steps is not None and k == steps:
            break
        if k == 0:  # the journal's own rename: the commit was not decided, the export is rerun
            assert folder_bytes(out) == before
            run_export(samples_db, out, "sft")
        else:
            assert (out / folder.PARTIAL / "sft" / folder.JOURNAL).exists()
        run_export(samples_db, out, "parallel")  # the next export finishes it first

        got = folder_bytes(out)
        assert {n: b for n, b in got.items() if n.startswith(("sft/", "parallel/"))} == expected, k
        assert not (out / folder.PARTIAL).exists()
        written = folder.read_manifest(out)
        assert written["configs"].keys() == manifest.keys()
        for config, entry in written["configs"].items():
            assert entry["files"] == manifest[config]["files"] and entry["rows"] == manifest[config]["rows"]
        assert got["README.md"].decode() == card.render_card(out, written)
        k += 1
    old = {n for n in before if n.startswith("sft/")}
    removed = old - set(manifest["sft"]["files"])  # the others are replaced by the moves
    # the test split is one shard whatever the size: test-00000-of-00001 is always replaced
    assert len(removed) == (len(old) - 1 if old_shard_bytes == 20_000 else 0) and len(old) >= 2
    assert steps == 1 + len(removed) + 2 + 2  # the journal, removals, 2 moves, manifest and card


def test_a_first_export_killed_half_way_through_its_commit_does_not_make_the_folder_foreign(
    samples_db, tmp_path
):
    """Killed after its journal and one file moved, a new folder holds a config's file but no
    manifest yet: the next export finishes that commit rather than refusing a folder that holds
    no traceforge export."""
    out = tmp_path / "data"
    with pytest.raises(Killed), killed_at_file_step(out, 2):
        run_export(samples_db, out, "sft")
    assert not (out / card.MANIFEST).exists() and len(list((out / "sft").iterdir())) == 1
    with folder.ConfigWriter(out, "openai", ["train"], features=None):  # the writer alone, too
        assert set(folder.read_manifest(out)["configs"]) == {"sft"}
    run_export(samples_db, out, "parallel")
    configs = folder.read_manifest(out)["configs"]
    assert set(configs) == {"sft", "parallel"}
    assert sorted(f"sft/{p.name}" for p in (out / "sft").iterdir()) == sorted(configs["sft"]["files"])


def test_a_folder_being_written_is_refused_to_a_second_export_and_to_a_push(samples_db, tmp_path):
    out = tmp_path / "data"
    refused: list[str] = []

    def meanwhile(done: int, total: int) -> None:
        if refused:
            return
        for attempt in (
            lambda: run_export(samples_db, out, "parallel"),
            lambda: push_folder(out, "org/data", token="hf_unused"),
        ):
            with pytest.raises(folder.FolderError) as error:
                attempt()
            refused.append(str(error.value))

    con = store.connect(samples_db, read_only=True)
    try:
        export(con, ExportOptions(kind="sft", out=out), meanwhile)
    finally:
        con.close()
    assert len(refused) == 2
    for message in refused:
        assert f"{out} is being written by another traceforge export or push" in message
    assert not (out / "parallel").exists()
    run_export(samples_db, out, "parallel")  # held no longer
    assert set(folder.read_manifest(out)["configs"]) == {"sft", "parallel"}


@pytest.mark.parametrize("code", ["ENOLCK", "EOPNOTSUPP"])
def test_a_folder_on_a_filesystem_without_locks_is_written_unlocked(samples_db, tmp_path, monkeypatch, code):
    """NFS without a lock daemon answers flock with ENOLCK, some FUSE mounts with EOPNOTSUPP: the
    export goes on there, as on a system without flock, instead of failing."""

    def no_locks(descriptor: int, operation: int) -> None:
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(folder.fcntl, "flock", no_locks)
    out = tmp_path / "data"
    run_export(samples_db, out, "sft")
    configs = folder.read_manifest(out)["configs"]
    assert set(configs) == {"sft"}
    assert sorted(f"sft/{p.name}" for p in (out / "sft").iterdir()) == sorted(configs["sft"]["files"])


def test_another_lock_failure_is_not_hidden(samples_db, tmp_path, monkeypatch):
    def denied(descriptor: int, operation: int) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(folder.fcntl, "flock", denied)
    with pytest.raises(PermissionError):
        run_export(samples_db, tmp_path / "data", "sft")
