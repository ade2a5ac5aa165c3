"""The core's options as rows: devices, export modes, tolerances, inductor configs, reports
and caches (the core checks' own are :class:`~pytest_aoti.options.check_options.CoreOptions`).
Pure data without torch."""

from __future__ import annotations

from pytest_aoti.options.option import Option
from pytest_aoti.options.parsers import (
    check_mapping,
    check_switch,
    check_tolerance,
    parse_cache_mode,
    parse_devices,
    parse_export_modes,
    parse_json_object,
    parse_non_negative_int,
    parse_size,
    parse_switch,
    parse_tolerance,
)

DEFAULT_CACHE_MAX_SIZE = 4 * 2**30

FIRST = (
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

SESSION = (
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
)
