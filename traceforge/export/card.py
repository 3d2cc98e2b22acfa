"""The dataset card (README.md) of an export folder, rendered from its manifest and its files.

The YAML header is what the Hub and `datasets.load_dataset` read: `configs` (which files make each
config's splits; the first written in the order sft, parallel, preference, rl is the default) and
`dataset_info` (features and split sizes, read back from the parquet files), plus the license the
user set. The body says how the data was produced and from what, with the counts of what was
selected, dropped, left out and redacted, and the turns the parallel rewrite saves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from datasets import Features
from datasets.info import DatasetInfo, DatasetInfosDict
from datasets.splits import SplitDict, SplitInfo
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCardData

MANIFEST = "traceforge-export.json"
KIND_ORDER = ("sft", "parallel", "preference", "rl")
TRAINERS = {
    "sft": "SFTTrainer (conversational language modeling, with a `tools` column)",
    "parallel": "SFTTrainer: the same conversations with independent tool calls issued together",
    "preference": "DPOTrainer (explicit-prompt preference: parallel turn chosen, sequential rejected)",
    "rl": "GRPOTrainer (prompt-only, with the recorded outcome for a reward function)",
}
DROP_REASONS = {
    "no_assistant_message": "no assistant message",
    "arguments_not_an_object": "tool arguments that are not a JSON object",
    "unanswered_tool_call": "a tool call without a result",
    "result_without_call": "a tool result without its call",
    "resumed_elsewhere": "copied whole into a resumed session, exported there",
    "over_max_messages": "more messages than --max-messages",
    "over_max_chars": "more characters than --max-chars",
    "over_max_tokens": "more tokens than --max-tokens",
    "exact_duplicate": "exact duplicate",
    "near_duplicate": "near duplicate",
}
LEFT_OUT_REASONS = {
    "nothing_to_gain": "nothing to gain (no independent calls in separate turns)",
    "not_analysed": "no dependency analysis for the trace (run `traceforge analyze`)",
    "inconsistent_deps": "dependencies that contradict the recording",
    "failed_check": "rewrite failed its check (a bug: please report it)",
    "no_user_prompt": "no user message to answer",
}


def ordered_configs(manifest: dict[str, Any]) -> list[str]:
    configs = manifest["configs"]
    return sorted(configs, key=lambda c: (KIND_ORDER.index(configs[c]["kind"]), configs[c]["format"], c))


def _parquet_info(folder: Path, config: str, files: list[str]) -> DatasetInfo:
    splits = SplitDict()
    features = None
    download_size = 0
    by_split: dict[str, list[Path]] = {}
    for name in files:
        by_split.setdefault(Path(name).name.split("-")[0], []).append(folder / name)
    for split, paths in by_split.items():
        rows = size = 0
        for path in paths:
            metadata = pq.ParquetFile(path).metadata
            rows += metadata.num_rows
            size += sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
            download_size += path.stat().st_size
            features = features or Features.from_arrow_schema(pq.read_schema(path))
        splits.add(SplitInfo(name=split, num_bytes=size, num_examples=rows))
    return DatasetInfo(
        config_name=config,
        features=features,
        splits=splits,
        download_size=download_size,
        dataset_size=sum(s.num_bytes for s in splits.values()),
    )


def card_data(folder: Path, manifest: dict[str, Any]) -> DatasetCardData:
    configs = [c for c in ordered_configs(manifest) if manifest["configs"][c]["files"]]
    data = DatasetCardData(
        license=manifest.get("license") or "other",
        pretty_name=manifest.get("pretty_name") or f"traceforge export ({', '.join(configs) or 'empty'})",
        tags=["agent", "tool-use", "function-calling", "traceforge", "trl"],
        task_categories=["text-generation"],
    )
    infos = {}
    metadata_configs = {}
    for index, config in enumerate(configs):
        entry = manifest["configs"][config]
        splits: dict[str, list[str]] = {}
        for name in entry["files"]:
            splits.setdefault(Path(name).name.split("-")[0].removesuffix(".jsonl"), []).append(name)
        data_files = []
        for split, names in splits.items():
            pattern = f"{config}/{split}-*" if entry["format"] == "hf" else names[0]
            data_files.append({"split": split, "path": pattern})
        metadata_configs[config] = {"data_files": data_files, **({"default": True} if index == 0 else {})}
        if entry["format"] == "hf":
            infos[config] = _parquet_info(folder, config, entry["files"])
    if infos:
        DatasetInfosDict(infos).to_dataset_card_data(data)
    if metadata_configs:
        MetadataConfigs(metadata_configs).to_dataset_card_data(data)
    return data


def _counts(counts: dict[str, int], names: dict[str, str]) -> list[str]:
    return [
        f"  - {names.get(k, k)}: {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if v
    ]


def _largest_first(splits: dict[str, float]) -> list[tuple[str, float]]:
    """The splits, largest first: the manifest's keys are sorted, which would put test before train."""
    return sorted(splits.items(), key=lambda kv: (-kv[1], kv[0]))


def _purpose(entry: dict[str, Any]) -> str:
    if entry["format"] == "openai":
        return "OpenAI fine-tuning (" + ("DPO" if entry["kind"] == "preference" else "supervised") + ")"
    return "TRL's " + TRAINERS[entry["kind"]]


def _selection(criteria: dict[str, Any]) -> str:
    chosen = [
        f"{key}={', '.join(map(str, value)) if isinstance(value, list) else value}"
        for key, value in criteria.items()
        if value not in (None, [], 0, False) and key not in ("splits", "seed")
    ]
    return "; ".join(chosen) or "all traces"


def _config_section(config: str, entry: dict[str, Any]) -> list[str]:
    selection = entry["selection"]
    rows = entry["rows"]
    source = entry["source"]
    formats = ", ".join(f"{name}: {n}" for name, n in sorted(source["formats"].items())) or "none"
    lines = [
        f"### `{config}`",
        "",
        f"- Kind: {entry['kind']} ({'OpenAI JSONL' if entry['format'] == 'openai' else 'parquet'}), "
        f"for {_purpose(entry)}.",
        f"- Made {entry['created_at']} by traceforge {entry['traceforge_version']}: `{entry['command']}`",
        f"- From the traceforge store `{source['store']}`: the {source['traces']} traces the rows were made "
        f"from came from {source['files']} source files (by source format: {formats}).",
        f"- Selection: {_selection(entry['criteria'])}. Splits (seed {entry['criteria']['seed']}): "
        + ", ".join(f"{name} {fraction:g}" for name, fraction in _largest_first(entry["criteria"]["splits"]))
        + ".",
        f"- Traces matching the selection: {selection['matched']}; "
        f"usable after the checks below: {selection['selected']}"
        + (
            f" ({selection['later_contexts']} of them later contexts of compacted sessions: a session "
            "whose context the agent compacted gives a row per context, with the same `trace_id`)."
            if selection.get("later_contexts")
            else "."
        ),
    ]
    if selection["dropped"]:
        lines.append("- Dropped whole (never truncated):")
        lines.extend(_counts(selection["dropped"], DROP_REASONS))
    if entry["left_out"]:
        lines.append(f"- Left out of this export ({sum(entry['left_out'].values())} traces):")
        lines.extend(_counts(entry["left_out"], LEFT_OUT_REASONS))
    if entry.get("user_tool_calls_removed"):
        lines.append(
            f"- Tool calls made by the user (a simulated user's own actions, which the agent never saw) "
            f"removed with their results: {entry['user_tool_calls_removed']}."
        )
    if entry.get("unanswered_user_messages_trimmed"):
        lines.append(
            "- User messages after a conversation's last assistant turn, which nothing answered, trimmed: "
            f"{entry['unanswered_user_messages_trimmed']}."
        )
    if entry.get("inferred_tool_schemas"):
        lines.append(
            f"- Traces calling a tool with no recorded definition: {entry['inferred_tool_schemas']}; "
            "their `tools` hold a minimal schema inferred from the calls."
        )
    lines.append("- Rows: " + (", ".join(f"{split} {n}" for split, n in rows.items()) or "none"))
    turns = entry.get("turns")
    if turns:
        lines.append(
            f"- Assistant turns with tool calls: {turns['original']} recorded, {turns['parallel']} after the "
            f"parallel rewrite: {turns['saved']} LLM round trips saved "
            f"({turns['saved'] / turns['original']:.0%}); {turns['thoughts_dropped']} interleaved "
            "assistant texts dropped because they had read results now issued later."
        )
    redaction = entry["redaction"]
    if redaction["enabled"]:
        total = sum(redaction["counts"].values())
        lines.append(f"- Redaction: on; {total} values replaced in {redaction['traces']} traces:")
        lines.extend(_counts(redaction["counts"], {}))
    else:
        lines.append(
            "- Redaction: **off** (`--no-redact` was given): secrets and personal data were not removed."
        )
    return [*lines, ""]


def render_card(folder: Path, manifest: dict[str, Any]) -> str:
    """The README.md text for an export folder."""
    data = card_data(folder, manifest)
    configs = ordered_configs(manifest)
    lines = [
        "---",
        data.to_yaml(),
        "---",
        "",
        f"# {data.pretty_name}",
        "",
        "Post-training data for tool-calling agents, exported by traceforge from recorded production "
        "agent traces.",
        "",
        "## Configs",
        "",
        "| config | kind | format | rows | for |",
        "| --- | --- | --- | --- | --- |",
    ]
    for config in configs:
        entry = manifest["configs"][config]
        rows = ", ".join(f"{s}: {n}" for s, n in entry["rows"].items()) or "none"
        lines.append(f"| `{config}` | {entry['kind']} | {entry['format']} | {rows} | {_purpose(entry)} |")
    lines += [
        "",
        "## How it was produced",
        "",
        "- One row per trace (preference: per rewritten segment). A trace is in one split only, chosen "
        "by a hash of its id and the seed, so every export made with one seed splits alike.",
        "- Duplicates: exact (hash of the normalised text of tools and messages) and near (MinHash over "
        "5-word shingles of the conversation, Jaccard similarity at least `near_dup_threshold`) are "
        "removed, the earliest trace kept. Conversations over a length limit are dropped, never cut.",
        "- Tool calls keep their recorded ids; arguments are JSON objects (the `Json` feature type), and "
        "the results of a turn follow it in call order.",
        "- Parallel rewrite: between two user messages, the tool calls are laid out by the generations "
        "of their dependency DAG (the `tool_deps` table of the traceforge store); recorded results and "
        "final answers are reused unchanged, and every rewrite is checked before it is written.",
        "",
    ]
    for config in configs:
        lines += _config_section(config, manifest["configs"][config])
    lines += [
        "## Loading",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
    ]
    for config in configs:
        if manifest["configs"][config]["format"] == "hf":
            lines.append(
                f'{config.replace("-", "_")} = load_dataset("PATH_OR_REPO_ID", "{config}", split="train")'
            )
    lines += [
        "```",
        "",
        "## License",
        "",
        f"`{data.license}`"
        + (
            ""
            if manifest.get("license")
            else " (no license was set: pass `--license` to `traceforge export`)"
        )
        + ". The traces it was made from belong to whoever recorded them.",
        "",
    ]
    return "\n".join(lines)
