"""Compare what the AOTInductor engine returned with what eager PyTorch returned.

Results are pytrees (tensors, tuples, lists, dicts, ``None``, Python scalars). Tensor
leaves must agree exactly in shape, dtype and device; integer and bool values must be
equal; floating and complex values follow ``torch.testing.assert_close`` (NaN equal to
NaN, infinities exact). A floating leaf that misses the *default* tolerance can still
pass the fp64 check torch's own accuracy benchmarks use (``torch._dynamo.utils.same``):
the engine's RMSE against a float64 eager run may be at most a few times eager's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._pytree import keystr, tree_flatten, tree_flatten_with_path

from pytest_aoti.errors import AotiCheckError, AotiUsageError
from pytest_aoti.findings import Figures, Finding

# assert_close's defaults, for torch versions that move or drop the private helper.
_FALLBACK_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}

# same() uses tol=1e-4 and adds tol / 10 so that near-exact results are not judged by
# the ratio of two tiny RMSEs.
_RESCUE_FLOOR = 1e-5

_EAGER = "eager"


ToleranceHook = Callable[[str, torch.dtype], "tuple[float, float] | None"]  # noqa: UP037
"""``(location, dtype) -> (rtol, atol) or None``: a project's own tolerance per leaf."""


@dataclass(frozen=True)
class Tolerance:
    """Tolerance for floating and complex leaves, in layers: ``rtol`` / ``atol`` set by the
    test (call or marker), then ``hook`` (the ``pytest_aoti_tolerance`` hook), then
    ``base_rtol`` / ``base_atol`` (``--aoti-rtol`` / ``--aoti-atol``), then the dtype's
    default. Any value not from the dtype default is final: no fp64 check relaxes it."""

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
        rtol, atol, _ = self._resolve(dtype, location)
        return rtol, atol

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
        default_rtol, default_atol = _default_tolerance(dtype)
        layers: list[tuple[float | None, float | None, str]] = [
            (self.rtol, self.atol, _SET_BY_TEST)
        ]
        if self.hook is not None and not (self.rtol is not None and self.atol is not None):
            hooked = self.hook(location, dtype)
            if hooked is not None:
                layers.append((float(hooked[0]), float(hooked[1]), "pytest_aoti_tolerance hook"))
        layers.append((self.base_rtol, self.base_atol, "--aoti-rtol/--aoti-atol"))
        rtol = next((layer[0] for layer in layers if layer[0] is not None), None)
        atol = next((layer[1] for layer in layers if layer[1] is not None), None)
        sources = [name for r, a, name in layers if r is not None or a is not None]
        source = sources[0] if sources else f"default for {dtype}"
        return (
            default_rtol if rtol is None else float(rtol),
            default_atol if atol is None else float(atol),
            source,
        )


_SET_BY_TEST = "set by the test"


@dataclass(frozen=True)
class LeafStats:
    """Error figures of one compared leaf."""

    location: str
    max_abs: float
    max_rel: float
    tolerance_used: float = 0.0
    """The largest error as a fraction of what the tolerance allows there (1: at the limit;
    above 1 only where the fp64 check accepted it)."""
    rescued_by_fp64: bool = False
    """Beyond the tolerance, and passed by the fp64 rule."""


def _default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    try:
        from torch.testing._comparison import default_tolerances
    except ImportError:
        return _FALLBACK_TOLERANCES.get(dtype, (0.0, 0.0))
    rtol, atol = default_tolerances(dtype)
    return float(rtol), float(atol)


@dataclass(frozen=True)
class _Frame:
    """Where a comparison happens and how its failure messages are worded."""

    location: str
    context: str
    expected_name: str  # "eager", or "expected" for values the test gave
    phrase: str  # what the first line says went wrong
    kind: str = "output"

    def error(
        self,
        summary: str,
        attribute: str = "",
        *,
        details: list[str] | None = None,
        figures: Figures | None = None,
        tolerance: dict[str, Any] | None = None,
        notes: list[str] | None = None,
    ) -> AotiCheckError:
        return AotiCheckError(
            Finding(
                kind=self.kind,
                location=self.location,
                summary=summary,
                phrase=self.phrase,
                attribute=attribute,
                expected_name=self.expected_name,
                context=self.context,
                details=tuple(details or ()),
                figures=figures,
                tolerance=tolerance,
                notes=tuple(notes or ()),
            )
        )


def _eager_frame(location: str, context: str) -> _Frame:
    kind = "output" if location.startswith("output") else "mutated input"
    return _Frame(location, context, _EAGER, "differs between eager and the AOTI engine", kind)


def compare_trees(
    expected: Any,
    actual: Any,
    *,
    what: str,
    context: str = "",
    tolerance: Tolerance = Tolerance(),
    reference: Callable[[], Any] | None = None,
) -> list[LeafStats]:
    """Compare eager's result pytree ``expected`` with the engine's ``actual``.

    ``what`` labels the root ("output", "input 'x'"); leaf locations append the pytree
    path to it. ``reference`` returns the same pytree computed by eager in float64; it
    is called only if a floating leaf misses the default tolerance, and at most once.
    Raises ``AotiCheckError`` at the first leaf that differs.
    """
    __tracebackhide__ = True
    expected_leaves, expected_spec = tree_flatten_with_path(expected)
    actual_leaves, actual_spec = tree_flatten_with_path(actual)
    if expected_spec != actual_spec:
        frame = _eager_frame(what, context)
        tail = f"eager {_describe(expected)}, engine {_describe(actual)}"
        raise frame.error(tail, "structure")

    lazy = _LazyReference(reference, expected_spec) if reference is not None else None
    stats = []
    for index, ((path, want), (_, got)) in enumerate(zip(expected_leaves, actual_leaves)):
        leaf_reference = lazy.leaf_getter(index) if lazy is not None else None
        stats.append(
            compare_leaf(
                want,
                got,
                location=f"{what}{keystr(path)}",
                context=context,
                tolerance=tolerance,
                reference=leaf_reference,
            )
        )
    return stats


def compare_leaf(
    expected: Any,
    actual: Any,
    *,
    location: str,
    context: str = "",
    tolerance: Tolerance = Tolerance(),
    reference: Callable[[], Any] | None = None,
) -> LeafStats:
    """Compare one eager leaf with the engine's; raise ``AotiCheckError`` if they differ.

    ``reference`` returns this leaf computed by eager in float64 (see ``compare_trees``);
    if it raises, the leaf is judged without it.
    """
    __tracebackhide__ = True
    frame = _eager_frame(location, context)
    expected_is_tensor = isinstance(expected, torch.Tensor)
    if _is_boxed_number(expected, actual):
        # an AOTI engine can only return tensors: a Python number eager returns comes back
        # from the engine as a 0-dim tensor holding it, which must hold exactly that value
        actual = actual.item()
    elif expected_is_tensor != isinstance(actual, torch.Tensor):
        tail = f"eager {_type_name(expected)}, engine {_type_name(actual)}"
        raise frame.error(tail, "type")
    if not expected_is_tensor:
        _check_plain(expected, actual, frame)
        return LeafStats(location, 0.0, 0.0)
    return _check_tensor(expected, actual, frame, tolerance, reference)


def assert_values(
    expected: Any,
    actual: Any,
    *,
    location: str,
    context: str = "",
    tolerance: Tolerance = Tolerance(),
) -> LeafStats:
    """Check that the engine left ``actual`` holding the value the test expects.

    ``expected`` may be a tensor, a number or a nested list; it is converted to
    ``actual``'s dtype and device but never broadcast. No fp64 check applies.
    """
    __tracebackhide__ = True
    frame = _Frame(location, context, "expected", "holds the wrong value after the AOTI engine ran")
    if not isinstance(actual, torch.Tensor):
        raise frame.error(f"engine left {_type_name(actual)}, not a tensor")
    want = _as_expected_tensor(expected, actual, frame)
    return _check_tensor(want, actual, frame, tolerance, None)


def assert_unchanged(
    before: torch.Tensor,
    after: torch.Tensor,
    *,
    location: str,
    context: str = "",
) -> None:
    """Check that ``after`` is bitwise equal to ``before`` (NaN counts equal to NaN).

    Used for inputs the program does not mutate: the engine must not write to them.
    """
    __tracebackhide__ = True
    frame = _Frame(
        location,
        context,
        "before",
        "was modified by the AOTI engine although the program does not mutate it",
        "untouched input",
    )
    for attribute in ("shape", "dtype", "device", "layout"):
        old, new = getattr(before, attribute), getattr(after, attribute)
        if old != new:
            raise frame.error(f"{attribute} changed from {old} to {new}")
    old_t, new_t = _plain(before), _plain(after)
    changed = _bitwise_changed(old_t, new_t)
    count = int(changed.sum())
    if count == 0:
        return
    index = _unravel(int(changed.reshape(-1).nonzero()[0]), old_t.shape)
    details = [
        f"shape {tuple(old_t.shape)}, dtype {old_t.dtype}",
        f"first change at index {index}: before={_fmt(old_t[index])} after={_fmt(new_t[index])}",
    ]
    raise frame.error(f"{count} of {old_t.numel()} elements changed", details=details)


# --- tree helpers -------------------------------------------------------------------


class _NoReference(Exception):
    """The fp64 reference is unavailable; the message says why."""


class _LazyReference:
    """Calls the tree-level fp64 reference once, on first demand, and hands out leaves."""

    def __init__(self, compute: Callable[[], Any], spec: Any) -> None:
        self._compute = compute
        self._spec = spec
        self._leaves: list[Any] | None = None
        self._problem: str | None = None

    def leaf_getter(self, index: int) -> Callable[[], Any]:
        return lambda: self._leaf(index)

    def _leaf(self, index: int) -> Any:
        if self._leaves is None and self._problem is None:
            self._load()
        if self._problem is not None:
            raise _NoReference(self._problem)
        assert self._leaves is not None
        return self._leaves[index]

    def _load(self) -> None:
        try:
            tree = self._compute()
        except Exception as exc:  # the reference is a bonus; its failure must not mask the mismatch
            self._problem = f"computing it raised {type(exc).__name__}: {exc}"
            return
        leaves, spec = tree_flatten(tree)
        if spec != self._spec:
            self._problem = "it has a different structure than the output"
            return
        self._leaves = leaves


def _describe(tree: Any, limit: int = 80) -> str:
    text = _describe_node(tree)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_node(node: Any) -> str:
    if isinstance(node, dict):
        inner = ", ".join(f"{key!r}: {_describe_node(value)}" for key, value in node.items())
        return f"{{{inner}}}"
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        inner = ", ".join(_describe_node(value) for value in node)
        return f"{type(node).__name__}({inner})"
    if isinstance(node, list):
        return "[" + ", ".join(_describe_node(value) for value in node) + "]"
    if isinstance(node, tuple):
        inner = ", ".join(_describe_node(value) for value in node)
        return f"({inner},)" if len(node) == 1 else f"({inner})"
    return _type_name(node)


def _is_boxed_number(expected: Any, actual: Any) -> bool:
    return (
        isinstance(expected, (int, float))
        and not isinstance(expected, bool)
        and isinstance(actual, torch.Tensor)
        and actual.dim() == 0
        and actual.is_floating_point() == isinstance(expected, float)
    )


def _type_name(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if value is None:
        return "None"
    return type(value).__name__


# --- leaf checks --------------------------------------------------------------------


def _check_plain(expected: Any, actual: Any, frame: _Frame) -> None:
    __tracebackhide__ = True
    both_nan = (
        isinstance(expected, float)
        and isinstance(actual, float)
        and math.isnan(expected)
        and math.isnan(actual)
    )
    if both_nan or expected == actual:
        return
    raise frame.error(f"{frame.expected_name} {expected!r}, engine {actual!r}")


def _check_tensor(
    expected: torch.Tensor,
    actual: torch.Tensor,
    frame: _Frame,
    tolerance: Tolerance,
    reference: Callable[[], Any] | None,
) -> LeafStats:
    __tracebackhide__ = True
    for attribute in ("shape", "dtype", "device", "layout"):
        want, got = getattr(expected, attribute), getattr(actual, attribute)
        if want != got:
            tail = f"{frame.expected_name} {want}, engine {got}"
            raise frame.error(tail, attribute)
    want_t, got_t = _plain(expected), _plain(actual)
    if want_t.is_floating_point() or want_t.is_complex():
        return _check_inexact(want_t, got_t, frame, tolerance, reference)
    return _check_exact(want_t, got_t, frame)


def _check_exact(expected: torch.Tensor, actual: torch.Tensor, frame: _Frame) -> LeafStats:
    __tracebackhide__ = True
    mismatch = expected != actual
    diff = _abs_diff(expected, actual)
    count = int(mismatch.sum())
    if count:
        summary = (
            f"{count} of {expected.numel()} elements differ (exact comparison for {expected.dtype})"
        )
        raise frame.error(summary, figures=_figures(expected, actual, mismatch, diff, frame))
    return _stats(frame.location, expected, diff)


def _check_inexact(
    expected: torch.Tensor,
    actual: torch.Tensor,
    frame: _Frame,
    tolerance: Tolerance,
    reference: Callable[[], Any] | None,
) -> LeafStats:
    __tracebackhide__ = True
    _check_nan_positions(expected, actual, frame)
    rtol, atol = tolerance.resolve(expected.dtype, frame.location)
    diff = _abs_diff(expected, actual)
    mismatch = _beyond_tolerance(expected, actual, diff, rtol, atol)
    count = int(mismatch.sum())
    if count == 0:
        return _stats(frame.location, expected, diff, rtol, atol)

    rescue_line = ""
    final = tolerance.is_final(expected.dtype, frame.location)
    if not final and expected.is_floating_point() and reference is not None:
        passed, rescue_line = _fp64_rescue(expected, actual, reference)
        if passed:
            stats = _stats(frame.location, expected, diff, rtol, atol)
            return replace(stats, rescued_by_fp64=True)
    summary = f"{count} of {expected.numel()} elements beyond rtol={rtol:g}, atol={atol:g}"
    raise frame.error(
        summary,
        figures=_figures(expected, actual, mismatch, diff, frame, rtol=rtol, atol=atol),
        tolerance=tolerance.as_json(expected.dtype, frame.location),
        notes=[rescue_line] if rescue_line else None,
    )


def _check_nan_positions(expected: torch.Tensor, actual: torch.Tensor, frame: _Frame) -> None:
    __tracebackhide__ = True
    one_sided = expected.isnan() != actual.isnan()
    count = int(one_sided.sum())
    if count == 0:
        return
    index = _unravel(int(one_sided.reshape(-1).nonzero()[0]), expected.shape)
    tail = (
        f"{count} of {expected.numel()} elements are NaN on one side only, first at index "
        f"{index}: {frame.expected_name}={_fmt(expected[index])} engine={_fmt(actual[index])}"
    )
    raise frame.error(tail)


def _beyond_tolerance(
    expected: torch.Tensor, actual: torch.Tensor, diff: torch.Tensor, rtol: float, atol: float
) -> torch.Tensor:
    """Elementwise negation of assert_close's test, with NaN already known to line up."""
    want, got = _wide(expected), _wide(actual)
    equal = (want == got) | (want.isnan() & got.isnan())
    # infinities pass only through `equal`: an infinite bound would let anything match
    finite = want.isfinite() & got.isfinite()
    close = equal | (finite & (diff <= atol + rtol * want.abs()))
    return ~close


def _fp64_rescue(
    expected: torch.Tensor, actual: torch.Tensor, reference: Callable[[], Any]
) -> tuple[bool, str]:
    """Apply ``same()``'s RMSE test against the float64 reference; return (passed, detail line)."""
    # the RMSE only sees finite elements, so anything non-finite must already match
    nonfinite = ~(expected.isfinite() & actual.isfinite())
    if bool((nonfinite & (expected != actual) & ~expected.isnan()).any()):
        return False, "fp64 check skipped: infinities differ"
    try:
        ref = reference()
    except Exception as exc:  # a broken reference only means there is nothing to rescue with
        reason = str(exc) if isinstance(exc, _NoReference) else f"{type(exc).__name__}: {exc}"
        return False, f"fp64 check unavailable: {reason}"
    usable = isinstance(ref, torch.Tensor) and ref.dtype == torch.float64
    if not usable or ref.shape != expected.shape:
        found = _type_name(ref)
        if isinstance(ref, torch.Tensor):
            found = f"{ref.dtype} {tuple(ref.shape)}"
        wanted = f"float64 {tuple(expected.shape)}"
        return False, f"fp64 check unavailable: reference leaf is {found}, not {wanted}"
    ref = _plain(ref).to(device=expected.device)
    want, got = expected.to(torch.float64), actual.to(torch.float64)
    finite = ref.isfinite() & want.isfinite() & got.isfinite()
    eager_error = _rmse(ref[finite], want[finite])
    engine_error = _rmse(ref[finite], got[finite])
    multiplier = _rescue_multiplier(expected.dtype, ref.numel())
    bound = multiplier * eager_error + _RESCUE_FLOOR
    line = (
        f"fp64 check: rmse(engine vs fp64)={engine_error:.3g} exceeds "
        f"{multiplier:g} * rmse(eager vs fp64)={eager_error:.3g} + {_RESCUE_FLOOR:g} = {bound:.3g}"
    )
    return engine_error <= bound, line


def _rescue_multiplier(dtype: torch.dtype, numel: int) -> float:
    """same()'s multiplier with use_larger_multiplier_for_smaller_tensor.

    Rounding noise dominates the RMSE of small tensors, so they get more slack.
    """
    if numel <= 10:
        return 10.0
    if numel <= 500:
        return 8.0
    if numel < 1000 or dtype in (torch.float16, torch.bfloat16):
        return 3.0
    return 2.0


def _rmse(ref: torch.Tensor, res: torch.Tensor) -> float:
    if ref.numel() == 0:
        return 0.0
    return float(torch.sqrt(torch.mean(torch.square(ref - res))))


# --- figures ------------------------------------------------------------------------


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """Detached, dense, with lazy conjugate/negative bits applied."""
    plain = tensor.detach()
    if plain.layout != torch.strided:
        plain = plain.to_dense()
    return plain.resolve_conj().resolve_neg()


def _wide(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.is_complex():
        return tensor.to(torch.complex128)
    return tensor.to(torch.float64)


def _abs_diff(expected: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
    """|actual - expected| in float64, 0 where both agree (equal infinities, both NaN)."""
    want, got = _wide(expected), _wide(actual)
    agree = (want == got) | (want.isnan() & got.isnan())
    return torch.where(agree, 0.0, (got - want).abs())


def _rel_diff(expected: torch.Tensor, diff: torch.Tensor) -> torch.Tensor:
    magnitude = _wide(expected).abs()
    measurable = (magnitude != 0) & magnitude.isfinite()
    return torch.where(measurable, diff / torch.where(measurable, magnitude, 1.0), 0.0)


def _stats(
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
        allowed = atol + rtol * _wide(expected).abs()
        ratio = torch.where(diff == 0, 0.0, diff / torch.where(allowed > 0, allowed, 1.0))
        ratio = torch.where((allowed == 0) & (diff > 0), torch.inf, ratio)
        used = float(ratio.max())
    return LeafStats(location, float(diff.max()), float(_rel_diff(expected, diff).max()), used)


def _figures(
    expected: torch.Tensor,
    actual: torch.Tensor,
    mismatch: torch.Tensor,
    diff: torch.Tensor,
    frame: _Frame,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> Figures:
    # -1 keeps matching elements out of the argmax; every mismatch has diff > 0
    worst = _unravel(int(torch.where(mismatch, diff, -1.0).argmax()), expected.shape)
    stats = _stats(frame.location, expected, diff)
    finite_diff = diff[diff.isfinite()] if diff.is_floating_point() else diff
    needed: tuple[float | None, float | None] = (None, None)
    if rtol is not None and atol is not None:
        needed = _tolerances_needed(expected, actual, diff, rtol, atol)
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
        expected_value=_fmt(expected[worst]),
        actual_value=_fmt(actual[worst]),
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
    """``(elements beyond tolerance, max abs error, max rel error)`` of two tensors of one
    shape, judged element by element as :func:`compare_leaf` judges them (exact for
    integer and bool dtypes, ``tolerance`` at ``location`` for the others; no fp64 check).
    """
    want, got = _plain(expected), _plain(actual)
    diff = _abs_diff(want, got)
    if want.is_floating_point() or want.is_complex():
        rtol, atol = tolerance.resolve(want.dtype, location)
        mismatch = _beyond_tolerance(want, got, diff, rtol, atol)
    else:
        mismatch = want != got
    stats = _stats(location, want, diff)
    return int(mismatch.sum()), stats.max_abs, stats.max_rel


def _tolerances_needed(
    expected: torch.Tensor, actual: torch.Tensor, diff: torch.Tensor, rtol: float, atol: float
) -> tuple[float, float]:
    """The smallest rtol (same atol) and atol (same rtol) under which every element passes.

    Infinite where no finite value would do (an element infinite on one side, or a
    difference at an element eager computes as 0, for rtol).
    """
    want, got = _wide(expected), _wide(actual)
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


def _unravel(flat: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return tuple(reversed(index))


def _fmt(element: torch.Tensor) -> str:
    value = element.item()
    if isinstance(value, float) and element.dtype != torch.float64:
        # enough digits to round-trip float32 without float64 noise
        return f"{value:.9g}"
    return repr(value)


# --- assert_values / assert_unchanged helpers ---------------------------------------


def _as_expected_tensor(expected: Any, actual: torch.Tensor, frame: _Frame) -> torch.Tensor:
    __tracebackhide__ = True
    try:
        raw = torch.as_tensor(expected, device=actual.device)
    except (TypeError, ValueError, RuntimeError) as exc:
        tail = f"expected value {expected!r} is not tensor-like ({exc})"
        raise frame.error(tail) from None
    converted = raw.to(actual.dtype)
    # converting 0.5 to an integer dtype would silently expect 0
    lossy = not (actual.is_floating_point() or actual.is_complex()) and not torch.equal(
        converted.to(raw.dtype), raw
    )
    if lossy:
        tail = f"expected value {expected!r} does not fit the engine's dtype {actual.dtype}"
        raise frame.error(tail)
    return converted


def _bitwise_changed(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Per-element mask of changed bits; two NaNs count as unchanged whatever their payload."""
    itemsize = before.element_size()
    old = before.contiguous().reshape(-1).view(torch.uint8).reshape(-1, itemsize)
    new = after.contiguous().reshape(-1).view(torch.uint8).reshape(-1, itemsize)
    changed = (old != new).any(dim=1).reshape(before.shape)
    if before.is_floating_point() or before.is_complex():
        changed &= ~(before.isnan() & after.isnan())
    return changed
