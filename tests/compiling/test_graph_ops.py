"""The answers about a graph node's target, where torch's private op classes are read."""

from __future__ import annotations

import operator

import torch

from pytest_aoti.compiling.graph_ops import (
    aten_op,
    control_flow_name,
    is_seeded_random,
    is_view_op,
    op_name,
    schema_arguments,
)


def test_an_overload_is_an_aten_op_and_anything_else_is_not() -> None:
    assert aten_op(torch.ops.aten.mul.Tensor) is torch.ops.aten.mul.Tensor
    assert aten_op(operator.getitem) is None
    assert aten_op(torch.ops.higher_order.cond) is None


def test_views_are_told_from_ops_that_write_new_tensors() -> None:
    assert is_view_op(torch.ops.aten.view.default)
    assert is_view_op(torch.ops.aten.slice.Tensor)
    assert not is_view_op(torch.ops.aten.mul.Tensor)
    assert not is_view_op(operator.getitem)


def test_seeded_random_ops_and_their_switch_arguments() -> None:
    assert is_seeded_random(torch.ops.aten.bernoulli.p)
    assert not is_seeded_random(torch.ops.aten.mul.Tensor)
    names = [argument.name for argument in schema_arguments(torch.ops.aten.dropout.default)]
    assert names == ["input", "p", "train"]


def test_control_flow_is_named_and_ordinary_ops_are_not() -> None:
    assert control_flow_name(torch.ops.higher_order.cond) == "cond"
    assert control_flow_name(torch.ops.aten.mul.Tensor) is None


def test_op_names() -> None:
    assert op_name(torch.ops.aten.mul.Tensor) == "aten.mul.Tensor"
    assert op_name(operator.getitem) == "getitem"
