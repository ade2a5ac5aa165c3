"""The options every check reads, as one frozen typed object: :class:`CheckOptions`.

Each field is one per-check option, and its metadata is its row: the command line and ini
key, whether ``@pytest.mark.aoti`` and ``aoti.check`` take it, its help and its value
check (:func:`per_check`). :mod:`pytest_aoti.options.table` builds the option rows from
these fields, :class:`~pytest_aoti.options.defaults.CheckDefaults` inherits them, and the
resolver (:mod:`pytest_aoti.options.resolve`) fills one instance per check. A check reads
``plan.options.threads``. A new per-check option is a field here plus the check that
reads it.

Pure logic without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields
from typing import Any

from pytest_aoti.options.values import (
    PROBE_POLICIES,
    RANDOM_MODES,
    check_bytes,
    check_count,
    check_non_negative,
    check_probes_skip,
    check_switch,
    parse_non_negative_int,
    parse_positive_int,
    parse_switch,
)

ROW = "pytest_aoti.option"
"""The metadata key of a field's row facets."""

DEFAULT_EXAMPLES = 20
DEFAULT_MAX_DIM = 64


def per_check(
    default: Any,
    help: str,
    *,
    parse: Callable[[str], Any] | None = None,
    check: Callable[[str, Any], Any] | None = None,
    marker: bool = False,
    keyword: bool = False,
    flag: bool = False,
) -> Any:
    """A :class:`CheckOptions` field and its row.

    - ``parse``: command-line and ini text to value; with it, the option is
      ``--aoti-NAME`` (dashes for underscores) and ini key ``aoti_NAME``; ``flag``: a
      switch without a value on the command line, ``parse`` reads its ini twin;
    - ``marker`` / ``keyword``: also a keyword of ``@pytest.mark.aoti`` / ``aoti.check``;
    - ``check``: a marker's or call's value as the check reads it, given the option's
      name; raises :class:`~pytest_aoti.options.values.ValueProblem`.
    """
    facets = {
        "parse": parse,
        "help": help,
        "check": check,
        "marker": marker,
        "keyword": keyword,
        "flag": flag,
    }
    return field(default=default, metadata={ROW: facets})


@dataclass(frozen=True)
class CheckOptions:
    """Every per-check option's value for one check: the field's default, then the
    command line or ini file, the hooks, the marker and the call (the resolver's layers)."""

    examples: int = per_check(
        DEFAULT_EXAMPLES,
        "Generated input shapes per dynamic-shape check; 0 turns generation off. "
        f"Default: {DEFAULT_EXAMPLES}.",
        parse=parse_non_negative_int,
        check=check_non_negative,
        marker=True,
        keyword=True,
    )
    max_dim: int = per_check(
        DEFAULT_MAX_DIM,
        "Largest size drawn for a generated dim, and the cap of unbounded ranges. "
        f"Default: {DEFAULT_MAX_DIM}.",
        parse=parse_positive_int,
        check=check_count,
        marker=True,
    )
    localize: bool = per_check(
        True,
        "When the AOTI compile broke a check, compile one instrumented program to name the "
        "first diverging graph node and its source line: on or off. Default: on.",
        parse=parse_switch,
        check=check_switch,
        marker=True,
    )
    random: str = per_check(
        "fail",
        "A program that draws random numbers (dropout in training mode, rand, bernoulli, "
        "...): fail its check, or compare shapes (output shapes and dtypes, and the values "
        "of outputs no random op feeds). Default: fail.",
        parse=RANDOM_MODES.parse,
        check=RANDOM_MODES.check,
        marker=True,
        keyword=True,
    )
    probes: str = per_check(
        "report",
        "After a passing check, call the raw engine with variants of the example (other "
        "layouts, sizes, dtypes, scalar values, aliased inputs) and compare with eager: off, "
        "report (list hazards in the summary) or fail (a silently wrong variant fails the "
        "check). Default: report.",
        parse=PROBE_POLICIES.parse,
        check=PROBE_POLICIES.check,
        marker=True,
        keyword=True,
    )
    serving_checks: bool = per_check(
        False,
        "The serving process sets AOTI_RUNTIME_CHECK_INPUTS=1: probe variants the engine then "
        "refuses are neither hazards nor failures. Default: off.",
        parse=parse_switch,
        flag=True,
    )
    probes_skip: Any = per_check(
        None,
        "Probe variants a model does not support: a set of variant kinds for every input "
        '({"channels_last"}) or per input ({"x": {"size"}}); "*" for all kinds.',
        check=check_probes_skip,
        marker=True,
        keyword=True,
    )
    threads: int = per_check(
        1,
        "Threads one engine serves at once in the thread-safety check (1: no such check).",
        check=check_count,
        keyword=True,
    )
    max_extra_bytes: int | None = per_check(
        None,
        "Device memory one engine call of the example may allocate beyond what was "
        "allocated before it (CUDA only; None: not checked).",
        check=check_bytes,
        keyword=True,
    )
    crash_screen: bool = per_check(
        True,
        "Run the check's engine calls once in a child process before the test process "
        "makes them: an engine that crashes its process (a signal, an abort, a sticky CUDA "
        "error) or hangs fails its test and the run goes on. Default: on.",
        parse=parse_switch,
        check=check_switch,
        marker=True,
        keyword=True,
    )
    training: bool = per_check(
        False,
        "Check a module left in training mode on purpose: its BatchNorm-like layers update "
        "their running statistics on every call. False refuses such a module before any "
        "export, with the hint to call model.eval(). Default: False.",
        check=check_switch,
        keyword=True,
    )


# Other modules list and build options through these functions (and ``table.rows()``), so
# that the fields are those of this module's class as it is when they run.


def option_fields() -> tuple[Field[Any], ...]:
    """The fields of :class:`CheckOptions` that are per-check options, in order."""
    return tuple(item for item in fields(CheckOptions) if ROW in item.metadata)


def options_from(values: Any) -> CheckOptions:
    """The :class:`CheckOptions` of an object that has options as attributes (a
    :class:`~pytest_aoti.options.defaults.CheckDefaults`) or of a dict by name, a field's
    default where it lacks one."""
    if not isinstance(values, dict):
        values = {
            item.name: getattr(values, item.name)
            for item in option_fields()
            if hasattr(values, item.name)
        }
    return CheckOptions(
        **{item.name: values.get(item.name, item.default) for item in option_fields()}
    )
