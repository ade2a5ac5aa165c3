"""The shared helpers: which code is the user's, tracebacks cut to it, the caller of a
warning, the one pytree clone and the element counts localize takes from compare."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import pytest_aoti
from pytest_aoti.compare import compare_leaf
from pytest_aoti.errors import AotiBufferMutationWarning, AotiCheckError, warn_at_caller
from pytest_aoti.frames import caller_stacklevel, is_library_file, is_user_file, pin_to_source
from pytest_aoti.tolerance import Tolerance, mismatch_counts
from pytest_aoti.trees import clone_tree

HERE = str(Path(__file__).resolve())
TORCH_DIR = os.path.dirname(torch.__file__)


def test_user_and_library_files() -> None:
    assert is_user_file(HERE)
    assert is_library_file(torch.__file__)
    assert is_library_file(os.path.join(TORCH_DIR, "_dynamo", "anything.py"))
    assert is_library_file(pytest_aoti.__file__)
    assert is_library_file(os.__file__)
    assert is_library_file("<string>")


def _library_call(callback: Any) -> Any:
    """``callback()`` called from a frame whose file lies inside torch."""
    namespace: dict[str, Any] = {}
    code = compile("def call(f):\n    return f()\n", os.path.join(TORCH_DIR, "fake.py"), "exec")
    exec(code, namespace)
    return namespace["call"](callback)


def test_pin_to_source_keeps_the_innermost_user_frame() -> None:
    def model_line() -> None:
        raise RuntimeError("inside the model")

    try:
        _library_call(model_line)
    except RuntimeError as error:
        caught = error
    frames = []
    tb = caught.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert os.path.join(TORCH_DIR, "fake.py") in frames  # the library frame was there
    pin_to_source(caught)
    assert caught.__traceback__ is not None
    assert caught.__traceback__.tb_next is None
    assert caught.__traceback__.tb_frame.f_code.co_name == "model_line"


def test_pin_to_source_follows_the_chain() -> None:
    try:
        try:
            _library_call(lambda: 1 / 0)
        except ZeroDivisionError as inner:
            raise ValueError("outer") from inner
    except ValueError as error:
        outer = error
    pin_to_source(outer)
    cause = outer.__cause__
    assert cause is not None and cause.__traceback__ is not None
    assert cause.__traceback__.tb_next is None
    assert cause.__traceback__.tb_frame.f_code.co_name == "<lambda>"


def test_warn_at_caller_names_the_callers_line() -> None:
    with pytest.warns(UserWarning, match="from the plugin") as record:
        warn_at_caller(UserWarning("from the plugin"))
        line = sys._getframe().f_lineno - 1
    assert (record[0].filename, record[0].lineno) == (HERE, line)


def test_caller_stacklevel_skips_what_it_is_told_to() -> None:
    def helper() -> int:
        return caller_stacklevel(skip=lambda file: file == HERE)

    # every frame of this file is skipped: the level points past the test, into pytest
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.warn("where", UserWarning, stacklevel=helper())
    assert record[0].filename != HERE


def test_clone_tree_copies_tensors_and_keeps_the_rest() -> None:
    x = torch.ones(2, requires_grad=True)
    tree = {"a": [x, 3, None], "b": (x * 2, "text")}
    cloned = clone_tree(tree)
    assert cloned["a"][1:] == [3, None] and cloned["b"][1] == "text"
    assert cloned["a"] is not tree["a"]
    for original, copy in ((x, cloned["a"][0]), (tree["b"][0], cloned["b"][0])):
        assert torch.equal(original, copy)
        assert copy.data_ptr() != original.data_ptr()
        assert not copy.requires_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_mismatch_counts_agree_with_compare_leaf(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(0)
    want = (torch.rand(40, generator=generator) * 10).to(dtype)
    got = want.clone()
    got[3] += 1
    got[17] -= 2
    if dtype.is_floating_point:
        got[20] += 1e-7  # within tolerance: not counted
    tolerance = Tolerance()
    with pytest.raises(AotiCheckError) as excinfo:
        compare_leaf(want, got, location="node mul", tolerance=tolerance)
    figures = excinfo.value.finding.figures
    assert figures is not None
    counted = mismatch_counts(want, got, tolerance, "node mul")
    assert counted == (figures.mismatched, figures.max_abs, figures.max_rel)
    assert counted[0] == 2
    assert mismatch_counts(want, want.clone(), tolerance) == (0, 0.0, 0.0)


def test_a_plugin_warning_issued_names_the_callers_line() -> None:
    with pytest.warns(AotiBufferMutationWarning, match="shared state") as record:
        AotiBufferMutationWarning("shared state").issue()
        line = sys._getframe().f_lineno - 1
    assert (record[0].filename, record[0].lineno) == (HERE, line)
