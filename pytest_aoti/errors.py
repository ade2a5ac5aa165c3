"""Errors and warnings raised by pytest-aoti: a short first line saying what went wrong and what
to try; an export or compile error keeps torch's as its ``__cause__``."""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any, Protocol, TypeVar

from pytest_aoti.findings import Finding, FindingKind
from pytest_aoti.frames import caller_stacklevel, pin_to_source

STAGE_NAMES = ("eager", "export", "decompose", "compile")
"""Where a failure arose, one spelling everywhere (text, exception, JSON report, JUnit)."""


class AotiError(Exception):
    """Base class of every pytest-aoti error."""

    @property
    def stage(self) -> str | None:
        """The step that failed (``"eager"``, ``"export"``, ``"decompose"``, ``"compile"``), or None."""
        return None


class _StageError(AotiError):
    default_stage = "export"

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self._stage = stage or self.default_stage

    @property
    def stage(self) -> str | None:
        return self._stage


class Replay(Protocol):
    """What a failure replays in its repro bundle: an input set, its module, the call count."""

    @property
    def args(self) -> tuple[Any, ...]: ...

    @property
    def kwargs(self) -> dict[str, Any]: ...

    @property
    def calls(self) -> int: ...

    @property
    def step_inputs(self) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], ...] | None:
        """A decode loop's ``(args, kwargs)`` of each call, else None (one input set)."""

    def weights(self) -> Mapping[str, Any]:
        """Weights loaded into the engine before the calls, by state-dict name (a weight
        swap's); empty for the compiled ones."""
        ...

    def eager_run(
        self, program: Any, *, buffers: bool = False
    ) -> tuple[list[tuple[Any, dict[str, Any]]], list[dict[str, Any]] | None]:
        """One eager run: per call, outputs and named inputs after it (and mutated ``buffers``)."""


class AotiCheckError(AotiError, AssertionError):
    """The AOTInductor engine disagreed with eager PyTorch or with what the test expected. The first
    line names what differed and where, the next the figures; as data: :attr:`finding`,
    :attr:`stage` and :attr:`node` (the first diverging graph node, for stage ``"compile"``)."""

    def __init__(self, finding: Finding | str) -> None:
        self.finding: Finding = (
            finding if isinstance(finding, Finding) else Finding.plain(FindingKind.CHECK, finding)
        )
        super().__init__(self.finding.render())

    def __str__(self) -> str:
        # rendered anew: the stage and node are added after the error was raised
        return self.finding.render()

    @property
    def kind(self) -> str:
        return self.finding.kind

    @property
    def stage(self) -> str | None:
        return self.finding.stage

    @property
    def node(self) -> Any:
        return self.finding.node

    replay: Replay | None = None
    """The input set and calls the failure happened on, for the repro bundle; None where the
    failure is not about one input set."""

    def amended(self, finding: Finding) -> AotiCheckError:
        """The same error with ``finding`` in place of its own (keeps the traceback)."""
        error = AotiCheckError(finding)
        error.__traceback__ = self.__traceback__
        error.replay = self.replay
        return error


class AotiExportError(_StageError):
    """``torch.export.export`` or ``run_decompositions`` (stage ``"decompose"``) refused the module."""

    default_stage = "export"


class AotiCompileError(_StageError):
    """``aoti_compile_and_package`` or ``aoti_load_package`` failed (stage ``"compile"``)."""

    default_stage = "compile"


class AotiUsageError(AotiError, TypeError):
    """A fixture, marker or check argument was used the wrong way."""

    @staticmethod
    def install_hint(extra: str = "") -> str:
        """The command that installs pytest-aoti with ``extra`` (``s3``, ``hf``), for the
        error a missing optional package causes: from where it was installed."""
        return install_hint(extra)

    @staticmethod
    def user_facing(function: _F) -> _F:
        """Let an error of the plugin leave ``function`` with only its caller's frame (as the
        plugin's own entry points do): a factory's usage error points at the user's line."""
        return user_facing(function)


class AotiInputError(AotiError, ValueError):
    """An input does not fit the shapes, dtypes or devices the program was exported for."""


class _AtCaller(UserWarning):
    def issue(self) -> None:
        """Issue this warning at the first frame outside pytest-aoti: the user's own line."""
        warn_at_caller(self)


class AotiBufferMutationWarning(_AtCaller):
    """The program mutates registered buffers: state shared by every caller of one engine, which
    two threads race on. A mutated input is thread-safe instead."""


class AotiCacheWarning(_AtCaller):
    """The artifact cache could not be used as configured; the run goes on without it."""


_F = TypeVar("_F", bound=Callable[..., Any])


def warn_at_caller(warning: Warning) -> None:
    """Issue ``warning`` at the first frame outside pytest-aoti: the user's own line."""
    warnings.warn(warning, stacklevel=caller_stacklevel())


def user_facing(function: _F) -> _F:
    """Let an :class:`AotiError` leave a public entry point with only the caller's frame; one
    raised ``from`` torch's keeps it as ``__cause__``, cut to the model's line."""

    @functools.wraps(function)
    def entry_point(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return function(*args, **kwargs)
        except AotiError as error:
            cause = error.__cause__
            if cause is not None:
                pin_to_source(cause)
            raise error.with_traceback(None) from cause

    return entry_point  # type: ignore[return-value]


REPOSITORY = "git+https://github.com/<org>/pytest-aoti"
"""The documented install source: this project's own repository (the URL it was cloned from)."""


def install_hint(extra: str = "") -> str:
    """The command that installs this project with ``extra`` (``s3``, ``hf``): from where it was
    installed (``direct_url.json``), else its metadata's repository, else as the docs say. Never the
    bare index name: pytest-aoti is not published, and whoever registers it would be installed."""
    requirement = f"pytest-aoti[{extra}]" if extra else "pytest-aoti"
    source = ""
    recorded: Any = {}
    for distribution in metadata.distributions(name="pytest-aoti"):
        source = source or _repository_of(getattr(distribution, "metadata", None))
        # a checkout's own egg-info may come first and records nothing
        try:
            recorded = json.loads(distribution.read_text("direct_url.json") or "{}")
        except ValueError:
            continue
        if recorded:
            break
    source = source or REPOSITORY
    url = recorded.get("url", "") if isinstance(recorded, dict) else ""
    if isinstance(url, str) and url.startswith("file://") and "dir_info" in recorded:
        path = url.removeprefix("file://")
        editable = recorded["dir_info"].get("editable", False)
        suffix = f"[{extra}]" if extra else ""
        return f'pip install {"-e " if editable else ""}"{path}{suffix}"'
    if isinstance(url, str) and url and "vcs_info" in recorded:
        source = f"{recorded['vcs_info'].get('vcs', 'git')}+{url}"
    return f'pip install "{requirement} @ {source}"'


_SOURCE_LABELS = ("source", "repository", "code", "homepage")


def _repository_of(fields: Any) -> str:
    """``git+https://…`` of the repository a distribution's metadata names; else empty."""
    if fields is None:
        return ""
    labelled: dict[str, str] = {}
    for entry in fields.get_all("Project-URL") or []:
        label, _, url = str(entry).partition(",")
        labelled.setdefault(label.strip().lower(), url.strip())
    found = [labelled.get(label, "") for label in _SOURCE_LABELS] + [fields.get("Home-page") or ""]
    for url in found:
        url = str(url).strip()
        if url.startswith("git+"):
            return url
        if url.startswith("https://"):
            return f"git+{url}"
    return ""
