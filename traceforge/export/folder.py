"""The export folder: one sub-folder per config, parquet shards per split, a manifest and a card.

    data/
      README.md                      dataset card: YAML `configs` + `dataset_info`, how it was made
      traceforge-export.json         the manifest: per config, what was selected, dropped, redacted
      sft/train-00000-of-00001.parquet
      sft/test-00000-of-00001.parquet
      parallel/train-00000-of-00001.parquet
      sft-openai/train.jsonl         (--format openai: OpenAI fine-tuning files)

Several exports can share a folder (each is a config, as on the Hub), so `traceforge push` can
publish them as one dataset. Writing a config replaces that config's files and nothing else;
`datasets.load_dataset(folder, config)` reads it back through the card's `configs`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from datasets import Dataset, Features

from traceforge.export.card import MANIFEST, render_card

DEFAULT_MAX_SHARD_BYTES = 500 * 1024 * 1024  # as datasets' push_to_hub


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
    """Check that `folder` is new, empty or an export folder, and return its manifest."""
    if folder.exists() and not folder.is_dir():
        raise FolderError(f"{folder} is a file; --out must be a folder")
    if folder.exists() and any(folder.iterdir()) and not (folder / MANIFEST).exists():
        raise FolderError(
            f"{folder} is not empty and holds no traceforge export ({MANIFEST}); "
            "choose a new or empty --out folder"
        )
    return read_manifest(folder)


def shard_paths(config_dir: Path, split: str, shards: int) -> list[Path]:
    return [config_dir / f"{split}-{i:05d}-of-{shards:05d}.parquet" for i in range(shards)]


def write_config(
    folder: Path,
    config: str,
    rows: dict[str, list[dict[str, Any]]],
    *,
    features: Features | None,
    entry: dict[str, Any],
    license: str | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> list[str]:
    """Write one config's splits and update the manifest and card; returns the files written.

    `features` given: parquet shards of `datasets.Dataset`s with those features (shards of at most
    about `max_shard_bytes` of Arrow data each). `features` None: one JSON Lines file per split
    (OpenAI fine-tuning files). Splits without rows are not written.
    """
    manifest = prepare(folder)
    config_dir = folder / config
    config_dir.mkdir(parents=True, exist_ok=True)
    for old in [*config_dir.glob("*-of-*.parquet"), *config_dir.glob("*.jsonl")]:
        old.unlink()
    files = []
    for split, split_rows in rows.items():
        if not split_rows:
            continue
        if features is None:
            path = config_dir / f"{split}.jsonl"
            with path.open("w", encoding="utf-8") as out:
                for item in split_rows:
                    out.write(json.dumps(item, ensure_ascii=False) + "\n")
            files.append(path)
            continue
        dataset = Dataset.from_list(split_rows, features=features)
        shards = max(1, math.ceil(dataset.data.nbytes / max_shard_bytes))
        for index, path in enumerate(shard_paths(config_dir, split, shards)):
            dataset.shard(shards, index, contiguous=True).to_parquet(str(path))
            files.append(path)
    if not any(config_dir.iterdir()):
        config_dir.rmdir()
    entry = {**entry, "files": [p.relative_to(folder).as_posix() for p in files]}
    manifest["configs"][config] = entry
    if license is not None:
        manifest["license"] = license
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(render_card(folder, manifest), encoding="utf-8")
    return entry["files"]
