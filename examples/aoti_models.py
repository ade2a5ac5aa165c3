"""Model factories checked with no test file: ``pytest --aoti-model=aoti_models:ALL``.

Each factory returns a module and its example inputs; pytest-aoti calls it inside its test,
after ``torch.manual_seed(0)``, and runs the full default check (export, decompose, compile,
parity of outputs and of inputs the program writes).
"""

import torch
from torch.export import Dim


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class SignSwitch(torch.nn.Module):
    """Branches on the data: torch.export cannot trace it (stage export)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x + 1
        return x - 1


def good():
    """``(module, args)``."""
    return Mlp(), (torch.randn(4, 8),)


def good_dynamic(device):
    """A mapping with ``aoti.check`` keywords; ``device`` is the run's device."""
    return {
        "module": Mlp(),
        "args": (torch.randn(4, 8, device=device),),
        "dynamic_shapes": {"x": {0: Dim("batch", min=1, max=16)}},
        "examples": 4,
    }


def broken():
    return SignSwitch(), (torch.randn(3),)


ALL = [good, broken]
