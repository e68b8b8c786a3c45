"""python -m loadtest {bench,run,simulate,peers}: measure radixgate."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def _bench(args: argparse.Namespace) -> None:
    from loadtest.bench import bench_index, bench_overhead, format_report

    index = bench_index()
    with tempfile.TemporaryDirectory() as tmp:
        overhead = bench_overhead(Path(tmp), n=args.requests)
    print(format_report(overhead, index))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"overhead": overhead, "index": index}, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="gateway overhead and prefix-index cost")
    bench.add_argument("--requests", type=int, default=300)
    bench.add_argument("--json", default="results/bench.json")
    bench.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    sys.exit(main())
