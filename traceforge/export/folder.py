"""The export folder: one sub-folder per config, parquet shards per split, a manifest and a card.

    data/
      README.md                      dataset card: YAML `configs` + `dataset_info`, how it was made
      traceforge-export.json         the manifest: per config, what was selected, dropped, redacted
      sft/train-00000-of-00001.parquet
      sft/test-00000-of-00001.parquet
      parallel/train-00000-of-00001.parquet
      sft-openai/train.jsonl         (--format openai: OpenAI fine-tuning files)

Several exports can share a folder (each is a config, as on the Hub), so `traceforge push` can
publish them as one dataset. Writing a config replaces that config's files and nothing else, once
its new files are all written (`ConfigWriter`, which writes rows as they come, a batch at a time),
through a journal that the next export or push completes if the process dies half way through;
`datasets.load_dataset(folder, config)` reads it back through the card's `configs`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets import Dataset, Features
from datasets.arrow_writer import ParquetWriter

from traceforge.export.card import MANIFEST, render_card
from traceforge.files import replace_text

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

DEFAULT_MAX_SHARD_BYTES = 500 * 1024 * 1024  # as datasets' push_to_hub
PARTIAL = ".traceforge-partial"  # a config's files while they are written (see ConfigWriter)
JOURNAL = "COMMIT"  # in a config's partial folder: what its commit does, once decided
BATCH_ROWS = 1000  # rows converted and written together: datasets' default writer batch
BATCH_BYTES = 16 * 1024 * 1024  # of rows' sizes as added: a row group of about as many Arrow bytes


class FolderError(ValueError):
    """An output folder traceforge will not write into, with what to do."""


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.exists():
        return {"configs": {}}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FolderError(f"{path}: not valid JSON ({exc}); remove it or choose another --out") from exc
    manifest.setdefault("configs", {})
    return manifest


def prepare(folder: Path) -> dict[str, Any]:
    """Check that `folder` is new, empty or an export folder no other export or push is writing,
    finish the commits an earlier export left half done, and return its manifest."""
    _not_a_file(folder)
    if folder.is_dir():
        with writing(folder):
            finish_journals(folder)
    return _checked(folder)


def _not_a_file(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise FolderError(f"{folder} is a file; --out must be a folder")


def _checked(folder: Path) -> dict[str, Any]:
    """The manifest of a folder that is empty or an export folder (its journals finished)."""
    if (
        folder.exists()
        and not (folder / MANIFEST).exists()
        and any(path.name != PARTIAL for path in folder.iterdir())
    ):
        raise FolderError(
            f"{folder} is not empty and holds no traceforge export ({MANIFEST}); "
            "choose a new or empty --out folder"
        )
    return read_manifest(folder)


@contextlib.contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Hold `folder` for one writer (an export, a push) while in the block: another is refused at
    once with what to do, as two would undo each other's manifest and files. The lock is on the
    folder itself (no lock file), and ends with the process that holds it, however it ends.
    Where the system has no `flock` (Windows), or the folder's filesystem takes no locks (NFS
    without a lock daemon, some FUSE mounts), nothing is held: the export goes on as before there
    was a lock."""
    if fcntl is None:
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderError(
                f"{folder} is being written by another traceforge export or push; "
                "wait for it to end and run this again"
            ) from None
        except OSError as exc:
            if exc.errno not in _NO_LOCKS_HERE:
                raise
        yield
    finally:
        os.close(descriptor)  # releases the lock


# What flock fails with on a filesystem that takes no locks.
_NO_LOCKS_HERE = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}


class ConfigWriter:
    """One config's files, written as its rows come: per split, parquet shards of `datasets` rows
    with `features` (each of at most about `max_shard_bytes` of Arrow data), or one JSON Lines
    file (`features` None: OpenAI fine-tuning files). Rows are held a batch at a time.

    The files are written under `.traceforge-partial/` in the folder; `commit` puts them in place
    of the config's old files and updates the manifest and card. Leaving the block without a
    commit (an error, an interrupt, no rows) removes them and leaves the config as it was, and
    the folder too where the block made it. The folder is
    held (`writing`) for the whole block: a second export or a push into it is refused meanwhile.
    """

    def __init__(
        self,
        folder: Path,
        config: str,
        splits: list[str],
        *,
        features: Features | None,
        max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    ) -> None:
        self.folder = folder
        self.config = config
        self.partial = folder / PARTIAL / config
        self.splits: dict[str, _ParquetSplit | _JsonLinesSplit] = {
            split: (
                _JsonLinesSplit(self.partial, split)
                if features is None
                else _ParquetSplit(self.partial, split, features, max_shard_bytes)
            )
            for split in splits
        }

    def __enter__(self) -> ConfigWriter:
        _not_a_file(self.folder)
        self._created = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            stack.enter_context(writing(self.folder))
            finish_journals(self.folder)  # before the check: a first export killed half way has no manifest
            _checked(self.folder)
            shutil.rmtree(self.partial, ignore_errors=True)  # what an interrupted export left
            self.partial.mkdir(parents=True)
            self._held = stack.pop_all()  # the folder stays held until __exit__
        return self

    def __exit__(self, *exc: object) -> None:
        with self._held:
            if (self.partial / JOURNAL).exists():
                return  # committed, but stopped while putting the files in place: the next ends it
            for split in self.splits.values():
                split.discard()
            shutil.rmtree(self.partial, ignore_errors=True)
            with contextlib.suppress(OSError):  # other configs' files, of exports killed before
                (self.folder / PARTIAL).rmdir()
                if self._created:  # a folder this export made, for nothing
                    self.folder.rmdir()

    def add(self, split: str, row: dict[str, Any], size: int) -> None:
        """Write `row` to `split`; `size`: roughly its bytes (the batches of rows converted
        together are cut by it)."""
        self.splits[split].add(row, size)

    @property
    def rows(self) -> dict[str, int]:
        """Rows written per split, splits without rows left out."""
        return {name: split.rows for name, split in self.splits.items() if split.rows}

    def commit(self, entry: dict[str, Any], license: str | None = None) -> list[str]:
        """Put the files in place of the config's old ones, record `entry` (and `license`) in the
        manifest, write the card; returns the files, relative to the folder.

        What to remove, move and record is first written whole to a journal (`COMMIT`) beside the
        new files: from then on the commit completes, here or, if the process dies half way, at the
        next export or push into the folder (`finish_journals`), so the folder never keeps a config
        without its files, or a manifest naming files it does not hold."""
        for split in self.splits.values():
            split.close()
        config_dir = self.folder / self.config
        moves = [
            (written.name, f"{self.config}/{name}")
            for split in self.splits.values()
            for written, name in split.final_names()
        ]
        placed = {dest for _, dest in moves}
        old = [*config_dir.glob("*-of-*.parquet"), *config_dir.glob("*.jsonl")]
        manifest = read_manifest(self.folder)
        entry = {**entry, "files": [dest for _, dest in moves]}
        manifest["configs"][self.config] = entry
        if license is not None:
            manifest["license"] = license
        journal = {  # an old file a new one replaces is not removed: a repeat would remove the new
            "remove": sorted({p.relative_to(self.folder).as_posix() for p in old} - placed),
            "move": moves,
            "manifest": manifest,
        }
        replace_text(self.partial / JOURNAL, json.dumps(journal))
        _finish_commit(self.folder, self.partial)
        return entry["files"]


def finish_journals(folder: Path) -> None:
    """Complete the commits an export decided on but did not finish (killed while putting its
    files in place): each config's journal under `.traceforge-partial/` is carried out again,
    every step of it safe to repeat. The caller holds the folder (`writing`)."""
    for partial in sorted((folder / PARTIAL).glob(f"*/{JOURNAL}")):
        _finish_commit(folder, partial.parent)


def _finish_commit(folder: Path, partial: Path) -> None:
    journal = json.loads((partial / JOURNAL).read_text(encoding="utf-8"))
    for name in journal["remove"]:
        (folder / name).unlink(missing_ok=True)
    for source, dest in journal["move"]:
        if (partial / source).exists():  # else moved before the process died
            (folder / dest).parent.mkdir(parents=True, exist_ok=True)
            (partial / source).replace(folder / dest)
    config_dir = folder / partial.name
    if config_dir.is_dir() and not any(config_dir.iterdir()):
        config_dir.rmdir()
    text = json.dumps(journal["manifest"], indent=2, sort_keys=True) + "\n"
    replace_text(folder / MANIFEST, text, partial)
    replace_text(folder / "README.md", render_card(folder, json.loads(text)), partial)
    shutil.rmtree(partial)
    with contextlib.suppress(OSError):  # other configs' journals (finished next), or files of killed exports
        (folder / PARTIAL).rmdir()


class _ParquetSplit:
    """A split's parquet shards, written a batch of rows at a time with `datasets`' own parquet
    writer (as `Dataset.to_parquet` writes them), a new shard begun when the next batch would take
    the current one past `max_shard_bytes`."""

    def __init__(self, partial: Path, split: str, features: Features, max_shard_bytes: int) -> None:
        self.partial = partial
        self.split = split
        self.features = features
        self.max_shard_bytes = max_shard_bytes
        # A batch is at most a quarter of a shard, so shards come out near their size.
        self.batch_bytes = max(1, min(BATCH_BYTES, max_shard_bytes // 4))
        self.batch: list[dict[str, Any]] = []
        self.batch_size = 0  # the sizes its rows were added with
        self.shards: list[Path] = []
        self.writer: ParquetWriter | None = None
        self.shard_bytes = 0
        self.rows = 0

    def add(self, row: dict[str, Any], size: int) -> None:
        self.batch.append(row)
        self.rows += 1
        self.batch_size += size
        if len(self.batch) >= BATCH_ROWS or self.batch_size >= self.batch_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self.batch:
            return
        table = Dataset.from_list(self.batch, features=self.features).data.table
        self.batch, self.batch_size = [], 0
        if self.writer is not None and self.shard_bytes + table.nbytes > self.max_shard_bytes:
            self._end_shard()
        if self.writer is None:
            self.shards.append(self.partial / f"{self.split}-{len(self.shards):05d}.parquet")
            self.writer = ParquetWriter(features=self.features, path=str(self.shards[-1]))
        self.writer.write_table(table)
        self.shard_bytes += table.nbytes

    def _end_shard(self) -> None:
        self.writer.finalize()
        self.writer, self.shard_bytes = None, 0

    def close(self) -> None:
        self._flush()
        if self.writer is not None:
            self._end_shard()

    def discard(self) -> None:
        """Let go of the open shard, unfinished, and of the rows not written."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.batch = []

    def final_names(self) -> list[tuple[Path, str]]:
        count = len(self.shards)
        return [(path, f"{self.split}-{i:05d}-of-{count:05d}.parquet") for i, path in enumerate(self.shards)]


class _JsonLinesSplit:
    """A split as one JSON Lines file, a row per line."""

    def __init__(self, partial: Path, split: str) -> None:
        self.split = split
        self.path = partial / f"{split}.jsonl"
        self.out = None
        self.rows = 0

    def add(self, row: dict[str, Any], size: int) -> None:
        if self.out is None:
            self.out = self.path.open("w", encoding="utf-8")
        self.out.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.rows += 1

    def close(self) -> None:
        if self.out is not None:
            self.out.close()

    def discard(self) -> None:
        self.close()

    def final_names(self) -> list[tuple[Path, str]]:
        return [(self.path, self.path.name)] if self.rows else []
