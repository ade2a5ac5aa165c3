"""Every option as one row: command line, ini twin, marker and ``aoti.check`` keyword.

:data:`OPTIONS` drives the ``--aoti-*`` options and their ini keys, :class:`AotiSettings`,
the defaults of every check (:class:`~pytest_aoti.tester.CheckDefaults`), the keywords
``@pytest.mark.aoti`` accepts and its help line, the keywords ``aoti.check`` accepts, and
the plan a check reads its options from (``plan.threads``). A new per-check option is its
row here plus the check that reads it.

Pure logic without torch: parsing here is what makes a bad value a usage error at startup.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.option_values import (
    CACHE_MODES,
    EXPORT_MODES,
    HF_PREFIX,
    PROBE_KINDS,
    PROBE_LAYOUT_KINDS,
    PROBE_POLICIES,
    RANDOM_MODES,
    bytes_problem,
    count_problem,
    non_negative_problem,
    parse_cache_mode,
    parse_cache_url,
    parse_devices,
    parse_export_modes,
    parse_hazard_view,
    parse_json_object,
    parse_model_spec,
    parse_non_negative_int,
    parse_path_list,
    parse_positive_int,
    parse_probe_policy,
    parse_random_mode,
    parse_size,
    parse_storage_options,
    parse_switch,
    parse_tolerance,
    parse_utc_time,
    probe_policy_problem,
    probes_skip_problem,
    random_problem,
    switch_problem,
    writable_dir_problem,
)

__all__ = [
    "AotiSettings",
    "CACHE_MODES",
    "DEFAULT_CACHE_MAX_SIZE",
    "DEFAULT_EXAMPLES",
    "DEFAULT_MAX_DIM",
    "EXPORT_MODES",
    "HF_PREFIX",
    "OPTIONS",
    "Option",
    "PROBE_KINDS",
    "PROBE_LAYOUT_KINDS",
    "PROBE_POLICIES",
    "RANDOM_MODES",
    "add_options",
    "check_option",
    "check_option_names",
    "keyword_options",
    "marker_help",
    "marker_options",
    "option_problem",
    "parse_cache_mode",
    "parse_cache_url",
    "parse_devices",
    "parse_export_modes",
    "parse_json_object",
    "parse_model_spec",
    "parse_path_list",
    "parse_probe_policy",
    "parse_random_mode",
    "parse_size",
    "parse_switch",
    "probes_skip_problem",
    "read_settings",
]
"""The option table and settings, and (re-exported from :mod:`pytest_aoti.option_values`)
the value parsers and vocabularies callers have always imported from here."""


DEFAULT_EXAMPLES = 20
DEFAULT_MAX_DIM = 64
DEFAULT_CACHE_MAX_SIZE = 4 * 2**30


@dataclass(frozen=True)
class Option:
    """One option: where it can be set, how it is parsed and checked, its default.

    - ``parse`` set: a command-line option ``--<name>`` (unless ``cli`` is False) and an ini
      key; a session setting (an :class:`AotiSettings` field) unless ``check`` names the
      :class:`~pytest_aoti.tester.CheckDefaults` value it initializes;
    - ``marker``: also a keyword of ``@pytest.mark.aoti`` (listed in its help line);
    - ``keyword``: also a keyword of ``aoti.check``;
    - ``many``: repeatable (``--aoti-model=A --aoti-model=B``, a tuple), its ini key a line
      list; ``ini``: another ini key, or None for a command-line-only option; ``flag``: a
      switch without a value (``parse`` unused).

    The marker and ``aoti.check`` keyword, and the name a check reads (``plan.max_dim``),
    is :attr:`keyword_name`: the name without ``aoti-``, with underscores. A per-check
    value is layered: the row's default, the command line or ini file, the marker, the
    call's keyword.
    """

    name: str
    parse: Callable[[str], Any] | None
    """Command-line and ini text to value; None for an option that is neither."""
    default: Any
    help: str
    field: str = ""
    """The :class:`AotiSettings` field; by default the name without ``aoti-``."""
    check: str = ""
    """The ``CheckDefaults`` field this setting initializes, if any."""
    path: str = ""
    """``dir`` or ``file``: a path made absolute against the rootdir and checked writable
    at startup; ``location``: made absolute only (its user copes with it being unusable)."""
    cli: bool = True
    """False for ini-only options (values that are awkward on a command line)."""
    marker: bool = False
    """Also a keyword of ``@pytest.mark.aoti``."""
    keyword: bool = False
    """Also a keyword of ``aoti.check``."""
    problem: Callable[[str, Any], str] | None = None
    """What is wrong with a marker or keyword value (``""``: nothing), given the name."""
    many: bool = False
    """Repeatable on the command line; one value per line of its ini key (a tuple)."""
    ini: str | None = ""
    """The ini key; by default the ``dest``; None for a command-line-only flag."""
    flag: bool = False
    """A switch without a value (``store_true``); ``parse`` reads its ini twin, if any."""

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def attribute(self) -> str:
        return self.field or self.dest.removeprefix("aoti_")

    @property
    def keyword_name(self) -> str:
        """The marker's and ``aoti.check``'s keyword, and the plan's attribute."""
        return self.name.removeprefix("aoti-").replace("-", "_")

    @property
    def per_check(self) -> bool:
        """A value of every check (the plan's) rather than of the session."""
        return bool(self.check) or self.marker or self.keyword

    @property
    def ini_key(self) -> str | None:
        """The ini key, None for a command-line-only option."""
        return self.dest if self.ini == "" else self.ini


OPTIONS = (
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
        check="base_rtol",  # below the tolerance hook; the marker's and the call's are final
        marker=True,
        keyword=True,
    ),
    Option(
        "aoti-atol",
        parse_tolerance,
        None,
        "Absolute tolerance of every check. Default: by dtype, as torch.testing.assert_close.",
        check="base_atol",
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
        problem=switch_problem,
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
    ),
    Option(
        "aoti-examples",
        parse_non_negative_int,
        DEFAULT_EXAMPLES,
        f"Generated input shapes per dynamic-shape check; 0 turns generation off. Default: {DEFAULT_EXAMPLES}.",
        check="examples",
        marker=True,
        keyword=True,
        problem=non_negative_problem,
    ),
    Option(
        "aoti-max-dim",
        parse_positive_int,
        DEFAULT_MAX_DIM,
        f"Largest size drawn for a generated dim, and the cap of unbounded ranges. Default: {DEFAULT_MAX_DIM}.",
        check="max_dim",
        marker=True,
        problem=count_problem,
    ),
    Option(
        "aoti-localize",
        parse_switch,
        True,
        "When the AOTI compile broke a check, compile one instrumented program to name the "
        "first diverging graph node and its source line: on or off. Default: on.",
        check="localize",
        marker=True,
        problem=switch_problem,
    ),
    Option(
        "aoti-random",
        parse_random_mode,
        "fail",
        "A program that draws random numbers (dropout in training mode, rand, bernoulli, "
        "...): fail its check, or compare shapes (output shapes and dtypes, and the values "
        "of outputs no random op feeds). Default: fail.",
        check="random",
        marker=True,
        keyword=True,
        problem=random_problem,
    ),
    Option(
        "aoti-probes",
        parse_probe_policy,
        "report",
        "After a passing check, call the raw engine with variants of the example (other "
        "layouts, sizes, dtypes, scalar values, aliased inputs) and compare with eager: off, "
        "report (list hazards in the summary) or fail (a silently wrong variant fails the "
        "check). Default: report.",
        check="probes",
        marker=True,
        keyword=True,
        problem=probe_policy_problem,
    ),
    Option(
        "aoti-serving-checks",
        parse_switch,
        False,
        "The serving process sets AOTI_RUNTIME_CHECK_INPUTS=1: probe variants the engine then "
        "refuses are neither hazards nor failures. Default: off.",
        check="serving_checks",
        flag=True,
    ),
    Option(
        "aoti-hazards",
        parse_hazard_view,
        "summary",
        "Deployment hazards in the summary: summary (grouped by remedy, a warm run's unchanged "
        "ones in one line) or all (every variant; also with -v). Default: summary.",
    ),
    Option(
        "probes_skip",
        None,
        None,
        "Probe variants a model does not support: a set of variant kinds for every input "
        '({"channels_last"}) or per input ({"x": {"size"}}); "*" for all kinds.',
        marker=True,
        keyword=True,
        problem=probes_skip_problem,
    ),
    Option(
        "threads",
        None,
        1,
        "Threads one engine serves at once in the thread-safety check (1: no such check).",
        keyword=True,
        problem=count_problem,
    ),
    Option(
        "max_extra_bytes",
        None,
        None,
        "Device memory one engine call of the example may allocate beyond what was "
        "allocated before it (CUDA only; None: not checked).",
        keyword=True,
        problem=bytes_problem,
    ),
    Option(
        "aoti-keep-failed",
        str,
        None,
        "Directory where each failing check leaves a repro bundle (exported program, inputs, "
        "package, finding, and a repro.py that needs only torch). Default: none.",
        path="dir",
    ),
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
        "aoti-model",
        parse_model_spec,
        (),
        "Collect an AOTI test of this model spec, no test file needed: module.path:callable, "
        "path/to/file.py:callable (returning the module and its inputs; a list or dict of "
        "such callables), or hf:MODEL_TYPE[?field=value&...]. Repeatable; ini aoti_models, "
        "one per line. Default: none.",
        field="models",
        many=True,
        ini="aoti_models",
    ),
    Option(
        "aoti-models-list",
        parse_switch,
        False,
        "Print the --aoti-model specs that would be collected, with their inputs' shapes, "
        "and exit.",
        ini=None,
        flag=True,
    ),
    Option(
        "aoti-cache-url",
        parse_cache_url,
        None,
        "fsspec URL of a remote cache shared by a CI fleet, behind the local cache "
        "(s3://bucket/prefix, gs://..., az://..., file:///..., read-only https://...); its "
        "entries must be signed (README: CI fleet). Default: none.",
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
    for option in OPTIONS:
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
    return tuple(option.keyword_name for option in OPTIONS if option.marker)


def keyword_options() -> tuple[str, ...]:
    """The per-check option keywords of ``aoti.check``, in row order."""
    return tuple(option.keyword_name for option in OPTIONS if option.keyword)


def check_option(name: str) -> Option | None:
    """The per-check row whose keyword is ``name``, if any."""
    for option in OPTIONS:
        if option.per_check and option.keyword_name == name:
            return option
    return None


def check_option_names() -> tuple[str, ...]:
    """Every per-check option's keyword name, in row order."""
    return tuple(option.keyword_name for option in OPTIONS if option.per_check)


def option_problem(name: str, value: Any) -> str:
    """What is wrong with a marker or ``aoti.check`` value of option ``name`` (``""``:
    nothing, or the row checks nothing)."""
    option = check_option(name)
    if option is None or option.problem is None or value is None:
        return ""
    return option.problem(name, value)


def marker_help() -> str:
    """The ``@pytest.mark.aoti`` line of ``pytest --markers``."""
    keywords = ", ".join(f"{name}=None" for name in marker_options())
    return (
        f"aoti({keywords}): an AOTInductor test, run on every --aoti-device; the options "
        "are defaults for the aoti fixture's checks"
    )


@dataclass(frozen=True)
class AotiSettings:
    """Validated values of every option: command line first, then ini file, then default.

    Session settings are fields; the command-line and ini values of per-check options
    (``--aoti-examples``, ...) are :attr:`check_options`, also readable as attributes
    (``settings.examples``)."""

    devices: tuple[str, ...] = ("auto",)
    export_modes: tuple[str, ...] = ("default",)
    inductor_configs: dict[str, Any] | None = None
    keep_failed: Path | None = None
    report: Path | None = None
    profile: Path | None = None
    durations: int = 5
    cache_mode: str = "readwrite"
    cache_dir: Path | None = None
    cache_max_size: int = DEFAULT_CACHE_MAX_SIZE
    cache_clear: bool = False
    models: tuple[str, ...] = ()
    models_list: bool = False
    cache_url: str | None = None
    cache_remote: str = "readwrite"
    cache_storage_options: dict[str, Any] | None = None
    cache_trusted_keys: tuple[str, ...] = ()
    cache_not_before: float | None = None
    hazards: str = "summary"
    check_options: dict[str, Any] = dataclass_field(default_factory=dict)
    """Command-line and ini values of per-check options, by keyword name; a row not read
    (a settings object made in code) has its default."""

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not fields
        option = check_option(name)
        if option is None or not option.check:
            raise AttributeError(f"{type(self).__name__} has no setting {name!r}")
        return self.__dict__.get("check_options", {}).get(name, option.default)

    def check_defaults(self) -> dict[str, Any]:
        """The values of options that are defaults of every check, by ``CheckDefaults``
        name (only those set)."""
        values = {
            option.check: getattr(self, option.keyword_name) for option in OPTIONS if option.check
        }
        return {name: value for name, value in values.items() if value is not None}


def read_settings(config: pytest.Config) -> AotiSettings:
    """Read the options; a bad ini value raises ``pytest.UsageError`` naming the ini key."""
    values: dict[str, Any] = {}
    check_options: dict[str, Any] = {}
    for option in OPTIONS:
        if option.parse is None:
            continue
        value = _value(config, option)
        if option.path and value is not None:
            value = _path(config, value)
            if option.path in ("dir", "file") and not hasattr(config, "workerinput"):
                # the xdist controller checked it already
                directory = value if option.path == "dir" else value.parent
                problem = writable_dir_problem(directory, f"--{option.name}={value}")
                if problem:
                    raise pytest.UsageError(problem)
            if option.path == "file" and value.is_dir():
                raise pytest.UsageError(f"--{option.name}={value} is a directory; name a file")
        if option.check:
            check_options[option.keyword_name] = value
        else:
            values[option.attribute] = value
    if values.get("cache_clear") and values.get("cache_mode") != "readwrite":
        raise pytest.UsageError(
            f"--aoti-cache-clear empties the cache, which --aoti-cache={values['cache_mode']} "
            "never writes: drop --aoti-cache-clear, or clear it with --aoti-cache=readwrite"
        )
    return AotiSettings(**values, check_options=check_options)


def _path(config: pytest.Config, text: str) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else config.rootpath / path


def _value(config: pytest.Config, option: Option) -> Any:
    assert option.parse is not None
    given = config.getoption(option.dest) if option.cli else None
    if option.flag:
        if given or option.ini_key is None:
            return bool(given)  # a switch given, or one without an ini twin
        given = None  # not given: its ini twin decides
    if given is not None:
        return tuple(given) if option.many else given
    if option.ini_key is None:
        return option.default
    text = config.getini(option.ini_key)
    if text in (None, "", []):
        return option.default
    if option.many:
        try:
            return tuple(option.parse(line.strip()) for line in text if line.strip())
        except argparse.ArgumentTypeError as error:
            raise pytest.UsageError(f"ini option {option.ini_key}: {error}") from None
    try:
        return option.parse(str(text).strip())
    except argparse.ArgumentTypeError as error:
        # a store's URL or options may carry a credential: their values are not echoed
        secret = option.name in ("aoti-cache-url", "aoti-cache-storage-options")
        shown = "" if secret else f" = {text!r}"
        raise pytest.UsageError(f"ini option {option.ini_key}{shown}: {error}") from None
