"""Commands of pytest-aoti outside a pytest run.

python -m pytest_aoti merge-reports shard-*.json -o all.json [--durations N]
python -m pytest_aoti keygen PRIVATE.pem PUBLIC.pem
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_aoti", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser(
        "merge-reports", help="Merge CI shards' --aoti-report files into one report."
    )
    merge.add_argument("reports", nargs="+", type=Path, help="The shards' JSON reports.")
    merge.add_argument("-o", "--output", type=Path, help="Where to write the merged report.")
    merge.add_argument(
        "--durations", type=int, default=5, help="Slowest checks to list; 0 for all. Default: 5."
    )
    keygen = commands.add_parser(
        "keygen", help="Make an Ed25519 key pair for signing remote cache entries."
    )
    keygen.add_argument("private", type=Path, help="The private key's PEM file (kept secret).")
    keygen.add_argument("public", type=Path, help="The public key's PEM file (commit it).")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (2 for bad input, with a one-line error)."""
    args = _parser().parse_args(argv)
    if args.command == "merge-reports":
        from pytest_aoti.reports.merge import (
            ReportMergeError,
            merge_reports,
            summary_lines,
            write_report,
        )

        try:
            document = merge_reports(args.reports)
        except ReportMergeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        if args.output is not None:
            write_report(document, args.output)
        for line in summary_lines(document, args.durations):
            print(line)
        if args.output is not None:
            print(f"aoti: merged report written to {args.output}")
        return 0
    from pytest_aoti.cache.remote.signing import generate_key_pair
    from pytest_aoti.errors import AotiUsageError

    try:
        key = generate_key_pair(args.private, args.public)
    except (AotiUsageError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"key {key}: private {args.private} (keep it secret), public {args.public}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
