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
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import pytest

CACHE_MODES = ("off", "read", "readwrite")
DEFAULT_EXAMPLES = 20
DEFAULT_MAX_DIM = 64
DEFAULT_CACHE_MAX_SIZE = 4 * 2**30

_DEVICE = re.compile(r"^(cpu|auto|cuda(:\d+)?)$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_devices(text: str) -> tuple[str, ...]:
    """``"cpu,cuda:1"`` → ``("cpu", "cuda:1")``; raises ``ArgumentTypeError`` on a bad name."""
    names = tuple(part.strip().lower() for part in str(text).split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected cpu, cuda, cuda:N, auto or a comma list")
    for name in names:
        if not _DEVICE.match(name):
            raise argparse.ArgumentTypeError(
                f"unknown device {name!r}: use cpu, cuda, cuda:N, auto or a comma list such as cpu,cuda"
            )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"device listed twice in {text!r}")
    return names


def parse_size(text: str) -> int:
    """``"4GiB"``, ``"500M"``, ``"1024"`` → bytes."""
    match = _SIZE.match(str(text))
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 4GiB or 500MB, got {text!r}")
    number, unit = match.groups()
    return int(float(number) * 1024 ** " kmgt".index(unit.lower() or " "))


def parse_cache_mode(text: str) -> str:
    mode = str(text).strip().lower()
    if mode not in CACHE_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(CACHE_MODES)}, got {text!r}")
    return mode


def parse_switch(text: str) -> bool:
    """``on``/``off`` (also true/false, yes/no, 1/0) → bool."""
    word = str(text).strip().lower()
    if word in ("on", "true", "yes", "1"):
        return True
    if word in ("off", "false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected 1 or more, got 0")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 1e-5, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a tolerance of 0 or more, got {value}")
    return value


HF_PREFIX = "hf:"
_MODEL_SPEC_FORMS = "module.path:callable, path/to/file.py:callable or hf:MODEL_TYPE"


def parse_model_spec(text: str) -> str:
    """The form of an ``--aoti-model`` spec only: resolving it (importing the module,
    building an ``hf:`` config) waits for the rootdir, in ``pytest_aoti.models.spec``."""
    spec = str(text).strip()
    if spec.startswith(HF_PREFIX):
        if not spec[len(HF_PREFIX) :].strip("?/"):
            raise argparse.ArgumentTypeError(f"{spec!r}: expected hf:MODEL_TYPE such as hf:bert")
        return spec
    target, _, name = spec.rpartition(":")
    if not target or not name or not name.replace(".", "").isidentifier():
        raise argparse.ArgumentTypeError(f"{spec!r}: expected {_MODEL_SPEC_FORMS}")
    return spec


RANDOM_MODES = ("fail", "shapes")
"""What a check does with a program that draws random numbers: ``fail`` (eager and the
engine draw different numbers), or compare ``shapes`` (output structure, shapes and dtypes,
and the values of the outputs no random op feeds)."""


def parse_random_mode(text: str) -> str:
    mode = str(text).strip().lower()
    if mode not in RANDOM_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(RANDOM_MODES)}, got {text!r}")
    return mode


EXPORT_MODES = ("default", "strict", "non-strict")


def parse_export_modes(text: str) -> tuple[str, ...]:
    """``"strict,non-strict"`` → ``("strict", "non-strict")``."""
    modes = tuple(part.strip().lower() for part in str(text).split(",") if part.strip())
    unknown = [mode for mode in modes if mode not in EXPORT_MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"expected strict, non-strict, default or a comma list such as strict,non-strict, "
            f"got {text!r}"
        )
    if len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"export mode listed twice in {text!r}")
    return modes


PROBE_POLICIES = ("off", "report", "fail")


def parse_probe_policy(text: str) -> str:
    """``off``, ``report`` or ``fail``: what deployment probes do after a passing check."""
    policy = str(text).strip().lower()
    if policy not in PROBE_POLICIES:
        raise argparse.ArgumentTypeError(
            f"expected one of {', '.join(PROBE_POLICIES)}, got {text!r}"
        )
    return policy


def _probe_policy_problem(name: str, value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in PROBE_POLICIES:
        return ""
    return f"{name} must be one of {', '.join(PROBE_POLICIES)}, got {value!r}"


PROBE_LAYOUT_KINDS = (
    "channels_last",
    "channels_last_3d",
    "permuted",
    "strided_slice",
    "storage_offset",
)
PROBE_KINDS = (*PROBE_LAYOUT_KINDS, "size", "dtype", "device", "scalar", "aliased")
"""The kinds of deployment-probe variants; ``probes_skip`` names these."""


def probes_skip_problem(name: str, value: Any) -> str:
    """What is wrong with a ``probes_skip`` value: a set of kinds (``"*"``: all), or a
    dict of input name to such a set."""
    if value is None:
        return ""

    def kinds_problem(names: Any, where: str) -> str:
        if isinstance(names, str):
            names = {names}
        if not isinstance(names, Iterable):
            return f"{name}{where} must be a set of variant kinds"
        unknown = sorted({str(item) for item in names} - set(PROBE_KINDS) - {"*"})
        if unknown:
            return (
                f"{name}{where} names unknown variant kind(s) {', '.join(unknown)}; "
                f"known: {', '.join(PROBE_KINDS)} (or * for all)"
            )
        return ""

    if isinstance(value, Mapping):
        for key, names in value.items():
            problem = kinds_problem(names, f"[{key!r}]")
            if problem:
                return problem
        return ""
    return kinds_problem(value, "")


def parse_json_object(text: str) -> dict[str, Any]:
    """A JSON object, e.g. ``{"max_autotune": false}``."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected a JSON object, got {text!r} ({error})"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def parse_cache_url(text: str) -> str:
    """An fsspec URL such as ``s3://bucket/prefix`` or ``file:///shared/aoti``."""
    url = str(text).strip()
    if "://" not in url or not url.split("://", 1)[1].strip("/"):
        raise argparse.ArgumentTypeError(
            f"expected an fsspec URL such as s3://bucket/prefix or file:///path, got {text!r}"
        )
    return url


def parse_path_list(text: str) -> tuple[str, ...]:
    """Paths one per line (or separated by spaces)."""
    return tuple(part for part in str(text).split() if part)


def _count_problem(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return ""
    return f"{name} must be a positive int, got {value!r}"


def _bytes_problem(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return ""
    return f"{name} must be a number of bytes (an int >= 0), got {value!r}"


def _random_problem(name: str, value: Any) -> str:
    if value in RANDOM_MODES:
        return ""
    return f"{name} must be one of {', '.join(repr(mode) for mode in RANDOM_MODES)}, got {value!r}"


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
    """A switch without a value (``store_true``); ``parse`` is not called."""

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
        _tolerance,
        None,
        "Relative tolerance of every check. Default: by dtype, as torch.testing.assert_close.",
        check="base_rtol",  # below the tolerance hook; the marker's and the call's are final
        marker=True,
        keyword=True,
    ),
    Option(
        "aoti-atol",
        _tolerance,
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
        _non_negative_int,
        DEFAULT_EXAMPLES,
        f"Generated input shapes per dynamic-shape check; 0 turns generation off. Default: {DEFAULT_EXAMPLES}.",
        check="examples",
        marker=True,
        keyword=True,
    ),
    Option(
        "aoti-max-dim",
        _positive_int,
        DEFAULT_MAX_DIM,
        f"Largest size drawn for a generated dim, and the cap of unbounded ranges. Default: {DEFAULT_MAX_DIM}.",
        check="max_dim",
        marker=True,
    ),
    Option(
        "aoti-localize",
        parse_switch,
        True,
        "When the AOTI compile broke a check, compile one instrumented program to name the "
        "first diverging graph node and its source line: on or off. Default: on.",
        check="localize",
        marker=True,
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
        problem=_random_problem,
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
        problem=_probe_policy_problem,
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
        problem=_count_problem,
    ),
    Option(
        "max_extra_bytes",
        None,
        None,
        "Device memory one engine call of the example may allocate beyond what was "
        "allocated before it (CUDA only; None: not checked).",
        keyword=True,
        problem=_bytes_problem,
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
        _non_negative_int,
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
        parse_json_object,
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
                _check_writable_dir(value if option.path == "dir" else value.parent, option)
            if option.path == "file" and value.is_dir():
                raise pytest.UsageError(f"--{option.name}={value} is a directory; name a file")
        if option.check:
            check_options[option.keyword_name] = value
        else:
            values[option.attribute] = value
    return AotiSettings(**values, check_options=check_options)


def _path(config: pytest.Config, text: str) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else config.rootpath / path


def _check_writable_dir(path: Path, option: Option) -> None:
    """Create ``path`` now, so an unusable directory stops the run before any compile."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".pytest-aoti-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise pytest.UsageError(
            f"--{option.name}={path}: cannot write there ({error.strerror or error}); "
            "pass a directory you can write to"
        ) from None


def _value(config: pytest.Config, option: Option) -> Any:
    assert option.parse is not None
    given = config.getoption(option.dest) if option.cli else None
    if option.flag:
        return bool(given)
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
        raise pytest.UsageError(f"ini option {option.ini_key} = {text!r}: {error}") from None
