"""Commands of pytest-aoti outside a pytest run, added by its plugins (the
pytest_aoti_commands hook); the fleet plugin's:

python -m pytest_aoti merge-reports shard-*.json -o all.json [--durations N]
python -m pytest_aoti keygen PRIVATE.pem PUBLIC.pem
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_aoti.plugins import default_manager


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_aoti",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    default_manager().hook.pytest_aoti_commands(commands=commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (2 for bad input, with a one-line error)."""
    args = _parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
