"""How close is close enough: tolerances layered over ``assert_close``'s dtype defaults, the fp64
rule of torch's accuracy benchmarks (``torch._dynamo.utils.same``), and the figures of a
mismatch."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.findings import Figures

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
    # quantized tensors compare dequantized, with float32's tolerance
    "quint8": (1.3e-6, 1e-5),
    "quint2x4": (1.3e-6, 1e-5),
    "quint4x2": (1.3e-6, 1e-5),
    "qint8": (1.3e-6, 1e-5),
    "qint32": (1.3e-6, 1e-5),
}
"""``assert_close``'s default ``(rtol, atol)`` by dtype name (torch's ``_DTYPE_PRECISIONS``; the
repro bundle's script holds the same table); other dtypes compare exactly."""


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``assert_close``'s ``(rtol, atol)`` for ``dtype`` (:data:`DEFAULT_TOLERANCES` fallback)."""
    try:
        from torch.testing._comparison import default_tolerances  # private: may move
    except ImportError:
        return DEFAULT_TOLERANCES.get(str(dtype).removeprefix("torch."), (0.0, 0.0))
    rtol, atol = default_tolerances(dtype)
    return float(rtol), float(atol)


# same()'s tol=1e-4, plus tol / 10 so near-exact results are not judged by two tiny RMSEs
RESCUE_FLOOR = 1e-5


ToleranceHook = Callable[[str, torch.dtype], "tuple[float, float] | None"]  # noqa: UP037
"""``(location, dtype) -> (rtol, atol) or None``: a project's own tolerance per leaf."""


@dataclass(frozen=True)
class Tolerance:
    """Tolerance for floating and complex leaves, in layers: the test's ``rtol``/``atol``, then
    ``hook``, then ``base_rtol``/``base_atol`` (``--aoti-rtol``/``--aoti-atol``), then the dtype
    default. A value not from the dtype default is final: no fp64 check relaxes it."""

    rtol: float | None = None
    atol: float | None = None
    hook: ToleranceHook | None = field(default=None, compare=False)
    base_rtol: float | None = None
    base_atol: float | None = None

    def __post_init__(self) -> None:
        for name in ("rtol", "atol", "base_rtol", "base_atol"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is not None and not (number and value >= 0):
                raise AotiUsageError(f"{name} must be a non-negative number, got {value!r}")

    @property
    def explicit(self) -> bool:
        """True when the test set rtol or atol; explicit tolerances are never relaxed."""
        return self.rtol is not None or self.atol is not None

    def resolve(self, dtype: torch.dtype, location: str = "") -> tuple[float, float]:
        """Return ``(rtol, atol)`` for a leaf of ``dtype`` at ``location``."""
        return self._resolve(dtype, location)[:2]

    def is_final(self, dtype: torch.dtype, location: str = "") -> bool:
        """Whether anything but the dtype default set the tolerance of this leaf."""
        return not self._resolve(dtype, location)[2].startswith("default")

    def as_json(self, dtype: torch.dtype, location: str = "") -> dict[str, Any]:
        """``{"rtol", "atol", "source"}``: the tolerance used for a leaf, as data."""
        rtol, atol, source = self._resolve(dtype, location)
        return {"rtol": rtol, "atol": atol, "source": source, "explicit": source == _SET_BY_TEST}

    def describe(self, dtype: torch.dtype, location: str = "") -> str:
        """One line naming the tolerance used for ``dtype`` and where it came from."""
        rtol, atol, source = self._resolve(dtype, location)
        return f"rtol={rtol:g}, atol={atol:g} ({source})"

    def _resolve(self, dtype: torch.dtype, location: str) -> tuple[float, float, str]:
        layers: list[tuple[float | None, float | None, str]] = [
            (self.rtol, self.atol, _SET_BY_TEST)
        ]
        if self.hook is not None and not (self.rtol is not None and self.atol is not None):
            hooked = self.hook(location, dtype)
            if hooked is not None:
                layers.append((float(hooked[0]), float(hooked[1]), "pytest_aoti_tolerance hook"))
        layers.append((self.base_rtol, self.base_atol, "--aoti-rtol/--aoti-atol"))
        layers.append((*default_tolerance(dtype), f"default for {dtype}"))
        rtol = next(layer[0] for layer in layers if layer[0] is not None)
        atol = next(layer[1] for layer in layers if layer[1] is not None)
        source = next(name for r, a, name in layers if r is not None or a is not None)
        return float(rtol), float(atol), source


_SET_BY_TEST = "set by the test"


@dataclass(frozen=True)
class LeafStats:
    """Error figures of one compared leaf."""

    location: str
    max_abs: float
    max_rel: float
    tolerance_used: float = 0.0
    """The largest error over what the tolerance allows (1: at the limit; >1 only fp64-rescued)."""
    rescued_by_fp64: bool = False
    """Beyond the tolerance, and passed by the fp64 rule."""
    rounded_apart: int = 0
    """Elements beyond tolerance where the engine is closer to float64 than eager (precision)."""
    dtype: str = ""
    """The leaf's dtype, where it was rescued."""


class NoReference(Exception):
    """The fp64 reference is unavailable; the message says why."""


def type_name(value: Any) -> str:
    """How messages name a value's type: ``Tensor``, ``None``, ``int``, ..."""
    if isinstance(value, torch.Tensor):
        return "Tensor"
    return "None" if value is None else type(value).__name__


def beyond_tolerance(
    expected: torch.Tensor, actual: torch.Tensor, diff: torch.Tensor, rtol: float, atol: float
) -> torch.Tensor:
    """Elementwise negation of assert_close's test, with NaN already known to line up."""
    want, got = widened(expected), widened(actual)
    equal = (want == got) | (want.isnan() & got.isnan())
    # infinities pass only through `equal`: an infinite bound would let anything match
    finite = want.isfinite() & got.isfinite()
    close = equal | (finite & (diff <= atol + rtol * want.abs()))
    return ~close


@dataclass(frozen=True)
class Rescue:
    """What the fp64 rule said of one leaf beyond the default tolerance."""

    passed: bool
    line: str
    """The rule's figures, in words (on the failure's report)."""
    engine_closer: bool = False
    """The engine is closer to float64 than eager (reported as precision)."""


def fp64_rescue(
    expected: torch.Tensor, actual: torch.Tensor, reference: Callable[[], Any], accumulates: int = 0
) -> Rescue:
    """``same()``'s RMSE test against the float64 reference, plus ``accumulates`` terms' rounding."""
    # the RMSE only sees finite elements, so anything non-finite must already match
    nonfinite = ~(expected.isfinite() & actual.isfinite())
    if bool((nonfinite & (expected != actual) & ~expected.isnan()).any()):
        return Rescue(False, "fp64 check skipped: infinities differ")
    try:
        ref = reference()
    except Exception as exc:  # a broken reference only means there is nothing to rescue with
        reason = str(exc) if isinstance(exc, NoReference) else f"{type(exc).__name__}: {exc}"
        return Rescue(False, f"fp64 check unavailable: {reason}")
    usable = isinstance(ref, torch.Tensor) and ref.dtype == torch.float64
    if not usable or ref.shape != expected.shape:
        found = (
            f"{ref.dtype} {tuple(ref.shape)}" if isinstance(ref, torch.Tensor) else type_name(ref)
        )
        wanted = f"float64 {tuple(expected.shape)}"
        return Rescue(False, f"fp64 check unavailable: reference leaf is {found}, not {wanted}")
    ref = plain_tensor(ref).to(device=expected.device)
    want, got = expected.to(torch.float64), actual.to(torch.float64)
    finite = ref.isfinite() & want.isfinite() & got.isfinite()
    eager_error = rmse(ref[finite], want[finite])
    engine_error = rmse(ref[finite], got[finite])
    multiplier = rescue_multiplier(expected.dtype, ref.numel())
    bound = multiplier * eager_error + RESCUE_FLOOR
    rounding = accumulated_rounding(expected.dtype, accumulates, ref[finite])
    line = (
        f"fp64 check: rmse(engine vs fp64)={engine_error:.3g} exceeds "
        f"{multiplier:g} * rmse(eager vs fp64)={eager_error:.3g} + {RESCUE_FLOOR:g} = {bound:.3g}"
    )
    if rounding:
        line += (
            f" and the rounding of {accumulates} accumulated terms, "
            f"{accumulates} * u * rms(fp64) = {rounding:.3g}"
        )
    passed = engine_error <= max(bound, rounding)
    return Rescue(passed, line, engine_closer=passed and engine_error < eager_error)


def accumulated_rounding(dtype: torch.dtype, accumulates: int, reference: torch.Tensor) -> float:
    """The RMS error rounding may put into a sum of ``accumulates`` terms in ``dtype`` (0 if none):
    ``accumulates * u * rms(reference)``, ``u`` its unit roundoff (a sum of ``n`` terms is off by
    at most ``(n - 1) * u * sum(|terms|)``; repeated values round alike, so it grows with ``n``)."""
    if accumulates < 2 or reference.numel() == 0 or not dtype.is_floating_point:
        return 0.0
    unit = torch.finfo(dtype).eps / 2
    size = float(torch.sqrt(torch.mean(torch.square(reference))))
    return unit * accumulates * size


def rescue_multiplier(dtype: torch.dtype, numel: int) -> float:
    """same()'s multiplier for small tensors (use_larger_multiplier_for_smaller_tensor)."""
    if numel <= 10:
        return 10.0
    if numel <= 500:
        return 8.0
    if numel < 1000 or dtype in (torch.float16, torch.bfloat16):
        return 3.0
    return 2.0


def rmse(ref: torch.Tensor, res: torch.Tensor) -> float:
    return 0.0 if ref.numel() == 0 else float(torch.sqrt(torch.mean(torch.square(ref - res))))


def plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """Detached, dense, with lazy conjugate/negative bits applied."""
    plain = tensor.detach()
    if plain.layout != torch.strided:
        plain = plain.to_dense()
    return plain.resolve_conj().resolve_neg()


def widened(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(torch.complex128 if tensor.is_complex() else torch.float64)


def abs_diff(expected: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
    """|actual - expected| in float64, 0 where both agree (equal infinities, both NaN)."""
    want, got = widened(expected), widened(actual)
    agree = (want == got) | (want.isnan() & got.isnan())
    return torch.where(agree, 0.0, (got - want).abs())


def rel_diff(expected: torch.Tensor, diff: torch.Tensor) -> torch.Tensor:
    magnitude = widened(expected).abs()
    measurable = (magnitude != 0) & magnitude.isfinite()
    return torch.where(measurable, diff / torch.where(measurable, magnitude, 1.0), 0.0)


def leaf_stats(
    location: str,
    expected: torch.Tensor,
    diff: torch.Tensor,
    rtol: float | None = None,
    atol: float | None = None,
) -> LeafStats:
    if diff.numel() == 0:
        return LeafStats(location, 0.0, 0.0)
    used = 0.0
    if rtol is not None and atol is not None:
        allowed = atol + rtol * widened(expected).abs()
        ratio = torch.where(diff == 0, 0.0, diff / torch.where(allowed > 0, allowed, 1.0))
        ratio = torch.where((allowed == 0) & (diff > 0), torch.inf, ratio)
        used = float(ratio.max())
    return LeafStats(location, float(diff.max()), float(rel_diff(expected, diff).max()), used)


def leaf_figures(
    expected: torch.Tensor,
    actual: torch.Tensor,
    mismatch: torch.Tensor,
    diff: torch.Tensor,
    location: str,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> Figures:
    # -1 keeps matching elements out of the argmax; every mismatch has diff > 0
    worst = unravel(int(torch.where(mismatch, diff, -1.0).argmax()), expected.shape)
    stats = leaf_stats(location, expected, diff)
    finite_diff = diff[diff.isfinite()] if diff.is_floating_point() else diff
    needed: tuple[float | None, float | None] = (None, None)
    if rtol is not None and atol is not None:
        needed = tolerances_needed(expected, actual, diff, rtol, atol)
    floating = expected.is_floating_point() or expected.is_complex()
    return Figures(
        shape=tuple(expected.shape),
        dtype=str(expected.dtype),
        device=str(expected.device),
        numel=expected.numel(),
        mismatched=int(mismatch.sum()),
        max_abs=stats.max_abs,
        max_rel=stats.max_rel,
        mean_abs=float(finite_diff.double().mean()) if finite_diff.numel() else 0.0,
        worst_index=worst,
        expected_value=format_element(expected[worst]),
        actual_value=format_element(actual[worst]),
        nan_expected=int(expected.isnan().sum()) if floating else 0,
        nan_actual=int(actual.isnan().sum()) if floating else 0,
        inf_expected=int(expected.isinf().sum()) if floating else 0,
        inf_actual=int(actual.isinf().sum()) if floating else 0,
        rtol_needed=needed[0],
        atol_needed=needed[1],
    )


def mismatch_counts(
    expected: torch.Tensor, actual: torch.Tensor, tolerance: Tolerance, location: str = ""
) -> tuple[int, float, float]:
    """``(elements beyond tolerance, max abs error, max rel error)`` of two same-shape tensors,
    judged per element as :func:`compare_leaf` does (without the fp64 check)."""
    want, got = plain_tensor(expected), plain_tensor(actual)
    diff = abs_diff(want, got)
    if want.is_floating_point() or want.is_complex():
        rtol, atol = tolerance.resolve(want.dtype, location)
        mismatch = beyond_tolerance(want, got, diff, rtol, atol)
    else:
        mismatch = want != got
    stats = leaf_stats(location, want, diff)
    return int(mismatch.sum()), stats.max_abs, stats.max_rel


def tolerances_needed(
    expected: torch.Tensor, actual: torch.Tensor, diff: torch.Tensor, rtol: float, atol: float
) -> tuple[float, float]:
    """The smallest rtol (same atol) and atol (same rtol) passing every element; inf if none."""
    want, got = widened(expected), widened(actual)
    agree = (want == got) | (want.isnan() & got.isnan())
    finite = want.isfinite() & got.isfinite()
    if bool((~agree & ~finite).any()):
        return math.inf, math.inf
    magnitude = want.abs()
    excess = (diff - atol).clamp(min=0)
    rtol_needed = 0.0
    if bool(((excess > 0) & (magnitude == 0)).any()):
        rtol_needed = math.inf
    elif excess.numel():
        rtol_needed = float((excess / torch.where(magnitude > 0, magnitude, 1.0)).max())
    atol_needed = float((diff - rtol * magnitude).clamp(min=0).max()) if diff.numel() else 0.0
    return max(rtol_needed, rtol), max(atol_needed, atol)


def unravel(flat: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(index) for index in torch.unravel_index(torch.tensor(flat), shape))


def format_element(element: torch.Tensor) -> str:
    value = element.item()
    if isinstance(value, float) and element.dtype != torch.float64:
        # enough digits to round-trip float32 without float64 noise
        return f"{value:.9g}"
    return repr(value)
