"""Known torch bugs, each with the torch releases measured to have it: messages blame a bug only
on a torch that may have it, and examples are strict xfails only where it was measured."""

from __future__ import annotations

import re
from dataclasses import dataclass

Release = tuple[int, ...]


def release(version: str) -> Release:
    """``(2, 14, 1)`` for ``"2.14.1+cu130"``, ``(2, 16, 0)`` for ``"2.16.0a0+git1234"``."""
    parts: list[int] = []
    for part in version.split("+")[0].split(".")[:3]:
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def torch_release() -> Release:
    """The running torch's release, e.g. ``(2, 13, 0)``."""
    import torch  # torch loads on first use

    return release(torch.__version__)


@dataclass(frozen=True)
class TorchBug:
    """A torch bug, the releases measured to have it and the first measured without it."""

    issue: str
    """Where it is tracked, e.g. ``pytorch/pytorch#165444``."""
    summary: str
    """What goes wrong, in one clause."""
    measured: tuple[str, ...]
    """The releases measured to have it, oldest first."""
    fixed_in: str | None = None
    """The first release measured without it; None while every release measured has it."""

    def measured_in(self, version: Release | None = None) -> bool:
        """Whether ``version`` (default: torch's) lies within the releases measured with the bug."""
        version = torch_release() if version is None else version
        return release(self.measured[0]) <= version <= release(self.measured[-1])

    def possible_in(self, version: Release | None = None) -> bool:
        """Whether ``version`` (default: torch's) precedes the first release measured without it."""
        version = torch_release() if version is None else version
        return self.fixed_in is None or version < release(self.fixed_in)

    def reason(self) -> str:
        """The bug as one line, for an xfail's reason or a failure's detail."""
        return f"{self.issue}: {self.summary}"


BUFFER_STATE_NOT_CARRIED = TorchBug(
    issue="pytorch/pytorch#165444",
    summary="the engine does not carry the new value of a registered buffer initialized "
    "with one value (e.g. torch.zeros(1)) to the next call",
    measured=("2.11.0", "2.13.0", "2.14.1"),
    fixed_in="2.15.0",
)

UINT8_ANY_RETURNS_BOOL = TorchBug(
    issue="pytorch/pytorch#198081",
    summary="any(dim) over a uint8 tensor returns a bool tensor from the engine where eager "
    "returns uint8",
    measured=("2.11.0", "2.13.0", "2.14.1", "2.15.0"),
)

NEXTAFTER_STEPS_A_FLOAT32_ULP = TorchBug(
    issue="pytorch/pytorch#187340",
    summary="nextafter on float16 and bfloat16 inputs steps by a float32 ulp in the engine, "
    "where eager steps one ulp of the input's dtype",
    measured=("2.13.0", "2.14.1"),
)

MINIMUM_OF_ZEROS_ONE_ELEMENT = TorchBug(
    issue="pytorch/pytorch#194347",
    summary="minimum and maximum of -0.0 and +0.0 return the other zero in Inductor's CPU code "
    "than in eager (on one-element bfloat16 inputs, 1 / minimum(x, y) answers +inf for -inf)",
    measured=("2.13.0",),
)

COMPLEX_SCALAR_PROMOTED = TorchBug(
    issue="no upstream issue found (raw reproduction: tests/checks/test_input_signatures.py)",
    summary="a 0-dim complex64 tensor times a Python float comes back from the engine as "
    "complex128, where eager keeps complex64",
    measured=("2.13.0", "2.15.0"),
)

FOLDED_WEIGHT_NOT_SWAPPABLE = TorchBug(
    issue="no upstream issue found (raw reproduction: tests/weights/test_raw_swap.py; fixes "
    "in this path: pytorch/pytorch PRs 161887, 179225)",
    summary="compiled with default options, the engine of l2(relu(l1(x))) lists no l2.bias "
    "among its constants (get_constant_fqns), nor that of tanh(l1(x)) * scale its l1.bias and "
    "buffer scale: their values are folded into the compiled code, load_constants refuses "
    "them and a swap of the others keeps the compiled values",
    measured=("2.13.0", "2.15.0"),
)
