"""``AotiProgram``: one exported module, its compiled package and a lazily loaded engine."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from pytest_aoti.compiling.accumulation import Accumulation, accumulation
from pytest_aoti.compiling.custom_ops import ChildPreparation, child_preparation
from pytest_aoti.compiling.graph_ops import NodeTarget as _NodeTarget
from pytest_aoti.compiling.graph_ops import scalar_output_dtypes
from pytest_aoti.compiling.pipeline import decompose, load_engine, quiet_torch_deprecations
from pytest_aoti.errors import AotiInputError, user_facing
from pytest_aoti.mutation_maps import MutationSignature, named_user_inputs

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.shapes.read import ProgramShapes


DEFAULT_ENGINE_BUDGET = 128 * 2**20
"""Bytes of packages whose engines stay loaded once no check uses them (see :class:`EnginePool`)."""

_Slot = tuple[str, str]
"""An engine's package key and device."""


class EnginePool:
    """The engines of programs whose calls leave no state behind, one per package and device. A load
    maps the library for good and copies the weights, so an engine is loaded once while anything
    holds it; recent ones stay while their packages total at most ``budget`` bytes (the latest
    always); one loaded twice stays for the session (no program costs over 3x its package)."""

    def __init__(self, budget: int = DEFAULT_ENGINE_BUDGET) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._recent: OrderedDict[_Slot, tuple[Any, int]] = OrderedDict()
        """Engines kept loaded, least recently used first, with their package's size."""
        self._pinned: dict[_Slot, Any] = {}
        """Engines loaded more than once, kept for the session."""
        self._loaded: set[_Slot] = set()
        self._alive: weakref.WeakValueDictionary[_Slot, Any] = weakref.WeakValueDictionary()
        """Every engine something still holds: never loaded twice while one is."""

    def get(self, key: str, device: torch.device, size: int, load: Callable[[], Any]) -> Any:
        """The engine of package ``key`` on ``device``, loaded by ``load`` unless one is alive."""
        slot = (key, str(device))
        with self._lock:
            engine = self._pinned.get(slot)
            if engine is None:
                engine = self._alive.get(slot)
            if engine is None:
                engine = load()
                try:
                    self._alive[slot] = engine
                except TypeError:  # a stand-in without weak references: kept for good
                    self._pinned[slot] = engine
                if slot in self._loaded:
                    self._pinned[slot] = engine
                self._loaded.add(slot)
            if slot not in self._pinned:
                self._recent[slot] = (engine, size)
                self._recent.move_to_end(slot)
                self._trim()
            return engine

    def forget(self, key: str, device: torch.device) -> None:
        """Drop the engine of package ``key`` on ``device`` (one left in another state than
        loaded): the next request loads the package again."""
        slot = (key, str(device))
        with self._lock:
            self._recent.pop(slot, None)
            self._pinned.pop(slot, None)
            self._alive.pop(slot, None)

    def clear(self) -> int:
        """Drop every engine this pool keeps (at the session's end); how many it kept."""
        with self._lock:
            kept = len(self._recent.keys() | self._pinned.keys())
            self._recent.clear()
            self._pinned.clear()
        return kept

    @property
    def alive(self) -> int:
        """Engines something other than this pool still holds (or a reference cycle)."""
        return len(self._alive)

    def _trim(self) -> None:
        """Keep the newest engine, and the next newest while their packages fit the budget."""
        total = kept = 0
        for _, size in reversed(self._recent.values()):
            if kept and total + size > self.budget:
                break
            total += size
            kept += 1
        while len(self._recent) > kept:
            self._recent.popitem(last=False)


@dataclass(frozen=True)
class ProgramKey:
    """The digest that names a compiled program, and what it was made of."""

    digest: str
    parts: dict[str, str] = field(default_factory=dict)
    """Digest of each part (graph, weights, configs, device, torch), to compare two keys."""
    persistable: bool = True
    """False when an ingredient has no identity across processes (a custom pass without
    ``uuid()``): shared within the session, never stored."""


@dataclass(frozen=True)
class CompiledArtifact:
    """A compiled package and what the checks need to know about it, shared by every
    :class:`AotiProgram` of its key. Kept for the session, so it holds no tensors."""

    key: ProgramKey
    package_path: Path
    signature: MutationSignature
    compile_seconds: float
    """Seconds the compile that produced the package took."""
    cache_hit: bool
    package_bytes: int = 0
    """Size of the package: what one more engine of it costs in memory, about."""
    source: str = "compiled"
    """Where the package came from: ``compiled``, ``local`` or ``remote``."""


class AotiProgram:
    """A module exported, decomposed and AOT-compiled for one device. Calling it runs the engine as
    a deployed model would (mutated inputs written in place); a program that mutates buffers gets
    an engine of its own, others share one (:class:`EnginePool`)."""

    NodeTarget: TypeAlias = _NodeTarget
    """What a node of the program's graph calls, as a check asks about it."""
    quiet_torch_deprecations = staticmethod(quiet_torch_deprecations)

    def __init__(
        self,
        exported: ExportedProgram,
        artifact: CompiledArtifact,
        device: torch.device,
        *,
        first_use: bool = False,
        decomposed: ExportedProgram | None = None,
        engines: EnginePool | None = None,
    ) -> None:
        self.exported: ExportedProgram = exported
        """The program returned by ``torch.export.export``."""
        self.device: torch.device = device
        self.first_use = first_use
        """True for the first ``AotiProgram`` of its key: the one that compiled or loaded it."""
        self._artifact = artifact
        self._decomposed = decomposed
        self._engines = engines if engines is not None else EnginePool()
        self._engine: Any = None
        self._engine_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"AotiProgram(key={self.key[:12]}, device={self.device}, "
            f"package={self.package_path.name}, cache_hit={self.cache_hit})"
        )

    @property
    def key(self) -> str:
        """Content key of the program (see :mod:`pytest_aoti.cache.key`)."""
        return self._artifact.key.digest

    @property
    def key_parts(self) -> dict[str, str]:
        """Digest of each key part: ``graph``, ``weights``, ``configs``, ``device``, ``torch``."""
        return dict(self._artifact.key.parts)

    @property
    def package_path(self) -> Path:
        """The ``.pt2`` package this program loads its engine from."""
        return self._artifact.package_path

    @staticmethod
    def machine_identity() -> dict[str, str]:
        """What this machine's compile target depends on (its CPU, torch build, compiler and
        Inductor's ISA settings), each part as text: a package built under another identity
        may not run the same here."""
        from pytest_aoti.compiling.machine import machine_identity

        return machine_identity()

    def loop_width(self, dtype: torch.dtype, inner: int | None = None) -> int:
        """Elements per step of the vectorized loop the engine's code runs over ``dtype``
        (``inner``: the innermost size): on a CPU, Inductor's for the ISA this machine's
        record names (this machine's where it has none yet); 0 on a GPU, whose loops have
        no scalar tail."""
        if self.device.type != "cpu":
            return 0
        from pytest_aoti.compiling.machine import settled_target
        from pytest_aoti.compiling.vec_isa import loop_width

        target = settled_target()
        return loop_width(dtype, target.isa if target is not None and target.isa else None, inner)

    @staticmethod
    def cpu_loop_width(dtype: torch.dtype, inner: int | None = None) -> int:
        """Elements per step of Inductor's vectorized CPU loop over ``dtype`` for the ISA it
        detects on this machine, without a program (a program's engine runs the ISA its
        machine record names: :meth:`loop_width`)."""
        from pytest_aoti.compiling.vec_isa import loop_width

        return loop_width(dtype, None, inner)

    def child_preparation(self) -> ChildPreparation:
        """What a fresh process does before it loads this package: import the modules that
        registered the custom ops it calls, load the op libraries loaded here."""
        return child_preparation(self.package_path)

    @property
    def package_bytes(self) -> int:
        """The package's size in bytes."""
        return self._artifact.package_bytes

    @property
    def signature(self) -> MutationSignature:
        return self._artifact.signature

    @property
    def mutated_inputs(self) -> set[str]:
        """Names of the user inputs the program writes to."""
        return set(self.signature.mutated_inputs)

    @property
    def mutated_buffers(self) -> set[str]:
        """FQNs of the registered buffers the program writes to."""
        return set(self.signature.mutated_buffers)

    @property
    def compile_seconds(self) -> float:
        return self._artifact.compile_seconds

    @property
    def cache_hit(self) -> bool:
        return self._artifact.cache_hit

    @property
    def source(self) -> str:
        """Where the package came from: ``compiled``, ``local`` or ``remote``."""
        return self._artifact.source

    @property
    def seconds_compiled_here(self) -> float:
        """Seconds this program's own request spent compiling (0 on a cache hit or reuse)."""
        return self.compile_seconds if self.first_use and not self.cache_hit else 0.0

    @cached_property
    def decomposed(self) -> ExportedProgram:
        """The program after ``run_decompositions()``: the compiled one, else computed on demand."""
        return self._decomposed if self._decomposed is not None else decompose(self.exported)

    @cached_property
    def scalar_output_dtypes(self) -> list[Any]:
        """Per user output, the dtype a Python float was read from (``.item()``), else None."""
        return scalar_output_dtypes(self.exported)

    @cached_property
    def accumulation(self) -> Accumulation:
        """Terms each output, mutated input and mutated buffer accumulates (for the fp64 rule)."""
        return accumulation(self.exported)

    @cached_property
    def shapes(self) -> ProgramShapes:
        """Shapes, dtypes and devices the program accepts; symbols are named by the user's
        ``Dim`` after :meth:`name_dims`, else by torch (``s77``)."""
        from pytest_aoti.shapes.read import read_program_shapes  # shapes/ imports torch

        return read_program_shapes(self.exported)

    def name_dims(
        self, dynamic_shapes: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """Name the shape symbols in messages after the user's ``Dim`` objects (``batch`` for
        ``s77``), given what the module was exported with; unnamed dims keep torch's symbol."""
        from pytest_aoti.shapes.user_spec import name_symbols  # shapes/ imports torch

        named = name_symbols(self.exported, self.shapes, dynamic_shapes, args, kwargs or {})
        self.__dict__["shapes"] = named  # replaces the cached_property's value

    @user_facing
    def load_engine(self) -> Any:
        """Load a fresh engine from the package, with buffers in their exported state."""
        return load_engine(self.package_path, self.device)

    def forget_engine(self) -> None:
        """Let go of the shared engine (one whose weights could not be loaded back): the next
        request for it loads the package again."""
        self._engines.forget(self.key, self.device)

    def engine_in_exported_state(self) -> Any:
        """A fresh engine when the program mutates buffers, else the shared one."""
        if self.mutated_buffers:
            return self.load_engine()
        return self._engines.get(
            self.key, self.device, self._artifact.package_bytes, self.load_engine
        )

    @user_facing
    def validate(self, *args: Any, **kwargs: Any) -> None:
        """Raise :class:`~pytest_aoti.AotiInputError` if an input does not fit the program."""
        __tracebackhide__ = True
        from pytest_aoti.shapes.validate import validate_inputs  # shapes/ imports torch

        try:
            named = named_user_inputs(self.exported, args, kwargs)
        except (ValueError, KeyError, TypeError) as error:
            raise AotiInputError(f"inputs do not match the exported program: {error}") from None
        validate_inputs(self.shapes, named)
        if self.device.type == "cuda" and self.device.index is not None:
            # an engine loaded on cuda:0 must not be handed tensors on cuda:1
            for name, value in named.items():
                index = getattr(getattr(value, "device", None), "index", None)
                if getattr(value, "is_cuda", False) and index != self.device.index:
                    raise AotiInputError(
                        f"input '{name}' is on {value.device} but this program's engine runs "
                        f"on {self.device}: move the input there"
                    )

    @user_facing
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Validate the inputs against the exported program, then run the engine on them."""
        __tracebackhide__ = True
        self.validate(*args, **kwargs)
        with self._engine_lock:
            if self._engine is None:
                self._engine = self.engine_in_exported_state()
        return self._engine(*args, **kwargs)
