"""How the C++ loader's results must agree with the Python engine's and eager's, and the
failures that name the loader: what differed, where, the figures, what a server sees."""

from __future__ import annotations

import math
from typing import Any

import torch

from pytest_aoti.api import (
    AotiCheckError,
    Comparison,
    Finding,
    FindingKind,
    InputBuilder,
    Tolerance,
)

LOADER = "the C++ loader (AOTIModelPackageLoader)"
EXACT = Tolerance(rtol=0.0, atol=0.0)
"""Bit for bit, NaN where NaN: the runner has this process's settings."""
SERVER = (
    "the same package, loaded by torch::inductor::AOTIModelPackageLoader in a C++ process "
    "without Python (the plugin's runner), as a C++ server loads it"
)
OFF_HINT = "cpp_loader=False (or --aoti-cpp-loader=off) leaves this check out"
_STAGES = {
    "start": "did not start",
    "load": "could not load the package",
    "call": "failed running the package",
    "inputs": "could not read the input file",
    "outputs": "could not write the output file",
    "lib": "could not load a custom-op library the package may call",
}


def loader_failed(stage: str, message: str, what: str) -> AotiCheckError:
    """The runner raised, crashed or hung where the Python engine ran."""
    where = f" on {what}" if what else ""
    done = _STAGES.get(stage, f"failed ({stage})")
    return AotiCheckError(
        Finding.plain(
            FindingKind.CHECK,
            f"{LOADER} {done}{where}: {message}\n{SERVER}\n"
            f"the Python engine (aoti_load_package) ran it\n{OFF_HINT}",
        )
    )


class Agreement:
    """The comparisons of one input set; each raises :class:`AotiCheckError` on a difference."""

    def __init__(self, what: str, exact: bool, mode: str, tolerance: Tolerance) -> None:
        self.what = what
        self.exact = exact
        self.mode = mode
        self.tolerance = tolerance

    def count(self, kind: str, engine: int, loader: int) -> None:
        __tracebackhide__ = True
        if engine != loader:
            raise self._error(
                kind, f"the Python engine has {engine} {kind}, {LOADER} returned {loader}"
            )

    def with_engine(self, location: str, engine: Any, loader: Any) -> None:
        """``loader`` equals ``engine`` (bit for bit where exact, else within the tolerance)."""
        __tracebackhide__ = True
        if not isinstance(engine, torch.Tensor) or not isinstance(loader, torch.Tensor):
            if engine != loader:
                raise self._error(location, f"Python engine {engine!r}, C++ loader {loader!r}")
            return
        engine = engine.detach().cpu()
        for attribute in ("shape", "dtype"):
            want, got = getattr(engine, attribute), getattr(loader, attribute)
            if want != got:
                raise self._error(location, f"{attribute}: Python engine {want}, C++ loader {got}")
        if engine.is_floating_point() or engine.is_complex():
            one_sided = int((engine.isnan() != loader.isnan()).sum())
            if one_sided:
                raise self._error(location, f"{one_sided} element(s) are NaN on one side only")
        try:
            Comparison(EXACT if self.exact else self.tolerance).leaf(
                engine,
                loader,
                location=location,
            )
        except AotiCheckError as error:
            figures = error.finding.figures
            summary = error.finding.summary
            if self.exact and figures is not None:
                summary = f"{figures.mismatched} of {figures.numel} elements differ"
            raise self._error(location, summary, figures) from None

    def with_eager(self, location: str, eager: Any, engine: Any, loader: Any) -> None:
        """``loader`` matches ``eager`` within the tolerance wherever the Python engine does
        (bit-equal results add nothing: parity judged the engine's)."""
        __tracebackhide__ = True
        if self.exact:
            return
        try:
            Comparison(self.tolerance).leaf(eager, _cpu(engine), location=location)
        except AotiCheckError:
            return  # parity passed it by a rule of its own (float64): not this check's to judge
        try:
            Comparison(self.tolerance).leaf(eager, loader, location=location)
        except AotiCheckError as error:
            finding = error.finding
            raise self._error(
                location,
                finding.summary.replace("engine", "C++ loader"),
                finding.figures,
                against="eager",
            ) from None

    def _error(
        self, location: str, summary: str, figures: Any = None, against: str = "Python engine"
    ) -> AotiCheckError:
        rule = self.mode if against == "Python engine" else "within the check's tolerance"
        whose = "the Python engine's" if against == "Python engine" else f"{against}'s"
        return AotiCheckError(
            Finding(
                kind=FindingKind.CHECK,
                location=location,
                summary=summary,
                message=f"{LOADER}: {location} differs from {whose} on {self.what}: {summary}",
                details=(
                    f"{SERVER}, must agree with {whose[:-2]} {rule}",
                    "a server that loads the package in C++ gets these values; the Python "
                    "engine (aoti_load_package) matched eager on them",
                ),
                figures=figures,
                expected_name=against,
                actual_name="C++ loader",
                notes=(OFF_HINT,),
            )
        )


def max_abs(expected: Any, actual: Any) -> float:
    """The largest absolute difference as parity measures it (none where both are NaN or
    the same infinity; an infinite one where only one side is NaN); 0 for non-numbers."""
    if not isinstance(actual, torch.Tensor):
        return 0.0
    if not isinstance(expected, torch.Tensor):
        try:
            expected = torch.as_tensor(expected)
        except (TypeError, ValueError, RuntimeError):
            return 0.0
    want, got = _cpu(expected), actual
    if want.shape != got.shape or want.numel() == 0:
        return 0.0
    largest = float(Comparison.differences(want, got).max())
    return largest if not math.isnan(largest) else math.inf


def perturbed(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The test hook's input: the first floating-point tensor, copied, one more in its first
    element (the others as they are)."""
    changed = list(tensors)
    for position, tensor in enumerate(changed):
        if tensor.is_floating_point() and tensor.numel():
            copy = InputBuilder.clone_tree(tensor)
            copy[(0,) * copy.dim()] += 1
            changed[position] = copy
            break
    return changed


def _cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value
