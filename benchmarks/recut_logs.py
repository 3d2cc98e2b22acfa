"""Gateway logs cut in the middle of conversations, as a rotation by size leaves them: the per-request
log files of a corpus (`corpus.py`), each format's files joined in order and cut again into files of
equal line counts. The conversations running at each cut then lie in two files; ingested, they are
joined again (`traceforge.ingest.log_joins`), and the store holds what the uncut files give.

With `--otlp`, the corpus's OTel exports instead, as a collector's rotating file exporter leaves
them: each trace's spans in two export batches, the second written after the next trace's first,
cut into files of equal line counts. The traces running at each cut then lie in two files, and the
later file's part holds a trace id the earlier file holds (`traceforge.ingest.joins` joins them).

    python benchmarks/recut_logs.py benchmarks/corpus/growth-1x-full benchmarks/corpus/rotated-logs
    python benchmarks/recut_logs.py --otlp benchmarks/corpus/growth-1x-full benchmarks/corpus/rotated-otlp
    python benchmarks/run.py --task ingest --corpus benchmarks/corpus/rotated-logs --db /tmp/r.duckdb
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

LOG_FORMATS = ("openai-log", "anthropic-log")


def recut(source: Path, out: Path, files_per_format: int) -> list[Path]:
    """Write each log format's records of `source` to `files_per_format` files in `out`."""
    written = []
    for fmt in LOG_FORMATS:
        lines: list[bytes] = []
        for path in sorted(source.glob(f"{fmt}-*.jsonl")):
            lines.extend(path.read_bytes().splitlines(keepends=True))
        written.extend(_cut(lines, out, fmt, files_per_format))
    return written


def _cut(lines: list[bytes], out: Path, stem: str, files: int) -> list[Path]:
    """`lines` in `files` files of equal line counts, `out/<stem>.<k>.jsonl`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for k in range(files):
        part = lines[k * len(lines) // files : (k + 1) * len(lines) // files]
        if part:
            path = out / f"{stem}.{k}.jsonl"
            path.write_bytes(b"".join(part))
            written.append(path)
    return written


def recut_otlp(source: Path, out: Path, files: int) -> list[Path]:
    """Write `source`'s OTel export batches, each trace's spans in two batches interleaved with the
    next trace's, to `files` files in `out`."""
    batches: list[bytes] = []
    held: bytes | None = None  # the previous trace's second batch
    for path in sorted(source.glob("otlp-*.jsonl")):
        for line in path.read_text().splitlines():
            first, second = _halves(json.loads(line))
            batches.append(first)
            if held is not None:
                batches.append(held)
            held = second
    if held is not None:
        batches.append(held)
    return _cut(batches, out, "otlp", files)


def _halves(request: dict[str, Any]) -> tuple[bytes, bytes]:
    """An export request's spans in two requests: the first half of its spans, then the rest."""
    spans = [
        (r, s, span)
        for r, resource in enumerate(request["resourceSpans"])
        for s, scope in enumerate(resource["scopeSpans"])
        for span in scope["spans"]
    ]
    halves = []
    for chosen in (spans[: len(spans) // 2], spans[len(spans) // 2 :]):
        half = json.loads(json.dumps(request))
        for resource in half["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                scope["spans"] = []
        for r, s, span in chosen:
            half["resourceSpans"][r]["scopeSpans"][s]["spans"].append(span)
        halves.append(json.dumps(half, separators=(",", ":")).encode() + b"\n")
    return halves[0], halves[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a corpus folder written by corpus.py (uncompressed)")
    parser.add_argument("out", type=Path, help="the folder to write the cut logs to")
    parser.add_argument("--files", type=int, default=5, help="files per log format (default 5)")
    parser.add_argument("--otlp", action="store_true", help="cut the OTel exports instead, mid-trace")
    args = parser.parse_args()
    written = (recut_otlp if args.otlp else recut)(args.source, args.out, args.files)
    print(f"wrote {len(written)} files to {args.out}")


if __name__ == "__main__":
    main()
