"""Small models a user would check before shipping: a conv net and an MLP with a dynamic batch."""

import pytest
import torch
from hypothesis import given, settings
from torch.export import Dim

from pytest_aoti.strategies import inputs_for

BATCH = Dim("batch", min=1, max=64)


class SmallConvNet(torch.nn.Module):
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


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)
        )

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.layers(x)
        return {"hidden": hidden, "score": hidden.sum(dim=-1)}


@pytest.mark.aoti(rtol=1e-4, atol=1e-4)
def test_small_conv_net(aoti):
    torch.manual_seed(0)
    aoti.check(SmallConvNet().eval(), (torch.randn(2, 3, 16, 16),), mutates={})


@pytest.mark.aoti
def test_mlp_dynamic_batch(aoti):
    torch.manual_seed(0)
    result = aoti.check(
        MLP(),
        (torch.randn(4, 32),),
        dynamic_shapes=({0: BATCH},),
        samples=[(torch.randn(7, 32),), (torch.randn(33, 32),)],
    )
    # besides the three given batches, 20 generated ones inside [1, 64]: one compile for all
    assert result.figures["examples"] >= 20
    assert result.max_abs < 1e-4


@pytest.mark.aoti
def test_mlp_engine_in_your_own_given_test(aoti):
    """The plugin's strategies in a hand-written Hypothesis test; same program, no new compile."""
    torch.manual_seed(0)
    module = MLP().to(aoti.device)  # the engine and its inputs live on the test's device
    example = (torch.randn(4, 32, device=aoti.device),)
    program = aoti.compile(module, example, dynamic_shapes=({0: BATCH},))

    @settings(max_examples=10, deadline=None)
    @given(inputs_for(program, like=example))
    def engine_matches_eager(inputs):
        args, kwargs = inputs
        with torch.no_grad():
            torch.testing.assert_close(program(*args, **kwargs), module(*args, **kwargs))

    engine_matches_eager()
