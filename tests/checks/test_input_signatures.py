"""The default check holds on whatever input a user hands it: Hypothesis generates input
signatures (shape with 0-dim and empty, dtype, memory layout, ``requires_grad``, a
non-tensor leaf) for a few correct modules, and the default check passes each, or refuses
the form with a usage error that says what to do; never a raw exception from the plugin.

Two tiers: every drawn signature runs the whole default check against an engine stand-in
(the decomposed program run by torch itself, no compile: the copy, draw, compare and eager
paths are the plugin's own), and a bounded number of them (``REAL_COMPILES``) against real
AOTI engines, crash screen and deployment probes included. Both are derandomized.
"""

from __future__ import annotations

import contextlib
import copy
import os
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_aoti import AotiCheckError, AotiUsageError
from pytest_aoti.cache.registry import ProgramRegistry
from pytest_aoti.tester import AotiTester
from pytest_aoti.torch_bugs import COMPLEX_SCALAR_PROMOTED

STAND_IN_EXAMPLES = int(os.environ.get("AOTI_SIGNATURE_EXAMPLES", "40"))
REAL_COMPILES = int(os.environ.get("AOTI_SIGNATURE_COMPILES", "3"))
"""Drawn signatures compiled for real, besides the three explicit ones: a 0-dim position
writing a strided cache, a channels_last float16 input, a 0-dim float with requires_grad."""

DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
)
LAYOUTS = ("contiguous", "permuted", "gaps", "expanded", "offset", "channels_last")


class Elementwise(torch.nn.Module):
    def forward(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        if x.dtype == torch.bool:
            return ~x
        return x * scale + 1 if x.is_floating_point() or x.is_complex() else x * 2 + 1


class Reduction(torch.nn.Module):
    def forward(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        if x.dtype == torch.bool:
            return x.sum()
        return x.sum() * scale if x.is_floating_point() or x.is_complex() else x.sum()


class IndexWrite(torch.nn.Module):
    """A cache written in place at a 0-dim position: the motivating use."""

    def forward(self, cache: torch.Tensor, position: torch.Tensor, row: torch.Tensor) -> Any:
        cache.index_copy_(0, position.reshape(1), row)
        return cache.sum(dim=0)


@dataclass(frozen=True)
class Signature:
    module: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str
    requires_grad: bool
    scale: float | None
    dynamic: bool = False
    """Dim 0 of the first input exported as ``Dim.AUTO``: generated shapes run too."""

    def build(self) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
        generator = torch.Generator().manual_seed(hash(self) % 2**31)
        if self.module == "index_write":
            cache = _laid_out(_values((6, 4), self.dtype, generator), self.layout)
            # a dynamic cache may be generated with two rows: the position stays inside
            position = torch.tensor(0 if self.dynamic else len(self.shape) % 6)
            row = _values((1, 4), self.dtype, generator)
            return IndexWrite(), (cache, position, row), {}
        x = _laid_out(_values(self.shape, self.dtype, generator), self.layout)
        if self.requires_grad and (x.is_floating_point() or x.is_complex()):
            x = x.detach().requires_grad_(True)
        module = Elementwise() if self.module == "elementwise" else Reduction()
        kwargs = {} if self.scale is None else {"scale": self.scale}
        return module, (x,), kwargs

    @property
    def promotes_a_complex_scalar(self) -> bool:
        """Whether the program multiplies a 0-dim complex64 tensor by a Python float, which
        the engine returns as complex128 on the torch releases measured
        (:data:`~pytest_aoti.torch_bugs.COMPLEX_SCALAR_PROMOTED`)."""
        complex_0_dim = self.module == "reduction" or self.shape == ()
        return self.dtype == torch.complex64 and self.module != "index_write" and complex_0_dim

    def options(self) -> dict[str, Any]:
        """The check's keywords: dynamic shapes (and a few generated ones) where asked."""
        if not self.dynamic:
            return {}
        auto = {0: torch.export.Dim.AUTO}
        if self.module == "index_write":
            spec: dict[str, Any] = {"cache": auto, "position": None, "row": None}
        else:
            spec = {"x": auto if self.shape else None}
            if self.scale is not None:
                spec["scale"] = None
        return {"dynamic_shapes": spec, "examples": 3}


def _values(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> Any:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.randint(0, 100, shape, generator=generator).to(dtype)


def _laid_out(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``x``'s values in ``layout`` (the shape kept; where the layout needs dims it lacks,
    ``x`` as it is)."""
    if layout == "permuted" and x.dim() >= 2:
        return x.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "gaps" and x.dim() >= 1:
        wide = torch.zeros((*x.shape[:-1], x.shape[-1] * 2), dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    if layout == "expanded" and x.dim() >= 1 and x.shape[0] > 1:
        return x[:1].expand(x.shape)
    if layout == "offset":
        flat = torch.zeros(x.numel() + 3, dtype=x.dtype)
        flat[3:] = x.reshape(-1)
        return flat[3:].view(x.shape)
    if layout == "channels_last" and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


@st.composite
def signatures(draw: st.DrawFn) -> Signature:
    module = draw(st.sampled_from(("elementwise", "reduction", "index_write")))
    rank = draw(st.integers(0, 4))
    sizes = st.integers(0, 4) if draw(st.booleans()) else st.integers(1, 4)
    shape = tuple(draw(sizes) for _ in range(rank))
    dtype = draw(st.sampled_from(DTYPES))
    layouts = LAYOUTS
    if module == "index_write":  # a written cache: an expanded one is refused by eager
        dtype = draw(st.sampled_from((torch.float32, torch.float16, torch.int64)))
        layouts = tuple(layout for layout in LAYOUTS if layout != "expanded")
    return Signature(
        module=module,
        shape=shape,
        dtype=dtype,
        layout=draw(st.sampled_from(layouts)),
        requires_grad=draw(st.booleans()),
        scale=draw(st.one_of(st.none(), st.sampled_from((0.5, 3.0)))),
        dynamic=draw(st.booleans()),
    )


class _StandInEngine:
    """The decomposed program run by torch (``module()``), called as an engine is: without
    guards (an engine takes the values it was exported with for non-tensor inputs)."""

    def __init__(self, decomposed: Any) -> None:
        self._module = copy.deepcopy(decomposed.module(check_guards=False))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self._module(*args, **kwargs)


_PROGRAMS: dict[str, Any] = {}


@contextlib.contextmanager
def engine_stand_in() -> Iterator[None]:
    """No compile: a package is a placeholder file, its engine the decomposed program."""
    import pytest_aoti.cache.registry as registry
    import pytest_aoti.compiling.program as program

    def compile_package(decomposed: Any, path: Path, configs: Any) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"stand-in")
        _PROGRAMS[str(path)] = decomposed
        return path

    def load_engine(path: Path, device: Any = None) -> Any:
        return _StandInEngine(_PROGRAMS[str(path)])

    saved = registry.compile_package, program.load_engine
    registry.compile_package, program.load_engine = compile_package, load_engine
    try:
        yield
    finally:
        registry.compile_package, program.load_engine = saved


@pytest.fixture(scope="module")
def tester(tmp_path_factory: pytest.TempPathFactory) -> AotiTester:
    """A tester of its own (its registry compiles real engines)."""
    return AotiTester(torch.device("cpu"), ProgramRegistry(tmp_path_factory.mktemp("programs")))


@pytest.fixture(scope="module")
def stand_in_tester(tmp_path_factory: pytest.TempPathFactory) -> AotiTester:
    """A tester whose registry holds the stand-ins' placeholder packages only."""
    return AotiTester(torch.device("cpu"), ProgramRegistry(tmp_path_factory.mktemp("stand-ins")))


def check_holds(tester: AotiTester, signature: Signature, **options: Any) -> None:
    """The default check passes ``signature`` or refuses it with a usage error; the
    caller's tensors stay as they were. A raw exception fails, naming the plugin's frame."""
    module, args, kwargs = signature.build()
    if os.environ.get("AOTI_SIGNATURE_SHOW"):
        print(signature)
    before = [(t.clone(), t.stride(), t.storage_offset()) for t in _tensors(args, kwargs)]
    try:
        tester.check(module, args, kwargs, **signature.options(), **options)
    except AotiUsageError as error:
        assert "sparse" not in str(error) or "dense" in str(error)  # says what to do
    except AotiCheckError as error:
        if signature.promotes_a_complex_scalar and COMPLEX_SCALAR_PROMOTED.possible_in():
            assert "complex128" in str(error)  # the check finds the torch bug
            return
        pytest.fail(f"{signature}: a correct program failed: {error}")
    except Exception as error:  # a raw error: name where in the plugin it came from
        frames = [
            f"{frame.filename}:{frame.lineno} in {frame.name}"
            for frame in traceback.extract_tb(error.__traceback__)
            if "pytest_aoti" in frame.filename
        ]
        pytest.fail(f"{signature}: {type(error).__name__}: {error} at {frames[-1:]}")
    for (value, stride, offset), tensor in zip(before, _tensors(args, kwargs)):
        assert tensor.stride() == stride and tensor.storage_offset() == offset
        assert torch.equal(value, tensor), f"{signature}: the caller's tensor changed"


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    leaves = [*args, *kwargs.values()]
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


@settings(
    max_examples=STAND_IN_EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.nested_given],
)
@given(signature=signatures())
def test_every_signature_passes_against_an_engine_stand_in(
    stand_in_tester: AotiTester, signature: Signature
) -> None:
    with engine_stand_in():
        check_holds(stand_in_tester, signature, crash_screen=False, probes="off", cpp_loader=False)


@pytest.mark.compiles
@pytest.mark.skipif(
    not COMPLEX_SCALAR_PROMOTED.measured_in(),
    reason=f"measured only on {', '.join(COMPLEX_SCALAR_PROMOTED.measured)}",
)
@pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning"
)
def test_the_raw_engine_promotes_a_complex_scalar_times_a_float(tmp_path: Path) -> None:
    """The raw pipeline (no plugin code): the torch bug the check reports on such programs."""
    x = torch.tensor(0.5 + 0.0j, dtype=torch.complex64)
    exported = torch.export.export(Elementwise(), (x,)).run_decompositions()
    package = torch._inductor.aoti_compile_and_package(
        exported, package_path=str(tmp_path / "p.pt2")
    )
    engine = torch._inductor.aoti_load_package(package)
    assert Elementwise()(x).dtype == torch.complex64
    assert engine(x).dtype == torch.complex128


@pytest.mark.compiles
@settings(
    max_examples=REAL_COMPILES,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(signature=signatures())
@example(Signature("index_write", (), torch.float32, "gaps", False, None, dynamic=True))
@example(Signature("elementwise", (2, 3, 4, 4), torch.float16, "channels_last", False, 3.0))
@example(Signature("reduction", (), torch.float32, "contiguous", True, 0.5))
def test_signatures_pass_against_real_engines(tester: AotiTester, signature: Signature) -> None:
    check_holds(tester, signature)
