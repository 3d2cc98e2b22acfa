"""Gateway logs cut in the middle of conversations, as a rotation by size leaves them: the per-request
log files of a corpus (`corpus.py`), each format's files joined in order and cut again into files of
equal line counts. The conversations running at each cut then lie in two files; ingested, they are
joined again (`traceforge.ingest.log_joins`), and the store holds what the uncut files give.

    python benchmarks/recut_logs.py benchmarks/corpus/growth-1x-full benchmarks/corpus/rotated-logs
    python benchmarks/run.py --task ingest --corpus benchmarks/corpus/rotated-logs --db /tmp/r.duckdb
"""

from __future__ import annotations

import argparse
from pathlib import Path

LOG_FORMATS = ("openai-log", "anthropic-log")


def recut(source: Path, out: Path, files_per_format: int) -> list[Path]:
    """Write each log format's records of `source` to `files_per_format` files in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in LOG_FORMATS:
        lines: list[bytes] = []
        for path in sorted(source.glob(f"{fmt}-*.jsonl")):
            lines.extend(path.read_bytes().splitlines(keepends=True))
        for k in range(files_per_format):
            part = lines[k * len(lines) // files_per_format : (k + 1) * len(lines) // files_per_format]
            if part:
                path = out / f"{fmt}.{k}.jsonl"
                path.write_bytes(b"".join(part))
                written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a corpus folder written by corpus.py (uncompressed)")
    parser.add_argument("out", type=Path, help="the folder to write the cut logs to")
    parser.add_argument("--files", type=int, default=5, help="files per log format (default 5)")
    args = parser.parse_args()
    written = recut(args.source, args.out, args.files)
    print(f"wrote {len(written)} files to {args.out}")


if __name__ == "__main__":
    main()
