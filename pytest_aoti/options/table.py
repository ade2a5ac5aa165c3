"""Every option as one row: command line, ini twin, marker and ``aoti.check`` keyword.

The rows drive the ``--aoti-*`` options and their ini keys,
:class:`~pytest_aoti.options.settings.AotiSettings`, the keywords ``@pytest.mark.aoti`` and
``aoti.check`` accept and the marker's help line. Session options (devices, cache, reports)
are written here; each per-check option is a field of
:class:`~pytest_aoti.features.CheckOptions`, whose metadata makes its row, and a feature's
session options are fields of its settings class.

Pure logic without torch: parsing here is what makes a bad value a usage error at startup.
"""

from __future__ import annotations

import pytest

from pytest_aoti import features
from pytest_aoti.options.option import Option
from pytest_aoti.options.values import (
    check_mapping,
    check_switch,
    check_tolerance,
    parse_cache_mode,
    parse_cache_url,
    parse_devices,
    parse_export_modes,
    parse_json_object,
    parse_non_negative_int,
    parse_path_list,
    parse_size,
    parse_storage_options,
    parse_switch,
    parse_tolerance,
    parse_utc_time,
)

DEFAULT_CACHE_MAX_SIZE = 4 * 2**30

LAYERED = ("rtol", "atol", "strict", "inductor_configs")
"""Per-test keywords layered with the hooks, fields of
:class:`~pytest_aoti.options.defaults.CheckDefaults` rather than of ``CheckOptions``: the
tolerance (over the ``pytest_aoti_tolerance`` hook), ``strict`` (over the export-options
hook) and the inductor configs (merged with the ini file's and the hook's)."""


def rows() -> tuple[Option, ...]:
    """Every option, in the order of ``--help``: the core ones, then each feature's
    (:mod:`pytest_aoti.features`)."""
    return (*_FIRST, *features.check_rows(), *_SESSION, *features.feature_session_rows())


_FIRST = (
    Option(
        "aoti-device",
        parse_devices,
        ("auto",),
        "Device(s) AOTI tests run on: cpu, cuda, cuda:N, auto (cuda when available, else cpu) "
        "or a comma list such as cpu,cuda that runs every AOTI test on each. Default: auto.",
        field="devices",
    ),
    Option(
        "aoti-export",
        parse_export_modes,
        ("default",),
        "Export mode(s) of every AOTI test: strict, non-strict, default (torch's), or a comma "
        "list such as strict,non-strict that runs every AOTI test in each. Default: default.",
        field="export_modes",
    ),
    Option(
        "aoti-rtol",
        parse_tolerance,
        None,
        "Relative tolerance of every check. Default: by dtype, as torch.testing.assert_close.",
        check=check_tolerance,  # --aoti-rtol is below the hook; the marker's and call's final
        marker=True,
        keyword=True,
    ),
    Option(
        "aoti-atol",
        parse_tolerance,
        None,
        "Absolute tolerance of every check. Default: by dtype, as torch.testing.assert_close.",
        check=check_tolerance,
        marker=True,
        keyword=True,
    ),
    Option(
        "strict",
        None,
        None,
        "torch.export's strict mode, above the export-options hook and --aoti-export.",
        marker=True,
        keyword=True,
        check=check_switch,
    ),
    Option(
        "aoti-inductor-configs",
        parse_json_object,
        None,
        "Inductor options of every AOTI compile, as a JSON object (ini only); the hook, "
        "marker and call override them. Part of the cache key. Default: none.",
        cli=False,
        marker=True,  # merged: the ini's, the hook's, the marker's, the call's
        keyword=True,
        check=check_mapping,
    ),
)

_SESSION = (
    Option(
        "aoti-report",
        str,
        None,
        "Write a JSON report of every AOTI check (figures, cache use, timings, failures) to "
        "this file at the end of the session, merged across xdist workers. Default: none.",
        path="file",
    ),
    Option(
        "aoti-profile",
        str,
        None,
        "Directory for a Chrome trace (torch.profiler) of the engine's calls of each AOTI "
        "check. Default: none.",
        path="dir",
    ),
    Option(
        "aoti-durations",
        parse_non_negative_int,
        5,
        "Show the N slowest AOTI checks in the terminal summary; 0 for all. Default: 5.",
    ),
    Option(
        "aoti-cache",
        parse_cache_mode,
        "readwrite",
        "Compiled-package cache: off, read or readwrite. Default: readwrite.",
        field="cache_mode",
    ),
    Option(
        "aoti-cache-dir",
        str,
        None,
        "Directory of the compiled-package cache, e.g. one shared by CI machines. "
        "Default: .pytest_cache/d/aoti.",
        path="location",  # checked by opening the store at startup (AotiSession.check_cache_dir)
    ),
    Option(
        "aoti-cache-max-size",
        parse_size,
        DEFAULT_CACHE_MAX_SIZE,
        "Size above which least-recently-used packages are evicted. Default: 4GiB.",
    ),
    Option(
        "aoti-cache-clear",
        parse_switch,
        False,
        "Empty the compiled-package cache at session start.",
        ini=None,
        flag=True,
    ),
    Option(
        "aoti-cache-url",
        parse_cache_url,
        None,
        "fsspec URL of a remote cache shared by a CI fleet, behind the local cache "
        "(s3://bucket/prefix, gs://..., az://..., file:///..., read-only https://...); its "
        "entries must be signed (docs: the CI fleet store). Default: none.",
    ),
    Option(
        "aoti-cache-remote",
        parse_cache_mode,
        "readwrite",
        "What the run does with --aoti-cache-url: off, read or readwrite (publishes only "
        "with a signing key). Default: readwrite.",
    ),
    Option(
        "aoti-cache-storage-options",
        parse_storage_options,
        None,
        "Options of the remote cache's fsspec filesystem, as a JSON object (ini only), over "
        "fsspec's own config and FSSPEC_<PROTOCOL>_<OPTION> variables. No credentials here: "
        "use the store's usual credential chain. Default: none.",
        cli=False,
    ),
    Option(
        "aoti-cache-trusted-keys",
        parse_path_list,
        (),
        "PEM files of the Ed25519 public keys whose remote cache entries are loaded, one per "
        "line (ini only), besides PYTEST_AOTI_CACHE_TRUSTED_KEYS. Default: none.",
        cli=False,
    ),
    Option(
        "aoti-cache-not-before",
        parse_utc_time,
        None,
        "Remote cache entries signed before this ISO 8601 UTC time (2026-12-01T12:00:00Z) are "
        "refused and replaced (also PYTEST_AOTI_CACHE_NOT_BEFORE). Default: none.",
    ),
)


def add_options(parser: pytest.Parser) -> None:
    """Register every ``--aoti-*`` option and its ini twin in one ``aoti`` group."""
    group = parser.getgroup("aoti", "AOTInductor checks (pytest-aoti)")
    for option in rows():
        if option.parse is None:  # a marker or aoti.check keyword only
            continue
        if option.flag:
            group.addoption(
                f"--{option.name}", dest=option.dest, action="store_true", help=option.help
            )
        elif option.cli:
            group.addoption(
                f"--{option.name}",
                dest=option.dest,
                type=option.parse,
                default=None,
                action="append" if option.many else "store",
                metavar=option.dest.upper().removeprefix("AOTI_"),
                help=option.help,
            )
        if option.ini_key is not None:
            if option.many:
                parser.addini(option.ini_key, help=option.help, type="linelist", default=None)
            else:
                parser.addini(option.ini_key, help=option.help, default=None)


def marker_options() -> tuple[str, ...]:
    """The keywords of ``@pytest.mark.aoti``, in row order."""
    return tuple(option.keyword_name for option in rows() if option.marker)


def keyword_options() -> tuple[str, ...]:
    """The option keywords of ``aoti.check``, in row order."""
    return tuple(option.keyword_name for option in rows() if option.keyword)


def marker_help() -> str:
    """The ``@pytest.mark.aoti`` line of ``pytest --markers``."""
    keywords = ", ".join(f"{name}=None" for name in marker_options())
    return (
        f"aoti({keywords}): an AOTInductor test, run on every --aoti-device; the options "
        "are defaults for the aoti fixture's checks"
    )
