"""A torch bug that the check a user writes first catches, on every torch measured to have it.

``pytest_aoti.torch_bugs`` records each bug with the releases measured to have it: the test is
a strict xfail there (on the device measured), and a torch that fixes the bug shows it as
XPASS.
"""

import pytest
import torch

from pytest_aoti import AotiCheckError
from pytest_aoti.torch_bugs import UINT8_ANY_RETURNS_BOOL


class AnyPerRow(torch.nn.Module):
    """Which rows of a uint8 mask hold a nonzero entry (a uint8 result, as eager gives)."""

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        return mask.any(dim=1)


@pytest.mark.aoti
def test_any_over_a_uint8_mask(aoti, request):
    if aoti.device.type == "cpu":  # measured on CPU engines
        request.applymarker(
            pytest.mark.xfail(
                raises=AotiCheckError,
                strict=UINT8_ANY_RETURNS_BOOL.measured_in(),
                reason=UINT8_ANY_RETURNS_BOOL.reason(),
            )
        )
    mask = torch.tensor([[0, 1, 0], [0, 0, 0], [3, 0, 0], [0, 0, 7]], dtype=torch.uint8)
    aoti.check(AnyPerRow(), (mask,))
