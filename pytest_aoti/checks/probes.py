"""Deployment probes: call the raw engine the way deployed callers will, and judge it.

A passing check certifies the engine on the test's own tensors. A deployed engine gets
others: channels_last images, cropped views, another batch size, another value of a
Python scalar, aliased tensors. An AOTInductor engine checks none of that unless the
serving process sets ``AOTI_RUNTIME_CHECK_INPUTS=1``. Each probe calls the raw engine
(without the plugin's guards) on a variant of the example, compares it with eager on the
same variant, and judges it against the exported program's own contract (the guards of
``exported.module()``, and the dtype and device every input was exported with):

- ``ok``: the engine matches eager;
- ``refused``: the engine raises an error;
- ``wrong``: the exported program accepts the variant and the engine silently returns
  something else than eager;
- ``unguarded``: the exported program refuses the variant, the engine runs it anyway and
  returns something else (every engine without input checks shares this hazard).

Every engine call runs in one child process per program (:mod:`probe_child`): a variant
may make the engine read out of bounds, and on CUDA an illegal access poisons the
process. The same child loads the package a second time with the engine's input checks
on, which tells whether ``AOTI_RUNTIME_CHECK_INPUTS=1`` would have refused the variant.
Outcomes are a property of the engine: they are kept with the package (see
:class:`ProbeCache`), so a warm run probes nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.errors import AotiCheckError, AotiUsageError

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compare import Tolerance
    from pytest_aoti.compiling.program import AotiProgram

POLICIES = ("off", "report", "fail")
OUTCOMES = ("ok", "refused", "wrong", "unguarded")
HAZARDS = ("wrong", "unguarded")

LAYOUT_KINDS = ("channels_last", "channels_last_3d", "permuted", "strided_slice", "storage_offset")
KINDS = (*LAYOUT_KINDS, "size", "dtype", "device", "scalar", "aliased")
"""Variant kinds; ``probes_skip`` names these."""

PROBE_FORMAT = 1
"""Version of the cached outcomes: part of their key."""

CHILD_TIMEOUT = 120.0
"""Seconds one child process may run (startup and every job together)."""

_CHILD = Path(__file__).with_name("probe_child.py")


@dataclass(frozen=True)
class ProbeOutcome:
    """How the raw engine handled one variant of the example."""

    input: str
    """The user input varied (``"x"``; ``"x, y"`` for aliasing)."""
    variant: str
    """``channels_last``, ``size[0]=7``, ``value=3.5``, ``same tensor`` ..."""
    outcome: str
    """One of :data:`OUTCOMES`."""
    kind: str = ""
    """One of :data:`KINDS`."""
    max_abs: float | None = None
    max_rel: float | None = None
    refused_with_checks: bool | None = None
    """Whether the engine refuses the variant with ``AOTI_RUNTIME_CHECK_INPUTS=1``."""
    remedy: str = ""
    detail: str = ""
    """The engine's error, a shape mismatch, a crash: what the figures do not say."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("max_abs", "max_rel"):  # JSON holds no inf or NaN
            value = data[name]
            if isinstance(value, float) and not math.isfinite(value):
                data[name] = str(value)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProbeOutcome:
        names = set(cls.__dataclass_fields__)
        values = {key: value for key, value in data.items() if key in names}
        for name in ("max_abs", "max_rel"):
            if isinstance(values.get(name), str):
                values[name] = float(values[name])
        return cls(**values)

    def figures(self) -> str:
        """``max abs error 5.37, max rel error 2.1`` or what stands in for figures."""
        if self.max_abs is None:
            return self.detail or "no figures"
        rel = "" if self.max_rel is None else f", max rel error {self.max_rel:.3g}"
        return f"max abs error {self.max_abs:.3g}{rel}"


@dataclass(frozen=True)
class ProbeReport:
    """The probes of one program."""

    outcomes: tuple[ProbeOutcome, ...]
    cached: bool = False
    """True when the outcomes came from the cache: no engine was called."""
    seconds: float = 0.0
    skipped: tuple[str, ...] = ()
    """Variants eager itself rejects: not probed."""
    error: str = ""
    """Why the probes could not run (a passed check never fails for it)."""

    @property
    def wrong(self) -> list[ProbeOutcome]:
        return [outcome for outcome in self.outcomes if outcome.outcome == "wrong"]

    @property
    def unguarded(self) -> list[ProbeOutcome]:
        return [outcome for outcome in self.outcomes if outcome.outcome == "unguarded"]

    def to_json(self) -> list[dict[str, Any]]:
        return [outcome.to_json() for outcome in self.outcomes]


class ProbeCache(Protocol):
    """Where outcomes are kept with the package: the registry's sidecar data."""

    def sidecar(self, key: str, name: str) -> dict[str, Any] | None: ...

    def keep_sidecar(self, key: str, name: str, data: Mapping[str, Any]) -> None: ...


# --- options ------------------------------------------------------------------------------


def check_policy(value: Any, where: str = "probes") -> str:
    """``off``, ``report`` or ``fail``; anything else is a usage error."""
    if not isinstance(value, str) or value.strip().lower() not in POLICIES:
        raise AotiUsageError(f"{where} must be one of {', '.join(POLICIES)}, got {value!r}")
    return value.strip().lower()


def check_skip(value: Any) -> dict[str, frozenset[str]]:
    """``probes_skip`` as ``{input name or "*": kinds}``.

    Accepted: a set of kinds for every input (``{"channels_last"}``), or a dict of input
    name to a set of kinds (``{"x": {"channels_last", "size"}}``); ``"*"`` stands for all
    kinds.
    """
    if value is None:
        return {}

    def kinds(names: Any, where: str) -> frozenset[str]:
        if isinstance(names, str):
            names = {names}
        if not isinstance(names, Iterable):
            raise AotiUsageError(f"probes_skip{where} must be a set of variant kinds")
        chosen = frozenset(str(name) for name in names)
        unknown = sorted(chosen - set(KINDS) - {"*"})
        if unknown:
            raise AotiUsageError(
                f"probes_skip{where} names unknown variant kind(s) {', '.join(unknown)}; "
                f"known: {', '.join(KINDS)} (or * for all)"
            )
        return frozenset(KINDS) if "*" in chosen else chosen

    if isinstance(value, Mapping):
        return {str(name): kinds(names, f"[{name!r}]") for name, names in value.items()}
    return {"*": kinds(value, "")}


# --- variants -----------------------------------------------------------------------------


@dataclass
class Variant:
    """One probe input set: the example with one input changed."""

    input: str
    variant: str
    kind: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outside_contract: bool = False
    """The exported program declares something else (dtype, device) than this variant has,
    whether or not ``exported.module()`` checks it."""
    risky: bool = False
    """The engine may read or write out of bounds (smaller size, narrower dtype, another
    device)."""
    eager_inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    """What eager runs on instead of the variant: the example itself, for a device
    variant (the caller means the same values; eager cannot mix devices)."""


def choose_variants(
    program: AotiProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    skip: Mapping[str, frozenset[str]],
) -> list[Variant]:
    """The variants worth probing for this program and example: layouts by rank, sizes by
    the exported dims, dtypes of floating inputs, devices where the program has one,
    values of Python scalars, aliasing where an input is mutated. Inputs are copies;
    the caller's tensors are never touched."""
    import torch
    import torch.utils._pytree as pytree

    from pytest_aoti.checks.aliasing import _ordered_kwargs, aliased_inputs
    from pytest_aoti.checks.parity import clone_tree

    exported = program.exported
    names = _user_input_names(exported)
    leaves, spec = pytree.tree_flatten(clone_tree((tuple(args), _ordered_kwargs(exported, kwargs))))
    if len(leaves) != len(names):
        return []
    dims = _exported_dims(exported)

    def skipped(name: str, kind: str) -> bool:
        return kind in skip.get(name, frozenset()) or kind in skip.get("*", frozenset())

    def make(changes: Mapping[int, Any], name: str, variant: str, kind: str, **extra: Any) -> None:
        fresh = [changes.get(index, leaf) for index, leaf in enumerate(leaves)]
        new_args, new_kwargs = pytree.tree_unflatten(fresh, spec)
        variants.append(Variant(name, variant, kind, tuple(new_args), dict(new_kwargs), **extra))

    example_args, example_kwargs = pytree.tree_unflatten(leaves, spec)
    example = (tuple(example_args), dict(example_kwargs))

    variants: list[Variant] = []
    for index, (name, leaf) in enumerate(zip(names, leaves)):
        if isinstance(leaf, torch.Tensor):
            if leaf.layout != torch.strided or leaf.numel() < 2:
                continue
            for kind, tensor in _layouts(leaf):
                if not skipped(name, kind):
                    make({index: tensor}, name, kind, kind)
            if not skipped(name, "size"):
                for label, tensor, risky in _sizes(leaf, dims.get(name, ())):
                    make({index: tensor}, name, label, "size", risky=risky)
            if not skipped(name, "dtype"):
                for dtype, risky in _dtypes(leaf):
                    label = f"dtype={str(dtype).removeprefix('torch.')}"
                    make(
                        {index: leaf.to(dtype)},
                        name,
                        label,
                        "dtype",
                        outside_contract=True,
                        risky=risky,
                    )
            if not skipped(name, "device"):
                for device in _devices(leaf):
                    make(
                        {index: leaf.to(device)},
                        name,
                        f"device={device}",
                        "device",
                        outside_contract=True,
                        risky=True,
                        eager_inputs=example,
                    )
        elif isinstance(leaf, (int, float)) and not skipped(name, "scalar"):
            new = (not leaf) if isinstance(leaf, bool) else leaf + 1
            make({index: new}, name, f"value={new!r}", "scalar")

    mutated = program.mutated_inputs
    # aliased *example* inputs are the aliasing check's: never both report an input set
    if mutated and not aliased_inputs(exported, args, kwargs):
        tensors = {
            name: (index, leaf)
            for index, (name, leaf) in enumerate(zip(names, leaves))
            if isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided and leaf.dim()
        }
        for target in sorted(mutated & set(tensors)):
            t_index, t_leaf = tensors[target]
            for other, (o_index, o_leaf) in tensors.items():
                if other == target or skipped(target, "aliased") or skipped(other, "aliased"):
                    continue
                if o_leaf.shape != t_leaf.shape or o_leaf.dtype != t_leaf.dtype:
                    continue
                label = f"{target}, {other}"
                shared = t_leaf.clone()
                make({t_index: shared, o_index: shared}, label, "same tensor", "aliased")
                rows = t_leaf.shape[0]
                if rows >= 2:
                    shift = max(1, rows // 2)
                    base = torch.cat([t_leaf, o_leaf[rows - shift :]])
                    make(
                        {t_index: base[:rows], o_index: base[shift : shift + rows]},
                        label,
                        "overlapping views",
                        "aliased",
                    )
                break  # one partner per mutated input is enough
    return variants


def _layouts(leaf: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Same shape and values in other memory layouts; none that equals the example's."""
    import torch

    found: list[tuple[str, torch.Tensor]] = []
    if leaf.dim() == 4:
        found.append(("channels_last", leaf.contiguous(memory_format=torch.channels_last)))
    if leaf.dim() == 5:
        found.append(("channels_last_3d", leaf.contiguous(memory_format=torch.channels_last_3d)))
    if leaf.dim() >= 2:
        order = list(reversed(range(leaf.dim())))
        found.append(("permuted", leaf.permute(order).contiguous().permute(order)))
    bigger = torch.zeros(
        (*leaf.shape[:-1], 2 * leaf.shape[-1]), dtype=leaf.dtype, device=leaf.device
    )
    bigger[..., ::2] = leaf
    found.append(("strided_slice", bigger[..., ::2]))
    flat = torch.zeros(leaf.numel() + 1, dtype=leaf.dtype, device=leaf.device)
    flat[1:] = leaf.reshape(-1)
    found.append(("storage_offset", flat[1:].view(leaf.shape)))
    return [
        (kind, tensor)
        for kind, tensor in found
        if tensor.stride() != leaf.stride() or tensor.storage_offset() != leaf.storage_offset()
    ]


def _sizes(
    leaf: torch.Tensor, dims: tuple[tuple[int, int] | None, ...]
) -> list[tuple[str, torch.Tensor, bool]]:
    """Another size of each static dim (one more; one less for dim 0), and sizes just
    outside a dynamic dim's range. ``dims`` holds None for a static dim, else its range."""
    import torch

    found: list[tuple[str, torch.Tensor, bool]] = []

    def resized(dim: int, size: int) -> torch.Tensor:
        now = leaf.shape[dim]
        if size <= now:
            return leaf.narrow(dim, 0, size).contiguous()
        reps = [leaf] * (size // now) + [leaf.narrow(dim, 0, size % now)]
        return torch.cat(reps, dim).contiguous()

    for dim, size in enumerate(leaf.shape):
        bounds = dims[dim] if dim < len(dims) else None
        if bounds is None:
            found.append((f"size[{dim}]={size + 1}", resized(dim, size + 1), False))
            if dim == 0 and size > 1:
                found.append((f"size[{dim}]={size - 1}", resized(dim, size - 1), True))
            continue
        low, high = bounds
        if high is not None and high + 1 <= max(4 * size, 64):
            found.append((f"size[{dim}]={high + 1}", resized(dim, high + 1), False))
        if low is not None and low >= 1 and size >= 1:
            found.append((f"size[{dim}]={low - 1}", resized(dim, low - 1), True))
    return found


def _dtypes(leaf: torch.Tensor) -> list[tuple[torch.dtype, bool]]:
    """A wider and a narrower floating dtype (the narrower one may read out of bounds)."""
    import torch

    if not leaf.is_floating_point():
        return []
    if leaf.dtype == torch.float32:
        return [(torch.float64, False), (torch.float16, True)]
    if leaf.dtype in (torch.float16, torch.bfloat16):
        return [(torch.float32, False)]
    if leaf.dtype == torch.float64:
        return [(torch.float32, True)]
    return []


def _devices(leaf: torch.Tensor) -> list[str]:
    """A CPU input to a CUDA engine; another CUDA index where there is one."""
    import torch

    if leaf.device.type != "cuda":
        return []
    found = ["cpu"]
    count = torch.cuda.device_count()
    if count > 1:
        found.append(f"cuda:{((leaf.device.index or 0) + 1) % count}")
    return found


def _user_input_names(exported: Any) -> tuple[str, ...]:
    from pytest_aoti.compiling.signature import read_signature_names

    return read_signature_names(exported)


def _exported_dims(exported: Any) -> dict[str, tuple[tuple[int, int] | None, ...]]:
    """Per tensor input, per dim: None where static, else the ``(min, max)`` of its range
    (None for an unbounded end)."""
    names = set(_user_input_names(exported))
    ranges = {str(symbol): value for symbol, value in exported.range_constraints.items()}
    found: dict[str, tuple[tuple[int, int] | None, ...]] = {}
    for node in exported.graph.nodes:
        if node.op != "placeholder" or node.name not in names:
            continue
        value = node.meta.get("val")
        shape = getattr(value, "shape", None)
        if shape is None:
            continue
        dims: list[tuple[int, int] | None] = []
        for size in shape:
            if isinstance(size, int):
                dims.append(None)
                continue
            bound = ranges.get(str(size.node.expr))
            low = _finite(getattr(bound, "lower", None))
            high = _finite(getattr(bound, "upper", None))
            dims.append((low if low is not None else 0, high))  # type: ignore[arg-type]
        found[node.name] = tuple(dims)
    return found


def _finite(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if abs(number) < 2**62 else None


# --- the entry point ---------------------------------------------------------------------


def run_probes(
    program: AotiProgram,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    tolerance: Tolerance,
    skip: Mapping[str, frozenset[str]] | None = None,
    cache: ProbeCache | None = None,
    timeout: float = CHILD_TIMEOUT,
) -> tuple[ProbeReport, list[Variant]]:
    """Probe ``program``'s engine with variants of the example ``(args, kwargs)``.

    Returns the report and the variants (whose inputs a ``fail`` policy puts into the
    repro bundle). Outcomes come from ``cache`` where this program was probed the same
    way before; otherwise one child process calls the engine, and the outcomes are kept
    in ``cache``. Never raises for what the engine does; ``args`` are not modified.
    """
    started = time.perf_counter()
    skip = skip or {}
    try:
        variants = choose_variants(program, args, kwargs, skip)
        key = _spec_digest(program, variants, skip, tolerance)
    except Exception as error:  # inputs the probes cannot vary: say so, fail nothing
        return ProbeReport((), error=f"{type(error).__name__}: {error}"), []
    if cache is not None:
        kept = (cache.sidecar(program.key, "probes") or {}).get(key)
        if isinstance(kept, dict) and isinstance(kept.get("outcomes"), list):
            try:
                outcomes = tuple(ProbeOutcome.from_json(item) for item in kept["outcomes"])
                skipped = tuple(str(item) for item in kept.get("skipped", []))
            except (TypeError, ValueError):
                outcomes = None
            if outcomes is not None:
                return ProbeReport(outcomes, cached=True, skipped=skipped), variants
    try:
        outcomes_list, skipped_list = _probe(program, module, variants, tolerance, timeout)
    except Exception as error:  # a probe's own failure never fails a passed check
        return ProbeReport((), error=f"{type(error).__name__}: {error}"), variants
    report = ProbeReport(
        tuple(outcomes_list),
        seconds=time.perf_counter() - started,
        skipped=tuple(skipped_list),
    )
    if cache is not None:
        stored = dict(cache.sidecar(program.key, "probes") or {})
        stored[key] = {"outcomes": report.to_json(), "skipped": list(report.skipped)}
        try:
            cache.keep_sidecar(program.key, "probes", stored)
        except Exception:  # keeping outcomes is an economy: never fail a check for it
            pass
    return report, variants


def _spec_digest(
    program: AotiProgram,
    variants: list[Variant],
    skip: Mapping[str, frozenset[str]],
    tolerance: Tolerance,
) -> str:
    """What the outcomes of a program depend on besides its package."""
    import torch

    def shape_of(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return [list(value.shape), str(value.dtype), list(value.stride())]
        return repr(value)

    described = {
        "format": PROBE_FORMAT,
        "variants": [
            [v.input, v.variant, [shape_of(leaf) for leaf in _leaves((v.args, v.kwargs))]]
            for v in variants
        ],
        "skip": {name: sorted(kinds) for name, kinds in sorted(skip.items())},
        "tolerance": [tolerance.rtol, tolerance.atol, tolerance.base_rtol, tolerance.base_atol],
    }
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _leaves(tree: Any) -> list[Any]:
    import torch.utils._pytree as pytree

    return list(pytree.tree_leaves(tree))


@dataclass
class _Judged:
    variant: Variant
    accepted: bool
    eager: tuple[Any, Any] | None = None


def _probe(
    program: AotiProgram,
    module: torch.nn.Module,
    variants: list[Variant],
    tolerance: Tolerance,
    timeout: float,
) -> tuple[list[ProbeOutcome], list[str]]:
    """Eager and the exported program's guards here, the engine in a child process."""
    with warnings.catch_warnings():
        # a variant's eager or guarded run may warn (under filterwarnings=error, raise):
        # that says nothing about the engine
        warnings.simplefilter("ignore")
        judged, skipped = _eager_and_guards(program, module, variants)
    if not judged:
        return [], skipped
    ran = _run_child(program, [item.variant for item in judged], timeout)
    outcomes = [
        _judge(program, item, ran.get((index, False)), ran.get((index, True)), tolerance)
        for index, item in enumerate(judged)
    ]
    return outcomes, skipped


def _eager_and_guards(
    program: AotiProgram, module: torch.nn.Module, variants: list[Variant]
) -> tuple[list[_Judged], list[str]]:
    """Eager's result of each variant, and whether the exported program accepts it."""
    from pytest_aoti.checks.parity import clone_tree

    guarded = program.exported.module()
    if program.mutated_buffers:
        guarded = copy.deepcopy(guarded)
    judged: list[_Judged] = []
    skipped: list[str] = []
    for variant in variants:
        eager_module = copy.deepcopy(module) if program.mutated_buffers else module
        try:
            eager = _call(eager_module, *(variant.eager_inputs or (variant.args, variant.kwargs)))
        except Exception:  # eager itself rejects the variant: nothing a caller can do
            skipped.append(f"{variant.input}: {variant.variant} (eager rejects it)")
            continue
        accepted = not variant.outside_contract
        if accepted:
            try:
                _call(guarded, *clone_tree((variant.args, variant.kwargs)))
            except Exception:
                accepted = False
        judged.append(_Judged(variant, accepted, eager))
    return judged, skipped


def _call(module: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, Any]:
    """Outputs and inputs after one call on clones (the variant itself stays as it is)."""
    import torch

    from pytest_aoti.checks.parity import clone_tree

    call_args, call_kwargs = _clone_keeping_aliases((args, dict(kwargs)))
    with torch.no_grad():
        outputs = module(*call_args, **call_kwargs)
    return clone_tree(outputs), (call_args, call_kwargs)


def _clone_keeping_aliases(tree: Any) -> Any:
    """A deep copy that keeps the tensors' strides, offsets and sharing of storage."""
    return copy.deepcopy(tree)


def _run_child(
    program: AotiProgram, variants: list[Variant], timeout: float
) -> dict[tuple[int, bool], dict[str, Any]]:
    """Run every variant unchecked, then with the engine's input checks, in child
    processes; a crash or a hang ends a child, and the next one goes on after the job it
    died in. Returns the result per ``(variant index, checked)``; a job that crashed or
    hung has ``{"crashed": why}``."""
    import torch

    jobs = [(index, False) for index in range(len(variants))]
    jobs += [(index, True) for index in range(len(variants))]
    results: dict[tuple[int, bool], dict[str, Any]] = {}
    device = program.device
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-probes-") as root:
        request_path = Path(root) / "request.pt"
        torch.save(
            {
                "package": str(program.package_path),
                "device_index": device.index if device.type == "cuda" else None,
                "fresh": bool(program.mutated_buffers),
                "inputs": [copy.deepcopy(_flat_tensors(program, v)) for v in variants],
                "jobs": [],
            },
            request_path,
        )
        remaining = jobs
        attempt = 0
        while remaining:
            attempt += 1
            outdir = Path(root) / f"run-{attempt}"
            outdir.mkdir()
            request = torch.load(request_path, weights_only=False)
            request["jobs"] = remaining
            torch.save(request, request_path)
            why = _spawn(request_path, outdir, max(1.0, deadline - time.monotonic()))
            done = 0
            for position, job in enumerate(remaining):
                path = outdir / f"job-{position}.pt"
                if not path.exists():
                    break
                results[job] = torch.load(path, weights_only=False, map_location="cpu")
                done += 1
            if done == len(remaining):
                break
            if why is None:
                why = "the child process stopped without a result"
            crashed = remaining[done]
            results[crashed] = {"crashed": why}
            remaining = remaining[done + 1 :]
            if time.monotonic() >= deadline:
                for job in remaining:
                    results[job] = {"crashed": "not run: the probes ran out of time"}
                break
    return results


def _flat_tensors(program: AotiProgram, variant: Variant) -> list[Any]:
    """The tensor leaves of a variant in the program's input order: what the engine takes."""
    import torch

    return [leaf for leaf in _ordered_leaves(program, variant)[0] if isinstance(leaf, torch.Tensor)]


def _ordered_leaves(program: AotiProgram, variant: Variant) -> tuple[list[Any], Any]:
    import torch.utils._pytree as pytree

    from pytest_aoti.checks.aliasing import _ordered_kwargs

    ordered = _ordered_kwargs(program.exported, variant.kwargs)
    return pytree.tree_flatten((tuple(variant.args), ordered))


def _with_tensors(
    program: AotiProgram, variant: Variant, tensors: list[Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The variant's ``(args, kwargs)`` with its tensors replaced by ``tensors``."""
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = _ordered_leaves(program, variant)
    given = iter(tensors)
    replaced = [next(given) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    args, kwargs = pytree.tree_unflatten(replaced, spec)
    return tuple(args), dict(kwargs)


def _spawn(request: Path, outdir: Path, timeout: float) -> str | None:
    """Run the child; None when it exited normally, else why it did not."""
    env = dict(os.environ)
    env.pop("AOTI_RUNTIME_CHECK_INPUTS", None)
    # the child only loads a package built on this machine: skip the ISA probe's compile
    env.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
    try:
        completed = subprocess.run(
            [sys.executable, str(_CHILD), str(request), str(outdir)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the engine did not return within {timeout:.0f} s"
    if completed.returncode == 0:
        return None
    if completed.returncode < 0:
        return f"the engine crashed the process (signal {-completed.returncode})"
    tail = completed.stderr.decode(errors="replace").strip().splitlines()
    return f"the probe process failed: {tail[-1] if tail else completed.returncode}"


def _judge(
    program: AotiProgram,
    item: _Judged,
    unchecked: dict[str, Any] | None,
    checked: dict[str, Any] | None,
    tolerance: Tolerance,
) -> ProbeOutcome:
    variant = item.variant
    refused_with_checks: bool | None = None
    if checked is not None and "crashed" not in checked:
        refused_with_checks = "error" in checked
    hazard = "wrong" if item.accepted else "unguarded"

    def outcome(
        name: str, max_abs: float | None = None, max_rel: float | None = None, detail: str = ""
    ) -> ProbeOutcome:
        made = ProbeOutcome(
            input=variant.input,
            variant=variant.variant,
            outcome=name,
            kind=variant.kind,
            max_abs=max_abs,
            max_rel=max_rel,
            refused_with_checks=refused_with_checks,
            detail=detail,
        )
        return _with_remedy(made) if name in HAZARDS else made

    if unchecked is None or "crashed" in unchecked:
        return outcome(hazard, detail=str((unchecked or {}).get("crashed", "no result")))
    if "error" in unchecked:
        return outcome("refused", detail=str(unchecked["error"]))
    assert item.eager is not None
    engine_inputs = _with_tensors(program, variant, unchecked["inputs"])
    mismatch = _mismatch(program, item.eager, (unchecked["outputs"], engine_inputs), tolerance)
    if mismatch is None:
        return outcome("ok")
    return outcome(hazard, *mismatch)


def _mismatch(
    program: AotiProgram, eager: tuple[Any, Any], engine: tuple[Any, Any], tolerance: Tolerance
) -> tuple[float | None, float | None, str] | None:
    """None when the engine's outputs and inputs after the call match eager's; else the
    figures of the first leaf that differs (None where shapes differ) and what differed."""
    import torch
    import torch.utils._pytree as pytree

    from pytest_aoti.compare import compare_trees
    from pytest_aoti.compiling.signature import named_user_inputs

    def on_cpu(tree: Any) -> Any:
        return pytree.tree_map(
            lambda leaf: leaf.cpu() if isinstance(leaf, torch.Tensor) else leaf, tree
        )

    eager_out, (eager_args, eager_kwargs) = eager
    engine_out, (engine_args, engine_kwargs) = engine
    pairs = [("output", eager_out, engine_out)]
    try:
        eager_named = named_user_inputs(program.exported, eager_args, eager_kwargs)
        engine_named = named_user_inputs(program.exported, engine_args, engine_kwargs)
        for name in sorted(program.mutated_inputs):
            pairs.append((f"input '{name}'", eager_named.get(name), engine_named.get(name)))
    except (ValueError, KeyError, TypeError):
        pass
    for what, want, got in pairs:
        try:
            compare_trees(on_cpu(want), on_cpu(got), what=what, tolerance=tolerance)
        except AotiCheckError as error:
            finding = error.finding
            figures = finding.figures
            if figures is not None and figures.mismatched:
                return figures.max_abs, figures.max_rel, f"{finding.location} differs"
            return None, None, finding.headline(stage=False)
    return None


_CALL_SITE = {
    "channels_last": "call it with {input}.contiguous(), or export with a channels_last "
    "example if callers pass that layout",
    "channels_last_3d": "call it with {input}.contiguous(), or export with a "
    "channels_last_3d example if callers pass that layout",
    "permuted": "call it with {input}.contiguous()",
    "strided_slice": "call it with {input}.contiguous() (a view of a larger tensor is not)",
    "storage_offset": "call it with {input}.clone() (a tensor at a storage offset)",
    "size": "export that dim as dynamic (torch.export.Dim) if callers pass other sizes",
    "dtype": "cast {input} to the exported dtype at the call site",
    "device": "move {input} to the engine's device at the call site",
    "scalar": "pass {input} as a tensor (torch.tensor(value)) so the program reads it when "
    "called, not when exported",
    "aliased": "pass distinct tensors (e.g. a .clone() of one of {input}); the engine's "
    "input checks do not see aliasing",
}


def _with_remedy(outcome: ProbeOutcome) -> ProbeOutcome:
    parts = []
    if outcome.refused_with_checks:
        parts.append(
            "set AOTI_RUNTIME_CHECK_INPUTS=1 in the serving process (the engine then "
            "refuses this input)"
        )
    template = _CALL_SITE.get(outcome.kind)
    if template:
        parts.append(template.format(input=outcome.input))
    from dataclasses import replace

    return replace(outcome, remedy="; or ".join(parts))


def probe_failure(
    report: ProbeReport, variants: list[Variant], module: torch.nn.Module
) -> AotiCheckError:
    """The ``fail`` policy's error: every ``wrong`` variant, the first one's input set in
    the repro bundle."""
    from pytest_aoti.checks.parity import Replay
    from pytest_aoti.findings import Finding

    wrong = report.wrong
    first = wrong[0]
    lines = [
        f"input '{item.input}' {item.variant}: {item.figures()}"
        + (
            ""
            if item.refused_with_checks is None
            else f"; with AOTI_RUNTIME_CHECK_INPUTS=1 the engine "
            f"{'refuses it' if item.refused_with_checks else 'runs it too'}"
        )
        for item in wrong
    ]
    remedies = list(dict.fromkeys(f"remedy ({item.variant}): {item.remedy}" for item in wrong))
    error = AotiCheckError(
        Finding(
            kind="probe",
            location=f"input '{first.input}'",
            message=(
                f"deployment probe: the engine silently differs from eager on "
                f"{len(wrong)} input variant(s) the exported program accepts "
                f"(first: input '{first.input}' {first.variant}, {first.figures()})"
            ),
            summary="",
            details=tuple(lines),
            notes=(
                *remedies,
                "the repro bundle holds the first variant's input; "
                'probes_skip={"' + first.input + '": {"' + first.kind + '"}} leaves out a '
                "variant the model does not support",
            ),
            stage="compile",
            extra={"probes": report.to_json()},
        )
    )
    chosen = next(
        (v for v in variants if v.input == first.input and v.variant == first.variant), None
    )
    if chosen is not None:
        error.replay = Replay(module, chosen.args, chosen.kwargs, 1)
    return error
