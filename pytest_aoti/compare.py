"""Comparing the AOTInductor engine's results with eager PyTorch's: tensors agree exactly in shape,
dtype and device, ints and bools are equal, floats follow ``assert_close`` or pass the fp64 rule
(the engine's RMSE against a float64 eager run at most a few times eager's own)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
from torch.utils._pytree import keystr, tree_flatten, tree_flatten_with_path

from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Figures, Finding, FindingKind
from pytest_aoti.tolerance import (
    LeafStats,
    NoReference,
    Tolerance,
    abs_diff,
    beyond_tolerance,
    default_tolerance,
    format_element,
    fp64_rescue,
    leaf_figures,
    leaf_stats,
    mismatch_counts,
    plain_tensor,
    type_name,
    unravel,
    widened,
)

_EAGER = "eager"
# the defaults of the comparisons: the dtype defaults, the hook and the options unset
_NO_TOLERANCE_SET = Tolerance()

_LeafStats = LeafStats


@dataclass(frozen=True)
class _Frame:
    """Where a comparison happens and how its failure messages are worded."""

    location: str
    context: str
    expected_name: str  # "eager", or "expected" for values the test gave
    phrase: str  # what the first line says went wrong
    kind: FindingKind = FindingKind.OUTPUT

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
    kind = FindingKind.OUTPUT if location.startswith("output") else FindingKind.MUTATED_INPUT
    return _Frame(location, context, _EAGER, "differs between eager and the AOTI engine", kind)


def compare_trees(
    expected: Any,
    actual: Any,
    *,
    what: str,
    context: str = "",
    tolerance: Tolerance = _NO_TOLERANCE_SET,
    reference: Callable[[], Any] | None = None,
    scalar_dtypes: Sequence[torch.dtype | None] = (),
    accumulates: Sequence[int] = (),
) -> list[LeafStats]:
    """Compare eager's pytree ``expected`` with the engine's ``actual``; raise ``AotiCheckError`` at
    the first leaf that differs. ``what`` labels the root ("output", "input 'x'"); ``reference``
    returns the float64 eager pytree (called at most once, if needed); per leaf,
    ``scalar_dtypes`` and ``accumulates`` are :func:`compare_leaf`'s."""
    __tracebackhide__ = True
    expected_leaves, expected_spec = tree_flatten_with_path(expected)
    actual_leaves, actual_spec = tree_flatten_with_path(actual)
    if expected_spec != actual_spec:
        frame = _eager_frame(what, context)
        tail = f"eager {_describe(expected)}, engine {_describe(actual)}"
        raise frame.error(tail, "structure")

    lazy = _lazy_reference(reference, expected_spec) if reference is not None else None
    return [
        compare_leaf(
            want,
            got,
            location=f"{what}{keystr(path)}",
            context=context,
            tolerance=tolerance,
            reference=functools.partial(lazy, index) if lazy is not None else None,
            scalar_dtype=scalar_dtypes[index] if index < len(scalar_dtypes) else None,
            accumulates=accumulates[index] if index < len(accumulates) else 0,
        )
        for index, ((path, want), (_, got)) in enumerate(zip(expected_leaves, actual_leaves))
    ]


def compare_leaf(
    expected: Any,
    actual: Any,
    *,
    location: str,
    context: str = "",
    tolerance: Tolerance = _NO_TOLERANCE_SET,
    reference: Callable[[], Any] | None = None,
    scalar_dtype: torch.dtype | None = None,
    accumulates: int = 0,
) -> LeafStats:
    """Compare one eager leaf with the engine's; raise ``AotiCheckError`` if they differ. A
    ``reference`` that raises is ignored. A Python float uses ``scalar_dtype``'s tolerance
    (float64 where unknown), an int or bool is exact; ``accumulates``: the rounding the fp64 rule
    allows."""
    __tracebackhide__ = True
    frame = _eager_frame(location, context)
    expected_is_tensor = isinstance(expected, torch.Tensor)
    if _is_boxed_number(expected, actual):
        # an engine returns a Python number as a 0-dim tensor, which must hold exactly it
        actual = actual.item()
    elif expected_is_tensor != isinstance(actual, torch.Tensor):
        raise frame.error(f"eager {type_name(expected)}, engine {type_name(actual)}", "type")
    if not expected_is_tensor:
        return _check_plain(expected, actual, frame, tolerance, scalar_dtype)
    return _check_tensor(expected, actual, frame, tolerance, reference, accumulates)


def assert_values(
    expected: Any,
    actual: Any,
    *,
    location: str,
    context: str = "",
    tolerance: Tolerance = _NO_TOLERANCE_SET,
) -> LeafStats:
    """Check the engine left ``actual`` holding what the test expects (a tensor, number or nested
    list, converted to its dtype and device, never broadcast). No fp64 check."""
    __tracebackhide__ = True
    frame = _Frame(location, context, "expected", "holds the wrong value after the AOTI engine ran")
    if not isinstance(actual, torch.Tensor):
        raise frame.error(f"engine left {type_name(actual)}, not a tensor")
    want = _as_expected_tensor(expected, actual, frame)
    return _check_tensor(want, actual, frame, tolerance, None)


def assert_unchanged(
    before: torch.Tensor, after: torch.Tensor, *, location: str, context: str = ""
) -> None:
    """Check an unmutated input is bitwise unchanged (NaN equal to NaN)."""
    __tracebackhide__ = True
    frame = _Frame(
        location,
        context,
        "before",
        "was modified by the AOTI engine although the program does not mutate it",
        FindingKind.UNTOUCHED_INPUT,
    )
    for attribute in ("shape", "dtype", "device", "layout"):
        old, new = getattr(before, attribute), getattr(after, attribute)
        if old != new:
            raise frame.error(f"{attribute} changed from {old} to {new}")
    old_t, new_t = plain_tensor(before), plain_tensor(after)
    if torch.equal(dense_bytes(old_t), dense_bytes(new_t)):
        return  # every bit as it was: the mask below is for what changed
    changed = _bitwise_changed(old_t, new_t)
    count = int(changed.sum())
    if count == 0:
        return
    index = unravel(int(changed.reshape(-1).nonzero()[0]), old_t.shape)
    details = [
        f"shape {tuple(old_t.shape)}, dtype {old_t.dtype}",
        f"first change at index {index}: before={format_element(old_t[index])} after={format_element(new_t[index])}",
    ]
    raise frame.error(f"{count} of {old_t.numel()} elements changed", details=details)


def same_answers(first: Any, second: Any) -> bool:
    """Whether two answers of one program are the same: one tree structure, and leaf by leaf
    equal values (tensors of one shape and dtype, NaN where NaN was)."""
    leaves, spec = tree_flatten(first)
    others, other_spec = tree_flatten(second)
    return spec == other_spec and all(map(_same_leaf, leaves, others))


@dataclass(frozen=True)
class Comparison:
    """Eager's answers against another's under one :class:`~pytest_aoti.api.Tolerance`, as the
    core's checks compare them: a difference raises ``AotiCheckError`` with its finding."""

    # the error figures of one compared leaf, as :meth:`trees` returns them; an alias, not a
    # dataclass field (hence no annotation at run time)
    if TYPE_CHECKING:
        LeafStats: TypeAlias = _LeafStats  # type: ignore[misc]
    else:
        LeafStats = _LeafStats

    tolerance: Tolerance = _NO_TOLERANCE_SET

    def trees(
        self,
        expected: Any,
        actual: Any,
        *,
        what: str,
        context: str = "",
        reference: Callable[[], Any] | None = None,
        scalar_dtypes: Sequence[torch.dtype | None] = (),
        accumulates: Sequence[int] = (),
    ) -> list[LeafStats]:
        """Compare two pytrees leaf by leaf (:func:`compare_trees`); ``what`` labels the root
        (``"output"``), ``reference`` returns the float64 eager pytree (called once, if needed)."""
        __tracebackhide__ = True
        return compare_trees(
            expected,
            actual,
            what=what,
            context=context,
            tolerance=self.tolerance,
            reference=reference,
            scalar_dtypes=scalar_dtypes,
            accumulates=accumulates,
        )

    def leaf(
        self,
        expected: Any,
        actual: Any,
        *,
        location: str,
        context: str = "",
        reference: Callable[[], Any] | None = None,
    ) -> LeafStats:
        """Compare one leaf (:func:`compare_leaf`)."""
        __tracebackhide__ = True
        return compare_leaf(
            expected,
            actual,
            location=location,
            context=context,
            tolerance=self.tolerance,
            reference=reference,
        )

    def mismatches(
        self, expected: torch.Tensor, actual: torch.Tensor, location: str = ""
    ) -> tuple[int, float, float]:
        """``(elements beyond tolerance, max abs error, max rel error)`` of two same-shape
        tensors, judged per element as :meth:`leaf` does (without the fp64 check)."""
        return mismatch_counts(expected, actual, self.tolerance, location)

    @staticmethod
    def same(first: Any, second: Any) -> bool:
        """Whether two answers of one program are the same: one tree structure, and leaf by
        leaf equal values (tensors of one shape and dtype, NaN where NaN was)."""
        return same_answers(first, second)

    @staticmethod
    def differences(expected: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
        """|actual - expected| in float64, 0 where both agree (equal infinities, both NaN)."""
        return abs_diff(expected, actual)


def _same_leaf(one: Any, other: Any) -> bool:
    if not (isinstance(one, torch.Tensor) and isinstance(other, torch.Tensor)):
        return bool(one == other)
    if one.shape != other.shape or one.dtype != other.dtype:
        return False
    return torch.equal(one, other) or (
        one.is_floating_point() and bool(torch.isclose(one, other, 0, 0, equal_nan=True).all())
    )


def _lazy_reference(compute: Callable[[], Any], spec: Any) -> Callable[[int], Any]:
    """The leaf at an index of the tree-level fp64 reference, computed once on first demand;
    ``NoReference`` saying why there is none."""

    @functools.cache
    def leaves() -> list[Any] | str:  # the leaves, or why there are none
        try:
            tree = compute()
        except NoReference as exc:  # no reference on purpose: its reason as it is
            return str(exc)
        except Exception as exc:  # the reference is a bonus; its failure must not mask the mismatch
            return f"computing it raised {type(exc).__name__}: {exc}"
        found, found_spec = tree_flatten(tree)
        return found if found_spec == spec else "it has a different structure than the output"

    def leaf(index: int) -> Any:
        loaded = leaves()
        if isinstance(loaded, str):
            raise NoReference(loaded)
        return loaded[index]

    return leaf


def _describe(tree: Any) -> str:
    text = _describe_node(tree)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe_node(node: Any) -> str:
    if isinstance(node, dict):
        inner = ", ".join(f"{key!r}: {_describe_node(value)}" for key, value in node.items())
        return f"{{{inner}}}"
    if not isinstance(node, (list, tuple)):
        return type_name(node)
    inner = ", ".join(_describe_node(value) for value in node)
    if isinstance(node, list):
        return f"[{inner}]"
    if hasattr(node, "_fields"):  # a namedtuple
        return f"{type(node).__name__}({inner})"
    return f"({inner},)" if len(node) == 1 else f"({inner})"


def _is_boxed_number(expected: Any, actual: Any) -> bool:
    if not (isinstance(actual, torch.Tensor) and actual.dim() == 0):
        return False
    if isinstance(expected, bool):  # a bool is an int to Python, not to the engine
        return actual.dtype == torch.bool
    return isinstance(expected, (int, float)) and actual.is_floating_point() == isinstance(
        expected, float
    )


def _check_plain(
    expected: Any, actual: Any, frame: _Frame, tolerance: Tolerance, dtype: torch.dtype | None
) -> LeafStats:
    """A Python number: a float within its source dtype's tolerance, anything else equal."""
    __tracebackhide__ = True
    both_nan = (
        isinstance(expected, float)
        and isinstance(actual, float)
        and math.isnan(expected)
        and math.isnan(actual)
    )
    if both_nan or expected == actual:
        return LeafStats(frame.location, 0.0, 0.0)
    floats = isinstance(expected, float) and isinstance(actual, (float, int))
    if floats and not isinstance(actual, bool) and math.isfinite(expected):
        rtol, atol = tolerance.resolve(dtype or torch.float64, frame.location)
        error, allowed = abs(float(actual) - expected), atol + rtol * abs(expected)
        if error <= allowed:
            relative = error / abs(expected) if expected else 0.0
            return LeafStats(frame.location, error, relative, error / allowed if allowed else 0.0)
        raise frame.error(
            f"{frame.expected_name} {expected!r}, engine {actual!r} (beyond rtol={rtol:g}, "
            f"atol={atol:g}: a Python float read from {dtype or torch.float64})"
        )
    raise frame.error(f"{frame.expected_name} {expected!r}, engine {actual!r}")


def _check_tensor(
    expected: torch.Tensor,
    actual: torch.Tensor,
    frame: _Frame,
    tolerance: Tolerance,
    reference: Callable[[], Any] | None,
    accumulates: int = 0,
) -> LeafStats:
    __tracebackhide__ = True
    for attribute in ("shape", "dtype", "device", "layout"):
        want, got = getattr(expected, attribute), getattr(actual, attribute)
        if want != got:
            raise frame.error(f"{frame.expected_name} {want}, engine {got}", attribute)
    want_t, got_t = plain_tensor(expected), plain_tensor(actual)
    if torch.equal(dense_bytes(want_t), dense_bytes(got_t)):
        # every bit alike (an input no call writes, an exact output): nothing differs, no
        # element is NaN on one side only, and every figure below would be zero
        return LeafStats(frame.location, 0.0, 0.0)
    if want_t.is_floating_point() or want_t.is_complex():
        return _check_inexact(want_t, got_t, frame, tolerance, reference, accumulates)
    return _check_exact(want_t, got_t, frame)


def _check_exact(expected: torch.Tensor, actual: torch.Tensor, frame: _Frame) -> LeafStats:
    __tracebackhide__ = True
    mismatch = expected != actual
    diff = abs_diff(expected, actual)
    count = int(mismatch.sum())
    if count:
        raise frame.error(
            f"{count} of {expected.numel()} elements differ (exact comparison for {expected.dtype})",
            figures=leaf_figures(expected, actual, mismatch, diff, frame.location),
        )
    return leaf_stats(frame.location, expected, diff)


def _check_inexact(
    expected: torch.Tensor,
    actual: torch.Tensor,
    frame: _Frame,
    tolerance: Tolerance,
    reference: Callable[[], Any] | None,
    accumulates: int,
) -> LeafStats:
    __tracebackhide__ = True
    rtol, atol = tolerance.resolve(expected.dtype, frame.location)
    # widened once: each helper's widening of a float64 tensor is then no copy
    want, got = widened(expected), widened(actual)
    passed = _passed_finite(want, got, frame.location, rtol, atol)
    if passed is not None:
        return passed
    _check_nan_positions(expected, actual, frame)
    diff = abs_diff(want, got)
    mismatch = beyond_tolerance(want, got, diff, rtol, atol)
    count = int(mismatch.sum())
    if count == 0:
        return leaf_stats(frame.location, want, diff, rtol, atol)
    rescue_line = ""
    final = tolerance.is_final(expected.dtype, frame.location)
    if not final and expected.is_floating_point() and reference is not None:
        rescue = fp64_rescue(expected, actual, reference, accumulates)
        rescue_line = rescue.line
        if rescue.passed:
            return replace(
                leaf_stats(frame.location, expected, diff, rtol, atol),
                rescued_by_fp64=True,
                rounded_apart=count if rescue.engine_closer else 0,
                dtype=str(expected.dtype),
            )
    error = frame.error(
        f"{count} of {expected.numel()} elements beyond rtol={rtol:g}, atol={atol:g}",
        figures=leaf_figures(
            expected, actual, mismatch, diff, frame.location, rtol=rtol, atol=atol
        ),
        tolerance=tolerance.as_json(expected.dtype, frame.location),
        notes=[rescue_line] if rescue_line else None,
    )
    if final:
        note = _within_default(expected, actual, diff, rtol, atol)
        if note:
            error = error.amended(replace(error.finding, tolerance_note=note))
    raise error


def _passed_finite(
    want: torch.Tensor, got: torch.Tensor, location: str, rtol: float, atol: float
) -> LeafStats | None:
    """The figures of a real leaf whose every element is finite on both sides and within
    tolerance, in a few passes and one read back (what a passing draw costs); None where it
    is not so (the full comparison then says what differs)."""
    if want.numel() == 0 or want.is_complex():
        return None  # the full comparison's figures of an empty or a complex leaf
    diff = (got - want).abs()
    magnitude = want.abs()
    allowed = magnitude * rtol + atol
    nonzero = magnitude != 0
    relative = torch.where(nonzero, diff / torch.where(nonzero, magnitude, 1.0), 0.0)
    if atol > 0:  # no zero allowance
        used = diff / allowed
    else:  # as leaf_stats reads them: within tolerance, a zero allowance means a zero difference
        used = torch.where(allowed > 0, diff / torch.where(allowed > 0, allowed, 1.0), 0.0)
    beyond, largest, most_relative, most_used = torch.stack(
        [(diff > allowed).any().to(diff.dtype), diff.max(), relative.max(), used.max()]
    ).tolist()
    # a finite largest difference: every element finite on both sides (inf - x and NaN are
    # not; the max carries a NaN)
    if beyond or not math.isfinite(largest):
        return None
    return LeafStats(location, largest, most_relative, most_used)


def _within_default(
    expected: torch.Tensor, actual: torch.Tensor, diff: torch.Tensor, rtol: float, atol: float
) -> str:
    """Under a tolerance tighter than the dtype default: a note if the difference is within it."""
    default_rtol, default_atol = default_tolerance(expected.dtype)
    if rtol >= default_rtol and atol >= default_atol:
        return ""
    if bool(beyond_tolerance(expected, actual, diff, default_rtol, default_atol).any()):
        return ""
    chosen = "zero" if rtol == 0 and atol == 0 else f"rtol={rtol:g}, atol={atol:g}"
    return (
        f"within the dtype default (rtol={default_rtol:g}, atol={default_atol:g}); you set {chosen}"
    )


def _check_nan_positions(expected: torch.Tensor, actual: torch.Tensor, frame: _Frame) -> None:
    __tracebackhide__ = True
    one_sided = expected.isnan() != actual.isnan()
    count = int(one_sided.sum())
    if count == 0:
        return
    index = unravel(int(one_sided.reshape(-1).nonzero()[0]), expected.shape)
    raise frame.error(
        f"{count} of {expected.numel()} elements are NaN on one side only, first at index "
        f"{index}: {frame.expected_name}={format_element(expected[index])} engine={format_element(actual[index])}"
    )


def _as_expected_tensor(expected: Any, actual: torch.Tensor, frame: _Frame) -> torch.Tensor:
    __tracebackhide__ = True
    try:
        raw = torch.as_tensor(expected, device=actual.device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise frame.error(f"expected value {expected!r} is not tensor-like ({exc})") from None
    converted = raw.to(actual.dtype)
    # converting 0.5 to an integer dtype would silently expect 0
    lossy = not (actual.is_floating_point() or actual.is_complex()) and not torch.equal(
        converted.to(raw.dtype), raw
    )
    if lossy:
        raise frame.error(
            f"expected value {expected!r} does not fit the engine's dtype {actual.dtype}"
        )
    return converted


def dense_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The elements' bytes in order, as one flat uint8 tensor (a view where they lie dense)."""
    if tensor.is_contiguous() and tensor.numel() and tensor.dim() and tensor.stride(-1) == 1:
        return tensor.reshape(-1).view(torch.uint8)
    # a fresh dense copy: contiguous() keeps a one-element or expanded view's strides
    return tensor.new_empty(tensor.numel()).copy_(tensor.reshape(-1)).view(torch.uint8)


def _bitwise_changed(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Per-element mask of changed bits; two NaNs count as unchanged whatever their payload."""
    itemsize = before.element_size()
    old = dense_bytes(before).reshape(-1, itemsize)
    new = dense_bytes(after).reshape(-1, itemsize)
    changed = (old != new).any(dim=1).reshape(before.shape)
    if before.is_floating_point() or before.is_complex():
        changed &= ~(before.isnan() & after.isnan())
    return changed
