"""Deployment probes: what the engine you ship does with inputs other than your example.

A passing check certifies the engine on the test's own tensors. Image pipelines hand a
model channels_last tensors and cropped views every day, and an AOTInductor engine checks
none of that unless the serving process sets ``AOTI_RUNTIME_CHECK_INPUTS=1``. After each
passing check the plugin calls the raw engine with such variants (in a child process) and
lists what it gets silently wrong under "aoti: deployment hazards" in the summary.
"""

import pytest
import torch

from pytest_aoti import AotiCheckError


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.b(self.c(x)).relu() * x.mean(1, keepdim=True)).sum(dim=(2, 3))


def conv_net() -> ConvNet:
    torch.manual_seed(0)
    return ConvNet().eval()


@pytest.mark.aoti
def test_conv_net_in_channels_last_is_a_documented_hazard(aoti):
    """Exported with a contiguous example, the engine returns wrong values for the same
    images in channels_last (max abs error about 5 on torch 2.13 CPU), with no error; with
    ``AOTI_RUNTIME_CHECK_INPUTS=1`` it refuses them. The default policy reports it."""
    result = aoti.check(conv_net(), (torch.randn(2, 3, 8, 8),))
    assert result.probes is not None and result.probes.outcomes
    outcomes = {(probe.input, probe.variant): probe for probe in result.probes.outcomes}
    if aoti.device.type == "cpu":  # other kernels run on CUDA: outcomes may differ there
        channels_last = outcomes[("x", "channels_last")]
        assert channels_last.outcome == "wrong"
        assert channels_last.refused_with_checks
        assert "AOTI_RUNTIME_CHECK_INPUTS=1" in channels_last.remedy


@pytest.mark.aoti
def test_conv_net_fails_under_probes_fail(aoti):
    """``probes="fail"`` turns the hazard into a failed check: a finding of kind "probe"
    at stage "compile" (the exported program accepts the input, the engine differs),
    whose repro bundle (``--aoti-keep-failed``) holds the channels_last input."""
    if aoti.device.type != "cpu":
        pytest.skip("the channels_last hazard is measured on CPU")
    with pytest.raises(AotiCheckError) as failed:
        aoti.check(conv_net(), (torch.randn(2, 3, 8, 8),), probes="fail")
    assert failed.value.kind == "probe" and failed.value.stage == "compile"
    assert "input 'x' channels_last" in str(failed.value)


LAYOUTS = {"channels_last", "permuted", "strided_slice", "storage_offset"}


@pytest.mark.aoti(probes="fail", probes_skip={"x": LAYOUTS})
def test_conv_net_that_callers_feed_contiguous(aoti):
    """A model whose callers always pass contiguous images opts out of the layout probes:
    the remaining variants (other sizes, dtypes) fail nothing, since the exported program
    refuses them itself."""
    result = aoti.check(conv_net(), (torch.randn(2, 3, 8, 8),))
    assert result.probes is not None
    assert not result.probes.wrong
