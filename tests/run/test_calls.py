"""Resolving a call: what ``aoti.check`` says is checked, layered and moved to the device
once, before anything is exported. Pure logic: nothing here compiles."""

from __future__ import annotations

import pytest
import torch

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.generated.feature import GeneratedOptions
from pytest_aoti.options.catalog import CALL_ARGUMENTS
from pytest_aoti.options.defaults import CheckDefaults
from pytest_aoti.plugins import default_catalog
from pytest_aoti.probes.feature import ProbeOptions
from pytest_aoti.run.resolve import resolve_call
from pytest_aoti.tester import AotiTester
from pytest_aoti.threads.feature import ThreadsOptions

# the whole option table, also where the run blocks the feature plugins
RUN = default_catalog()
"""The whole option table, also where the run blocks the feature plugins."""

CPU = torch.device("cpu")


def test_a_call_is_layered_over_its_defaults() -> None:
    module = torch.nn.Linear(2, 2)
    x, y = torch.ones(1, 2), torch.ones(3, 2)
    marked = CheckDefaults(
        catalog=RUN, rtol=0.5, strict=True, inductor_configs={"max_autotune": False}
    ).overridden(examples=5)
    call = resolve_call(
        marked,
        CPU,
        module,
        (x,),
        {"scale": 2},
        samples=[(y,)],
        dynamic_shapes={"input": {0: torch.export.Dim("batch")}},
        calls=3,
        options={
            "atol": 0.25,
            "probes": " Off ",
            "threads": None,
            "inductor_configs": {"freezing": False},
        },
    )
    assert call.module is module  # on the device already: not copied
    assert [args for args, _ in call.input_sets] == [(x,), (y,)]
    assert all(kwargs == {"scale": 2} for _, kwargs in call.input_sets)
    assert call.options.of(GeneratedOptions).examples == 5
    assert (call.options.of(ProbeOptions).probes, call.options.of(ThreadsOptions).threads) == (
        "off",
        1,
    )
    assert call.tolerance.rtol == 0.5 and call.tolerance.atol == 0.25
    assert call.export_kwargs == {"strict": True}
    assert call.inductor_configs == {"max_autotune": False, "freezing": False}
    assert (call.calls, call.expect_at) == (3, 3)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"mutates": [1, 2]}, "mutates must be a dict of input name to expected value"),
        ({"mutated_buffers": "counter"}, "mutated_buffers must be a set, list or tuple"),
        ({"calls": 0}, "calls must be a positive int, got 0"),
        ({"dynamic_shapes": "guess"}, 'dynamic_shapes must be a torch.export spec or "auto"'),
        ({"dynamic_shapes": "auto"}, r'dynamic_shapes="auto" needs samples=\[...\]'),
        ({"options": {"threads": 0}}, "^threads must be a positive int, got 0$"),
        ({"options": {"strict": "yes"}}, "^strict must be True or False, got 'yes'$"),
        ({"options": {"rtol": "tight"}}, "^rtol must be a non-negative number"),
        ({"options": {"max_dim": 8}}, "aoti.check.. got unknown option.s. max_dim"),
    ],
)
def test_a_wrong_call_is_refused_before_anything_moves(
    given: dict[str, object], message: str
) -> None:
    with pytest.raises(AotiUsageError, match=message):
        resolve_call(CheckDefaults(catalog=RUN), CPU, torch.nn.ReLU(), (torch.ones(2),), **given)  # type: ignore[arg-type]


def test_unknown_inductor_configs_are_refused_before_anything_moves() -> None:
    with pytest.raises(AotiUsageError, match="no_such_inductor_key"):
        resolve_call(
            CheckDefaults(catalog=RUN),
            CPU,
            torch.nn.ReLU(),
            (torch.ones(2),),
            options={"inductor_configs": {"no_such_inductor_key": 1}},
        )


def test_a_factory_mapping_takes_the_calls_keywords() -> None:
    assert RUN.check_keywords() == (*CALL_ARGUMENTS, *RUN.keyword_options())
    assert {"rtol", "probes_skip", "max_extra_bytes", "samples"} <= set(RUN.check_keywords())
    assert "max_dim" not in RUN.check_keywords()  # a marker option only


def test_aoti_check_names_no_option_as_a_parameter() -> None:
    """Every option is a keyword of ``**options``, checked against its row: none is a
    parameter of its own, so a new option needs no edit of the tester."""
    import inspect

    parameters = inspect.signature(AotiTester.check).parameters
    named = [name for name in parameters if name not in ("self", "module", "args", "kwargs")]
    assert named == [*CALL_ARGUMENTS, "options"]
    assert not set(named) & set(RUN.keyword_options())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cpu_module_is_moved_to_cuda_once_and_the_callers_stay() -> None:
    module, x = torch.nn.Linear(2, 2), torch.ones(1, 2)
    cuda = torch.device("cuda")
    call = resolve_call(
        CheckDefaults(catalog=RUN), cuda, module, (x,), samples=[(x,)], dynamic_shapes={}
    )
    assert call.module is not module and next(call.module.parameters()).is_cuda
    assert next(module.parameters()).device == CPU and x.device == CPU
    assert all(args[0].is_cuda for args, _ in call.input_sets)
    # a module already on the device is used as it is
    assert resolve_call(CheckDefaults(catalog=RUN), cuda, call.module, (x,)).module is call.module
