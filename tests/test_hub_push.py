"""`traceforge push` and `export --push-to-hub` through the real huggingface_hub client, against a
stand-in of the Hub HTTP API on loopback (tests/hub_standin.py); what it received must load back as
the same dataset."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import huggingface_hub.constants
import pytest
from conftest import Killed, killed_at_file_step
from datasets import load_dataset
from hub_standin import HubStandIn

from traceforge import store
from traceforge.cli import cli
from traceforge.export.hub import HubError, push_folder
from traceforge.export.pipeline import ExportOptions, export
from traceforge.export.selection import Criteria

TOKEN = "hf_" + "standin" * 5


@pytest.fixture(autouse=True)
def no_stored_token(tmp_path, monkeypatch):
    """No token from the environment or from a `hf auth login` file on this machine."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with HubStandIn(tmp_path / "hub", token=TOKEN) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
        yield standin


@pytest.fixture
def folder(runner, db, tmp_path) -> Path:
    out = tmp_path / "data"
    for kind in ("sft", "parallel"):
        result = runner.invoke(
            cli, ["export", kind, "--db", str(db), "--out", str(out)], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
    return out


def same_dataset(local: Path, received: Path, config: str, cache: Path) -> None:
    mine = load_dataset(str(local), config, cache_dir=str(cache / "local"))
    theirs = load_dataset(str(received), config, cache_dir=str(cache / "received"))
    assert set(mine) == set(theirs)
    for split in mine:
        assert theirs[split].features == mine[split].features
        assert theirs[split].to_list() == mine[split].to_list()


def local_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_push_round_trip_private_by_default(runner, hub, folder, tmp_path):
    result = runner.invoke(cli, ["push", str(folder), "my-org/agent-traces", "--token", TOKEN])
    assert result.exit_code == 0, result.output
    assert "private" in result.output and "created" in result.output
    repo = hub.repos["dataset:my-org/agent-traces"]
    assert repo.private is True
    received = hub.files_of("my-org/agent-traces")
    assert local_files(received) == local_files(folder)
    for config in ("sft", "parallel"):
        same_dataset(folder, received, config, tmp_path)
    assert ("POST", "/api/repos/create") in hub.requests


def test_what_a_killed_export_left_is_not_pushed(runner, hub, folder, tmp_path):
    left = folder / ".traceforge-partial" / "sft"
    left.mkdir(parents=True)
    (left / "train-00000.parquet").write_bytes(b"half a shard")
    result = runner.invoke(cli, ["push", str(folder), "org/partial", "--token", TOKEN])
    assert result.exit_code == 0, result.output
    received = local_files(hub.files_of("org/partial"))
    assert received == local_files(folder) - {".traceforge-partial/sft/train-00000.parquet"}
    assert not any("partial" in name for name in received)


def test_push_first_finishes_an_export_killed_while_putting_its_files_in_place(
    runner, hub, folder, db, tmp_path
):
    """Killed after its journal, the first old shard removed and the first new file moved: push
    completes that commit and sends the folder as the export meant it (no old shard, nothing
    left under .traceforge-partial/)."""
    con = store.connect(db, read_only=True)
    try:
        options = ExportOptions(kind="sft", out=folder, max_shard_bytes=1_000)
        with pytest.raises(Killed), killed_at_file_step(folder, 3) as taken:
            export(con, options)
        assert taken[0].name == "COMMIT.new" and len(taken) == 3
    finally:
        con.close()
    result = runner.invoke(cli, ["push", str(folder), "org/finished", "--token", TOKEN])
    assert result.exit_code == 0, result.output
    assert not (folder / ".traceforge-partial").exists()
    manifest = json.loads((folder / "traceforge-export.json").read_text())
    sft = {f"sft/{p.name}" for p in (folder / "sft").iterdir()}
    assert sft == set(manifest["configs"]["sft"]["files"]) and len(sft) > 2
    received = hub.files_of("org/finished")
    assert local_files(received) == local_files(folder)
    same_dataset(folder, received, "sft", tmp_path)


def test_a_broken_manifest_is_reported_not_pushed(runner, hub, folder):
    (folder / "traceforge-export.json").write_text('{"configs": {', encoding="utf-8")
    result = runner.invoke(cli, ["push", str(folder), "org/broken", "--token", TOKEN])
    assert result.exit_code == 1 and not isinstance(result.exception, ValueError)
    assert "traceforge-export.json: not valid JSON" in result.output and "remove it" in result.output
    assert "dataset:org/broken" not in hub.repos


def test_a_folder_that_is_not_there_is_reported_not_pushed(runner, hub, tmp_path):
    missing = tmp_path / "no-such-export"
    result = runner.invoke(cli, ["push", str(missing), "org/none", "--token", TOKEN])
    assert result.exit_code == 2 and "does not exist" in result.output  # click checks the argument
    with pytest.raises(HubError, match="is not a folder; write an export with `traceforge export sft"):
        push_folder(missing, "org/none", token=TOKEN)  # the library says what to do too
    assert not missing.exists() and "dataset:org/none" not in hub.repos


def test_export_push_to_hub_with_the_token_from_the_environment(runner, hub, db, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out = tmp_path / "rl"
    result = runner.invoke(
        cli, ["export", "rl", "--db", str(db), "--out", str(out), "--push-to-hub", "org/rl"]
    )
    assert result.exit_code == 0, result.output
    assert hub.repos["dataset:org/rl"].private is True
    same_dataset(out, hub.files_of("org/rl"), "rl", tmp_path)


def test_public_only_when_asked_and_never_into_a_public_repo_by_default(runner, hub, folder):
    assert runner.invoke(cli, ["push", str(folder), "org/open", "--public", "--token", TOKEN]).exit_code == 0
    assert hub.repos["dataset:org/open"].private is False
    commits = len(hub.repos["dataset:org/open"].commits)
    refused = runner.invoke(cli, ["push", str(folder), "org/open", "--token", TOKEN])
    assert refused.exit_code == 1
    assert "already exists and is public" in refused.output and "--public" in refused.output
    assert len(hub.repos["dataset:org/open"].commits) == commits  # nothing uploaded
    again = runner.invoke(cli, ["push", str(folder), "org/open", "--public", "--token", TOKEN])
    assert again.exit_code == 0 and "updated" in again.output


def test_repush_replaces_the_shards_of_a_config(runner, hub, db, tmp_path):
    out = tmp_path / "data"
    con = store.connect(db, read_only=True)
    options = ExportOptions(
        kind="sft", out=out, criteria=Criteria(splits=(("train", 1.0),)), max_shard_bytes=2000
    )
    first = export(con, options)
    assert len(first.files) > 1  # several shards
    assert runner.invoke(cli, ["push", str(out), "org/shards", "--token", TOKEN]).exit_code == 0
    options.max_shard_bytes = 10**9
    second = export(con, options)
    con.close()
    assert len(second.files) == 1
    assert runner.invoke(cli, ["push", str(out), "org/shards", "--token", TOKEN]).exit_code == 0
    received = hub.files_of("org/shards")
    assert sorted(p.name for p in (received / "sft").iterdir()) == ["train-00000-of-00001.parquet"]
    same_dataset(out, received, "sft", tmp_path)


def test_no_token(runner, hub, folder):
    result = runner.invoke(cli, ["push", str(folder), "org/x"])
    assert result.exit_code == 1
    assert "no Hugging Face token" in result.output and "HF_TOKEN" in result.output
    assert hub.requests == []


def test_token_refused(runner, hub, folder):
    result = runner.invoke(cli, ["push", str(folder), "org/x", "--token", "hf_wrong"])
    assert result.exit_code == 1
    assert "refused the token (401)" in result.output


def test_hub_unreachable(runner, folder, monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    result = runner.invoke(cli, ["push", str(folder), "org/x", "--token", TOKEN])
    assert result.exit_code == 1
    assert f"cannot reach the Hugging Face Hub at http://127.0.0.1:{port}" in result.output


def test_folder_without_an_export(runner, hub, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(cli, ["push", str(empty), "org/x", "--token", TOKEN])
    assert result.exit_code == 1 and "holds no traceforge export" in result.output


def test_the_token_never_reaches_the_card(runner, hub, db, tmp_path, monkeypatch):
    out = tmp_path / "data"
    args = ["export", "sft", "--db", str(db), "--out", str(out), "--push-to-hub", "org/t", "--token", TOKEN]
    monkeypatch.setattr("sys.argv", ["traceforge", *args])  # the command line the card records
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    received = hub.files_of("org/t")
    for name in ("README.md", "traceforge-export.json"):
        text = (received / name).read_text()
        assert "--token REDACTED" in text and TOKEN not in text


def test_a_failed_push_keeps_the_export(runner, hub, db, tmp_path):
    out = tmp_path / "data"
    result = runner.invoke(
        cli, ["export", "sft", "--db", str(db), "--out", str(out), "--push-to-hub", "org/n"]
    )
    assert result.exit_code == 1
    assert f"the export is in {out}, but the push failed: no Hugging Face token" in result.output
    assert "sft: 8 traces matched" in result.output  # the export's report came first
    assert list((out / "sft").glob("*.parquet")) and hub.repos == {}


def test_an_unredacted_export_is_not_pushed_unless_allowed_again(runner, hub, db, tmp_path):
    out = tmp_path / "raw"
    made = runner.invoke(cli, ["export", "sft", "--db", str(db), "--out", str(out), "--no-redact"])
    assert made.exit_code == 0, made.output
    refused = runner.invoke(cli, ["push", str(out), "org/raw", "--token", TOKEN])
    assert refused.exit_code == 1
    assert "--no-redact" in refused.output and "--allow-unredacted" in refused.output
    assert "dataset:org/raw" not in hub.repos  # nothing created, nothing uploaded
    allowed = runner.invoke(cli, ["push", str(out), "org/raw", "--token", TOKEN, "--allow-unredacted"])
    assert allowed.exit_code == 0, allowed.output
    assert hub.repos["dataset:org/raw"].private is True
