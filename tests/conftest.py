from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import _pytest.pytester
import pytest

# The suite's engines have their C++ wrapper compiled at -O0 (about a sixth less per
# compile; the kernels are compiled as a user's are): set before torch reads its config,
# for every inner session and child process. A user's setting is kept.
os.environ.setdefault("AOT_INDUCTOR_COMPILE_WRAPPER_OPT_LEVEL", "O0")

# Imported here, once, rather than first inside a pytester run (whose restored sys.modules
# would import torch's lazily loaded parts a second time); the compile guard below patches
# torch._inductor's attribute, which the plugin looks up at each compile.
import torch
import torch._inductor

from pytest_aoti.isolation import process

pytest_plugins = ["pytester"]

# Top-level packages whose modules must survive pytester's in-process runs.
_KEEP_LOADED = frozenset({"torch", "torchgen", "functorch", "sympy", "mpmath", "numpy", "triton"})


@pytest.fixture(autouse=True)
def _keep_torch_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytester drops every module first imported during an in-process run. torch imports
    much of itself lazily and registers native state as it does, so importing those modules
    a second time in the next inner session crashes the process: keep them loaded."""

    class Snapshot(_pytest.pytester.SysModulesSnapshot):
        def __init__(self, preserve: Callable[[str], bool] | None = None) -> None:
            def keep(name: str) -> bool:
                return name.partition(".")[0] in _KEEP_LOADED or bool(preserve and preserve(name))

            super().__init__(preserve=keep)

    monkeypatch.setattr(_pytest.pytester, "SysModulesSnapshot", Snapshot)


def _release_the_engine_child() -> None:
    """What an in-process session's end does to the engine child here: free its engine."""
    process.release_engine()


@pytest.fixture(autouse=True)
def _one_engine_child_per_worker(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session ends its engine child; the next session starts one, importing torch again
    (about 3 s of CPU). The in-process sessions of this suite follow one another in one
    process, as nothing else does: each leaves the child running with its engine freed,
    and the next takes it. A child that crashed, hung or held too much is still replaced;
    sessions in a subprocess, and tests without pytester, end theirs as a user's do; the
    worker's exit ends the last."""
    if "pytester" in request.fixturenames:
        monkeypatch.setattr(process, "shutdown", _release_the_engine_child)


UNMARKED_COMPILE = "this test compiles an engine: mark it `compiles`"
_REAL_COMPILE = torch._inductor.aoti_compile_and_package
_unmarked_compiles = pytest.StashKey[list[str]]()


def _refuse_compile(calls: list[str]) -> Callable[..., object]:
    """A stand-in for ``aoti_compile_and_package`` that records the call and fails."""

    def refuse(*args: object, **kwargs: object) -> object:
        calls.append("aoti_compile_and_package")
        pytest.fail(f"{UNMARKED_COMPILE} (torch._inductor.aoti_compile_and_package called)")

    return refuse


def _fail_if_compiled(item: pytest.Item) -> None:
    """Fail the phase that compiled (once: the record is cleared)."""
    calls = item.stash.get(_unmarked_compiles, None)
    if calls:
        calls.clear()
        pytest.fail(
            f"{UNMARKED_COMPILE}: it called torch._inductor.aoti_compile_and_package, "
            "in the test or in an in-process pytester run (-m 'not compiles' must compile "
            "nothing)",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> object:
    """A test not marked ``compiles`` may not compile a real engine, in its fixtures (of any
    scope), its body or an in-process pytester session: the compile is refused, and the test
    fails saying to mark it. Compiles in a child process (``runpytest_subprocess``, a repro
    script) are out of its sight: such tests are marked by reading them."""
    if item.get_closest_marker("compiles") is None:
        calls: list[str] = []
        item.stash[_unmarked_compiles] = calls
        torch._inductor.aoti_compile_and_package = _refuse_compile(calls)  # type: ignore[assignment]
    try:
        return (yield)
    finally:
        _fail_if_compiled(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    try:
        return (yield)
    finally:
        _fail_if_compiled(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    try:
        return (yield)
    finally:
        torch._inductor.aoti_compile_and_package = _REAL_COMPILE
        _fail_if_compiled(item)


# Models shared by the inner pytest sessions. ``torch.compiler.is_exporting()`` is true only
# while torch.export traces, so a branch on it makes the compiled engine, and only the
# engine, wrong in a known way: honest faults that need no torch bug.
MODELS = textwrap.dedent(
    '''
    import pytest
    import torch
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from pytest_aoti import AotiBufferMutationWarning, AotiCheckError
    from pytest_aoti.torch_bugs import BUFFER_STATE_NOT_CARRIED


    def example():
        return torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


    class DoubleThenCos(torch.nn.Module):
        def forward(self, x):
            x.mul_(2)
            return x.cos()


    class OffWhenCompiled(torch.nn.Module):
        """The engine adds 0.5 to element [1, 0]; eager does not."""

        def forward(self, x):
            y = x * 3
            if torch.compiler.is_exporting():
                y = y + torch.tensor([[0.0, 0.0], [0.5, 0.0], [0.0, 0.0]])
            return y


    class NanWhenCompiled(torch.nn.Module):
        """log() of negative entries: NaN on both sides; the engine adds one NaN more."""

        def forward(self, x):
            y = torch.log(x)
            if torch.compiler.is_exporting():
                y = y * torch.tensor([[1.0, 1.0], [1.0, float("nan")], [1.0, 1.0]])
            return y


    class LosesWrite(torch.nn.Module):
        """Eager writes into x; the traced program does not."""

        def forward(self, x, y):
            if not torch.compiler.is_exporting():
                x.add_(1)
            return y * 2


    class Nested(torch.nn.Module):
        def forward(self, x, y):
            return {"sum": x + y, "rest": (torch.log(x - 3), None, 3, (x > 2).int())}


    class ForgetsBufferState(CustomGraphPass):
        """A compiler fault in the engine only: every read of a buffer the program writes
        back sees zeros, the initial value of the counters here, so the engine's state never
        moves past one call (the signature of pytorch/pytorch#165444, on any torch)."""

        def __call__(self, graph):
            for node in list(graph.nodes):
                if node.target is not torch.ops.aten.copy_.default:
                    continue
                buffer = node.args[0]
                if buffer.op != "get_attr":
                    continue
                with graph.inserting_after(buffer):
                    initial = graph.call_function(torch.ops.aten.mul.Tensor, (buffer, 0))
                buffer.replace_all_uses_with(
                    initial, delete_user_cb=lambda user: user not in (node, initial)
                )

        def uuid(self):
            return "forgets-buffer-state"


    def forgets_buffer_state():
        """``inductor_configs`` that compile an engine with :class:`ForgetsBufferState`."""
        return {"post_grad_custom_post_pass": ForgetsBufferState()}


    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("counter", torch.zeros(1))

        def forward(self, x):
            self.counter.add_(1)
            return x * self.counter


    class Level(torch.nn.Module):
        """Reassigns its buffer: strict export drops the write."""

        def __init__(self):
            super().__init__()
            self.register_buffer("level", torch.zeros(1))

        def forward(self, x):
            self.level = self.level + 1
            return x + self.level


    class Doubling(torch.nn.Module):
        """Reassigns a multi-valued buffer: recorded by non-strict export only."""

        def __init__(self):
            super().__init__()
            self.register_buffer("level", torch.ones(2))

        def forward(self, x):
            self.level = self.level * 2
            return x + self.level


    class RunningMean(torch.nn.Module):
        """A correct stateful program: a running mean over multi-valued buffers."""

        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.tensor([0.5, -1.0]))
            self.register_buffer("count", torch.tensor([1.0, 2.0]))

        def forward(self, x):
            self.count.add_(1)
            self.mean.add_((x.mean(0) - self.mean) / self.count)
            return x - self.mean


    class ListAdd(torch.nn.Module):
        """pytorch/pytorch#139805: exported with one tensor passed five times, the graph
        reads only z."""

        def forward(self, xs, y, z):
            out = y.clone()
            for x in xs:
                out = out + x
            return out + z + y


    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1
    '''
)


@pytest.fixture(scope="session")
def read_back_line() -> str:
    """The fnmatch pattern of a buffer finding's read-back detail: it names the torch bug
    that drops buffer state only on a torch that may have it."""
    from pytest_aoti.torch_bugs import BUFFER_STATE_NOT_CARRIED

    line = "E * the engine's buffer is read back after each call"
    if BUFFER_STATE_NOT_CARRIED.possible_in():
        line += "; a known torch bug on this torch: pytorch/pytorch#165444: *"
    return line


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One artifact cache for every inner pytest session of this run (and every xdist
    worker): a program compiled by one inner session is loaded, not recompiled, by the next."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / "aoti-shared-cache"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@pytest.fixture
def run_aoti(pytester: pytest.Pytester, shared_cache_dir: Path) -> Callable[..., pytest.RunResult]:
    """Write ``source`` (after the shared models) as a test file and run pytest on it."""

    def run(source: str, *args: str) -> pytest.RunResult:
        pytester.makepyfile(test_inner=MODELS + textwrap.dedent(source))
        return pytester.runpytest(
            "--aoti-device=cpu", f"--aoti-cache-dir={shared_cache_dir}", *args
        )

    return run


@pytest.fixture
def run_isolated() -> Callable[[Path, Path], subprocess.CompletedProcess[str]]:
    """Run a repro bundle's script as ``python -I SCRIPT`` in ``cwd``, without the suite's
    PYTHONPATH: what a bundle needs must come with it (or with torch)."""

    def run(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        return subprocess.run(
            [sys.executable, "-I", str(script)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    return run
