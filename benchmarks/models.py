"""The models of the artifact-cache benchmark, defined once for every process that uses them.

The raw-torch worker of ``bench_cache.py`` and the pytest suite under ``suite/`` both build
models from :data:`MODELS`, so the raw and plugin measurements compile identical programs:
weights and inputs come from a fixed seed, independent of the caller's RNG state.

Each model is small on purpose (one AOTI compile of a few seconds); together they cover
the shapes of programs the plugin handles: plain feed-forward, convolution, a registered
buffer the program mutates, an input it mutates in place, and a dynamic batch dimension.
"""

from __future__ import annotations

import os
import resource
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.export import Dim

Inputs = tuple[Any, ...]

# -- the models ------------------------------------------------------------------------


class MLP(torch.nn.Module):
    """Two linear layers with a GELU: the plainest static program."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class SmallConvNet(torch.nn.Module):
    """Conv, batch norm (eval), ReLU, pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.head = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


class RunningMean(torch.nn.Module):
    """Updates a registered buffer in place on every call (the program mutates a buffer)."""

    mean: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(16))
        self.scale = torch.nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mean.mul_(0.9).add_(x.mean(dim=0), alpha=0.1)
        return (x - self.mean) * self.scale


class DecayState(torch.nn.Module):
    """Decays a caller-owned state in place and projects it (the program mutates an input)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Parameter(torch.randn(16, 8))

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        state.mul_(0.5).add_(x)
        return torch.tanh(state) @ self.proj


class ResidualMLP(torch.nn.Module):
    """LayerNorm, a SiLU MLP and a residual; exported with a dynamic batch dimension."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(24)
        self.up = torch.nn.Linear(24, 48)
        self.down = torch.nn.Linear(48, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.silu(self.up(self.norm(x))))


class TinyAttention(torch.nn.Module):
    """Single-head self-attention over a short sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
        return self.out(weights @ v)


class EmbeddingPool(torch.nn.Module):
    """Embedding lookup of integer ids, mean pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).mean(dim=1))


class Conv1dClassifier(torch.nn.Module):
    """1-d convolution, ReLU, global average pooling and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        pooled = torch.relu(self.conv(signal)).mean(dim=-1)
        return self.head(pooled)


class WarmUp(torch.nn.Module):
    """The throwaway model compiled first in every measured process; unlike all the others."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2 + 1


# -- specs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """How to build one benchmark model, its inputs, and how to check it."""

    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], Inputs]
    dynamic_shapes: Callable[[], Any] | None = None
    """A torch.export spec (built on demand: ``Dim`` objects are cheap but not shared)."""
    samples: Callable[[], list[Inputs]] | None = None
    """More input sets for :meth:`check_options` (dynamic models only)."""
    check: Mapping[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of ``aoti.check`` (``mutates``, ``mutated_buffers``, ...)."""
    seed: int = 0

    def make(self) -> tuple[torch.nn.Module, Inputs]:
        """The module (eval mode) and its example inputs, identical in every process."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            module = self.build().eval()
            args = self.inputs()
        return module, args

    def export_shapes(self) -> Any:
        """The ``dynamic_shapes`` argument of ``torch.export.export`` (None when static)."""
        return self.dynamic_shapes() if self.dynamic_shapes is not None else None

    def check_options(self) -> dict[str, Any]:
        """Keyword arguments of ``aoti.check`` that compile the same program as the raw run."""
        options: dict[str, Any] = dict(self.check)
        if self.dynamic_shapes is not None:
            options["dynamic_shapes"] = self.dynamic_shapes()
            # generated examples add eager/engine runs that the raw run has no equivalent of
            options["examples"] = 0
            if self.samples is not None:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(self.seed + 1)
                    options["samples"] = self.samples()
        return options


def _batch_dim() -> dict[str, Any]:
    return {"x": {0: Dim("batch", min=1, max=64)}}


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("mlp", MLP, lambda: (torch.randn(4, 32),), check={"mutates": {}}),
        ModelSpec(
            "conv",
            SmallConvNet,
            lambda: (torch.randn(2, 3, 16, 16),),
            check={"mutates": {}, "rtol": 1e-4, "atol": 1e-4},
        ),
        ModelSpec(
            "buffer_mutation",
            RunningMean,
            lambda: (torch.randn(8, 16),),
            # one call: pytorch/pytorch#165444 breaks constant-initialized buffers across calls
            check={"mutates": {}, "mutated_buffers": {"mean"}},
        ),
        ModelSpec(
            "input_mutation",
            DecayState,
            lambda: (torch.randn(4, 16), torch.randn(4, 16)),
            check={"mutates": {"state": lambda x, state: state * 0.5 + x}},
        ),
        ModelSpec(
            "dynamic_batch",
            ResidualMLP,
            lambda: (torch.randn(4, 24),),
            dynamic_shapes=_batch_dim,
            samples=lambda: [(torch.randn(9, 24),)],
            check={"mutates": {}},
        ),
        ModelSpec(
            "attention", TinyAttention, lambda: (torch.randn(2, 8, 16),), check={"mutates": {}}
        ),
        ModelSpec(
            "embedding",
            EmbeddingPool,
            lambda: (torch.randint(0, 100, (3, 10)),),
            check={"mutates": {}},
        ),
        ModelSpec(
            "conv1d", Conv1dClassifier, lambda: (torch.randn(2, 4, 32),), check={"mutates": {}}
        ),
    )
}

MAIN: tuple[str, ...] = ("mlp", "conv", "buffer_mutation", "input_mutation", "dynamic_batch")
"""Models of the raw / cold / warm comparison."""
SUITE: tuple[str, ...] = (*MAIN, "attention", "embedding", "conv1d")
"""Models of the compile-bound example suite (one test, one compile each)."""
QUICK_MAIN: tuple[str, ...] = ("mlp", "input_mutation", "dynamic_batch")
QUICK_SUITE: tuple[str, ...] = ("mlp", "buffer_mutation", "input_mutation", "embedding")

MODELS_ENV = "AOTI_BENCH_MODELS"


def selected_models() -> list[str]:
    """Models the suite checks: the comma list in ``AOTI_BENCH_MODELS``, else :data:`SUITE`."""
    names = [name for name in os.environ.get(MODELS_ENV, "").split(",") if name]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        raise ValueError(f"{MODELS_ENV}: unknown model(s) {', '.join(unknown)}")
    return names or list(SUITE)


# -- the raw torch pipeline -------------------------------------------------------------

RAW_STEPS: tuple[str, ...] = (
    "export",
    "run_decompositions",
    "aoti_compile_and_package",
    "aoti_load_package",
    "engine_run",
)


def raw_pipeline(
    module: torch.nn.Module, args: Inputs, dynamic_shapes: Any, package_path: Path
) -> dict[str, float]:
    """Export, decompose, compile, load and run once with plain torch calls; seconds per step.

    Deprecation warnings are silenced as the plugin silences them, so neither side pays
    for formatting torch's warnings about itself.
    """
    import torch._inductor

    seconds: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        started = time.perf_counter()
        exported = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
        seconds["export"] = _lap(started)

        started = time.perf_counter()
        decomposed = exported.run_decompositions()
        seconds["run_decompositions"] = _lap(started)

        started = time.perf_counter()
        package = torch._inductor.aoti_compile_and_package(
            decomposed, package_path=str(package_path)
        )
        seconds["aoti_compile_and_package"] = _lap(started)

        started = time.perf_counter()
        engine = torch._inductor.aoti_load_package(package)
        seconds["aoti_load_package"] = _lap(started)

        # on clones: a program that mutates its inputs must not change the caller's
        run_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        started = time.perf_counter()
        engine(*run_args)
        seconds["engine_run"] = _lap(started)
    return seconds


def warm_up(workdir: Path) -> dict[str, float]:
    """Compile :class:`WarmUp` through :func:`raw_pipeline`: pays a process's one-time costs.

    The first AOTI compile of a process imports and initializes much of inductor (several
    seconds); every measured process runs this first so that neither side carries that.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    return raw_pipeline(WarmUp(), (torch.randn(4, 4),), None, workdir / "warm_up.pt2")


def cpu_seconds(children: bool = True) -> float:
    """CPU time of this process and, with ``children``, of its waited-for children (the C++
    compilers inductor runs). Less sensitive than wall time to other load on the machine.
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    seconds = own.ru_utime + own.ru_stime
    if children:
        waited = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds += waited.ru_utime + waited.ru_stime
    return seconds


def _lap(started: float) -> float:
    return time.perf_counter() - started
