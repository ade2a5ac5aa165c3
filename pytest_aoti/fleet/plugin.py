"""The CI fleet's hooks: the remote store behind the local cache, its header and summary
lines and report totals, and the ``merge-reports`` and ``keygen`` commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.api import AotiUsageError, Feature, session_of
from pytest_aoti.fleet.feature import FLEET, FleetSettings
from pytest_aoti.fleet.lines import remote_header_line, remote_summary_lines, remote_totals
from pytest_aoti.fleet.merge import ReportMergeError, merge_reports, summary_lines, write_report
from pytest_aoti.fleet.open import open_remote
from pytest_aoti.fleet.signing import generate_key_pair
from pytest_aoti.fleet.store import RemoteStore

_OPENED = pytest.StashKey["RemoteStore | None"]()
"""The store this process opened, for its figures."""


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return FLEET


def pytest_addoption(parser: pytest.Parser) -> None:
    FLEET.add_options(parser)


def _settings(config: pytest.Config) -> FleetSettings:
    return session_of(config).settings.of(FleetSettings)


def pytest_aoti_remote_store(
    config: pytest.Config, on_problem: Callable[[str], None]
) -> RemoteStore | None:
    settings = _settings(config)
    store = None
    if settings.cache_url and settings.cache_remote != "off":
        store = open_remote(
            settings.cache_url,
            mode=settings.cache_remote,
            ini_options=settings.cache_storage_options,
            ini_trusted=[str(config.rootpath / path) for path in settings.cache_trusted_keys],
            on_problem=on_problem,
            not_before=settings.cache_not_before,
        )
    config.stash[_OPENED] = store
    return store


def pytest_aoti_header_lines(config: pytest.Config) -> list[str]:
    s = _settings(config)
    line = remote_header_line(s.cache_url, s.cache_remote, s.cache_trusted_keys, s.cache_not_before)
    return [line] if line else []


def pytest_aoti_figures(config: pytest.Config) -> Mapping[str, Any] | None:
    store = config.stash.get(_OPENED, None)
    return None if store is None else {"remote": store.stats.to_json()}


def pytest_aoti_totals(
    config: pytest.Config, figures: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any]:
    return remote_totals(_settings(config).cache_url, _with_remote(figures))


def pytest_aoti_summary_lines(
    config: pytest.Config, figures: Sequence[Mapping[str, Any]]
) -> list[str]:
    s = _settings(config)
    return remote_summary_lines(
        s.cache_url,
        _with_remote(figures),
        mode=s.cache_remote,
        ini_trusted=s.cache_trusted_keys,
        not_before=s.cache_not_before,
    )


def _with_remote(figures: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [item for item in figures if isinstance(item.get("remote"), Mapping)]


@pytest.hookimpl  # read outside a run, by a plain plugin manager
def pytest_aoti_commands(commands: argparse._SubParsersAction[Any]) -> None:
    merge = commands.add_parser(
        "merge-reports", help="Merge CI shards' --aoti-report files into one report."
    )
    merge.add_argument("reports", nargs="+", type=Path, help="The shards' JSON reports.")
    merge.add_argument("-o", "--output", type=Path, help="Where to write the merged report.")
    merge.add_argument(
        "--durations", type=int, default=5, help="Slowest checks to list; 0 for all. Default: 5."
    )
    merge.set_defaults(run=_merge_reports)
    keygen = commands.add_parser(
        "keygen", help="Make an Ed25519 key pair for signing remote cache entries."
    )
    keygen.add_argument("private", type=Path, help="The private key's PEM file (kept secret).")
    keygen.add_argument("public", type=Path, help="The public key's PEM file (commit it).")
    keygen.set_defaults(run=_keygen)


def _merge_reports(args: argparse.Namespace) -> int:
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


def _keygen(args: argparse.Namespace) -> int:
    try:
        key = generate_key_pair(args.private, args.public)
    except (AotiUsageError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"key {key}: private {args.private} (keep it secret), public {args.public}")
    return 0
