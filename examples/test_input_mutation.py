"""The input-mutation cases of AOTInductor: an input mutated and not returned, an input
mutated and returned, a registered buffer used as a counter, a running mean kept in
buffers, and a buffer reassigned rather than updated in place."""

import pytest
import torch

from pytest_aoti import AotiBufferMutationWarning, AotiCheckError
from pytest_aoti.torch_bugs import BUFFER_STATE_NOT_CARRIED


class DoubleThenCos(torch.nn.Module):
    """Mutates its input and returns something else."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x.cos()


class AddOneInPlace(torch.nn.Module):
    """Mutates its input and returns it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.add_(1)


class Counter(torch.nn.Module):
    """Counts its calls in a registered buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("counter", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.counter.add_(1)
        return x * self.counter


def example_input() -> torch.Tensor:
    return torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


@pytest.mark.aoti
def test_input_mutated_not_returned(aoti):
    x = example_input()
    aoti.check(DoubleThenCos(), (x,), mutates={"x": [[2.0, 4.0], [6.0, 8.0], [10.0, 12.0]]})
    assert torch.equal(x, example_input()), "check() never touches the caller's tensors"


@pytest.mark.aoti
def test_input_mutated_across_calls(aoti):
    calls = 3
    aoti.check(
        DoubleThenCos(), (example_input(),), mutates={"x": example_input() * 2**calls}, calls=calls
    )


@pytest.mark.aoti
def test_engine_writes_into_callers_tensor(aoti):
    program = aoti.compile(DoubleThenCos(), (example_input(),))
    assert program.mutated_inputs == {"x"}
    assert program.signature.output_kinds == ("USER_INPUT_MUTATION", "USER_OUTPUT")
    x = example_input().to(aoti.device)  # the engine takes inputs on its own device
    address = x.data_ptr()
    program(x)
    program(x)
    assert x.data_ptr() == address
    torch.testing.assert_close(x.cpu(), example_input() * 4)


@pytest.mark.aoti
def test_input_mutated_and_returned(aoti):
    aoti.check(AddOneInPlace(), (example_input(),), mutates={"x": example_input() + 2}, calls=2)


class RunningMean(torch.nn.Module):
    """A correct stateful program: a running mean over a multi-valued buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.5, -1.0]))
        self.register_buffer("count", torch.tensor([1.0, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        self.mean.add_((x.mean(0) - self.mean) / self.count)
        return x - self.mean


class Level(torch.nn.Module):
    """Reassigns its buffer instead of updating it in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("level", torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.level = self.level * 2
        return x + self.level


@pytest.mark.aoti
def test_buffer_counter_first_call(aoti):
    """The first call alone is right; state across calls is what the engine gets wrong.

    ``mutated_buffers=`` declares the buffer state: no note about it then."""
    aoti.check(Counter(), (example_input(),), mutates={}, mutated_buffers={"counter"}, calls=1)


@pytest.mark.aoti
@pytest.mark.filterwarnings("ignore::pytest_aoti.AotiBufferMutationWarning")
@pytest.mark.xfail(
    raises=AotiCheckError,
    # strict where the bug was measured; where torch fixed it, a pass shows as XPASS
    strict=BUFFER_STATE_NOT_CARRIED.measured_in(),
    reason=BUFFER_STATE_NOT_CARRIED.reason(),
)
def test_buffer_counter(aoti):
    # no options: a program that mutates buffers is called twice by default
    aoti.check(Counter(), (example_input(),))


@pytest.mark.aoti
def test_running_mean(aoti):
    torch.manual_seed(0)
    aoti.check(RunningMean(), (torch.randn(4, 2),), mutated_buffers={"mean", "count"})


@pytest.mark.aoti
@pytest.mark.filterwarnings("ignore:While compiling, we found certain side effects")
def test_strict_export_drops_a_reassigned_buffer(aoti):
    """Strict export records no mutation for ``self.level = ...``: the engine would keep
    the exported value forever. The plain check says so, naming the buffer."""
    with pytest.raises(AotiCheckError, match="buffer 'level' changed in eager but not recorded"):
        aoti.check(Level(), (example_input(),), strict=True)


@pytest.mark.aoti
def test_non_strict_export_records_the_reassignment(aoti):
    aoti.check(Level(), (example_input(),), strict=False, mutated_buffers={"level"})


@pytest.mark.aoti
def test_buffer_state_is_not_thread_safe(aoti):
    """One engine serving several threads shares its buffers between them: the
    thread-safety check fails a stateful program, naming its buffers."""
    with pytest.raises(AotiCheckError, match=r"buffer 'counter' makes the program not thread-safe"):
        aoti.check(Counter(), (example_input(),), mutated_buffers={"counter"}, calls=1, threads=4)


@pytest.mark.aoti
def test_undeclared_buffer_state_warns_where_threads_are_checked(aoti):
    """A buffer-mutating program without ``mutated_buffers=`` is a note in the terminal
    summary; it warns only in a check that asked for ``threads=``, and fails there."""
    with pytest.warns(AotiBufferMutationWarning, match="not thread-safe"):
        with pytest.raises(AotiCheckError, match="not thread-safe"):
            aoti.check(RunningMean(), (torch.randn(4, 2),), threads=2)
