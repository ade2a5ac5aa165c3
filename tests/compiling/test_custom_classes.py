"""Custom classes in inputs and outputs: each message names the one call that makes the class
work from export to engine, at export (or, for an input, before it), never one step later; a
constant leaf of an output is named by its path before the compile; a serialization error in
the compile is not blamed on Inductor. Exports only: nothing here compiles.

pytree registrations are global to the process: every inner file names its classes apart."""

from __future__ import annotations

import pytest

from pytest_aoti.compiling.explain import compile_failure
from pytest_aoti.compiling.tree_types import missing_registration, named_registration_call

HEADER = """
import collections
import dataclasses
import typing

import torch.utils._pytree as pytree

x = torch.ones(3, 2)
"""


def test_an_unregistered_dataclass_gets_the_call_that_registers_it_with_its_name(run_aoti) -> None:
    result = run_aoti(
        HEADER
        + """
@dataclasses.dataclass
class PlainOut:
    k: torch.Tensor
    v: torch.Tensor


class ReturnsPlain(torch.nn.Module):
    def forward(self, x):
        return PlainOut(x + 1, x * 2)


class TakesPlain(torch.nn.Module):
    def forward(self, cache):
        return cache.k + cache.v


def test_out(aoti):
    aoti.check(ReturnsPlain(), (x,))


def test_in(aoti):
    aoti.check(TakesPlain(), (PlainOut(x, x),))
"""
    )
    result.assert_outcomes(failed=2)
    call = 'torch.export.register_dataclass(PlainOut, serialized_type_name="test_inner.PlainOut")'
    result.stdout.fnmatch_lines(
        [
            "E * torch.export.export failed: Found <class 'test_inner.PlainOut'> in output, *",
            "E *What to try: test_inner.PlainOut in the output is not a pytree type: register it "
            f"before exporting, with the serialized name the AOTI package needs: {call}; *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E * torch.export.export failed: Unsupported input type <class 'test_inner.PlainOut'>*",
            f"E *What to try: test_inner.PlainOut in the input is not a pytree type: *{call}; *",
        ]
    )
    assert "strict=" not in result.stdout.str()


def test_a_registration_without_a_serialized_name_is_refused_at_export(run_aoti) -> None:
    result = run_aoti(
        HEADER
        + """
@dataclasses.dataclass
class UnnamedCache:
    k: torch.Tensor
    v: torch.Tensor


torch.export.register_dataclass(UnnamedCache)


class ReturnsUnnamed(torch.nn.Module):
    def forward(self, x):
        return UnnamedCache(x + 1, x * 2)


class TakesUnnamed(torch.nn.Module):
    def forward(self, cache):
        return cache.k + cache.v


def test_out(aoti):
    aoti.check(ReturnsUnnamed(), (x,))


def test_in(aoti):
    aoti.check(TakesUnnamed(), (UnnamedCache(x, x),))
"""
    )
    result.assert_outcomes(failed=2)
    lacks = (
        "a pytree node registered without a serialized_type_name (the AOTI package stores "
        "the tree's structure by it)"
    )
    hint = (
        "What to try: register it once, in place of the registration it has, with "
        "torch.export.register_dataclass(UnnamedCache, "
        'serialized_type_name="test_inner.UnnamedCache")'
    )
    result.stdout.fnmatch_lines(
        [
            "E *AotiExportError: torch.export.export failed: test_inner.UnnamedCache in the "
            f"outputs is {lacks}",
            f"E *{hint}",
        ]
    )
    result.stdout.fnmatch_lines(
        [f"E *AotiUsageError: test_inner.UnnamedCache in the inputs is {lacks}", f"E *{hint}"]
    )
    assert "No registered serialization name" not in result.stdout.str()
    assert "aoti: compiling" not in result.stdout.str()


def test_a_registration_without_keys_is_refused_at_export_not_in_the_comparison(run_aoti) -> None:
    result = run_aoti(
        HEADER
        + """
class KeylessPair:
    def __init__(self, a, b):
        self.a, self.b = a, b


pytree.register_pytree_node(
    KeylessPair,
    lambda pair: ([pair.a, pair.b], None),
    lambda values, context: KeylessPair(*values),
    serialized_type_name="test_inner.KeylessPair",
)


class ReturnsKeyless(torch.nn.Module):
    def forward(self, x):
        return KeylessPair(x + 1, x * 2)


class TakesKeyless(torch.nn.Module):
    def forward(self, pair):
        return pair.a + pair.b


def test_out(aoti):
    aoti.check(ReturnsKeyless(), (x,))


def test_in(aoti):
    aoti.check(TakesKeyless(), (KeylessPair(x, x),))
"""
    )
    result.assert_outcomes(failed=2)
    lacks = (
        "a pytree node registered without a flatten_with_keys_fn (each leaf is compared and "
        "named by its path)"
    )
    hint = (
        "What to try: register it once, in place of the registration it has, with "
        "torch.utils._pytree.register_pytree_node(KeylessPair, flatten_fn, unflatten_fn, "
        'serialized_type_name="test_inner.KeylessPair", flatten_with_keys_fn=flatten_with_keys_fn)'
    )
    result.stdout.fnmatch_lines(
        [
            "E *AotiExportError: torch.export.export failed: test_inner.KeylessPair in the "
            f"outputs is {lacks}",
            f"E *{hint}",
        ]
    )
    result.stdout.fnmatch_lines(
        [f"E *AotiUsageError: test_inner.KeylessPair in the inputs is {lacks}", f"E *{hint}"]
    )
    assert "Did not find a flatten_with_keys_fn" not in result.stdout.str()


TORCH_RESULT = """

class ReturnsMax(torch.nn.Module):
    def forward(self, x):
        return x.max(0)


def test_max(aoti):
    aoti.check(ReturnsMax(), (x,))
"""


def result_unnamed() -> bool:
    """Whether this torch registers its result classes without a serialized name (2.13 does;
    2.15 names them, once torch.export is imported)."""
    import torch.export  # noqa: F401  (registers torch's result classes where it names them)

    return bool(missing_registration(torch.return_types.max))


def test_namedtuple_and_torch_result_outputs_are_refused_at_export(run_aoti) -> None:
    unnamed = result_unnamed()
    result = run_aoti(
        HEADER
        + """
class ResultPair(typing.NamedTuple):
    low: torch.Tensor
    high: torch.Tensor


class ReturnsNamedtuple(torch.nn.Module):
    def forward(self, x):
        return ResultPair(x - 1, x + 1)


def test_namedtuple(aoti):
    aoti.check(ReturnsNamedtuple(), (x,))
"""
        + (TORCH_RESULT if unnamed else "")
    )
    result.assert_outcomes(failed=2 if unnamed else 1)
    result.stdout.fnmatch_lines(
        [
            "E * torch.export.export failed: test_inner.ResultPair in the outputs is a "
            "namedtuple, a pytree node without a serialized_type_name *",
            "E *What to try: register it before exporting with "
            "torch.utils._pytree._register_namedtuple(ResultPair, "
            'serialized_type_name="test_inner.ResultPair")',
        ]
    )
    if not unnamed:  # this torch names its result classes: they compile
        return
    result.stdout.fnmatch_lines(
        [
            "E * torch.export.export failed: torch.return_types.max in the outputs is a result "
            "class torch registers without a serialized_type_name *",
            "E *What to try: return a plain tuple in its place: tuple(result)",
        ]
    )


def test_a_str_field_of_an_output_is_named_with_its_path_before_the_compile(run_aoti) -> None:
    result = run_aoti(
        HEADER
        + """
@dataclasses.dataclass
class Labelled:
    k: torch.Tensor
    name: str


torch.export.register_dataclass(Labelled, serialized_type_name="test_inner.Labelled")


class ReturnsLabel(torch.nn.Module):
    def forward(self, x):
        return Labelled(x + 1, "hello")


def test_label(aoti):
    aoti.check(ReturnsLabel(), (x,))
"""
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * AOTI compile failed: output.name is the Python str 'hello', a constant the "
            "AOTI engine cannot return",
            "E *tensors, None, int and bool outputs compile (the engine returns an int or bool "
            "as a 0-dim tensor)",
            "E *What to try: where it is the same on every call, carry it in Labelled's pytree "
            "context rather than as a leaf, and the engine returns the value exported: "
            "torch.utils._pytree.register_pytree_node(Labelled, flatten_fn, unflatten_fn, "
            'serialized_type_name="test_inner.Labelled", *), whose flatten_fn returns the '
            "tensors and obj.name as the context; else leave it out of the outputs",
        ]
    )


def test_a_serialization_error_in_the_compile_is_not_blamed_on_inductor() -> None:
    error = NotImplementedError(
        "No registered serialization name for <class 'mylib.cache.Box'> found. Please update "
        "your _register_pytree_node call with a `serialized_type_name` kwarg."
    )
    hint = compile_failure(error).splitlines()[-1]
    assert hint.startswith("  What to try: the program exported and decomposed, but the AOTI "), (
        hint
    )
    assert "inductor" not in hint.lower(), hint
    assert 'serialized_type_name="mylib.cache.Box"' in hint, hint
    namedtuple = NotImplementedError(
        "Can't serialize TreeSpec of namedtuple class <class 'mylib.Pair'> because we didn't "
        "register a serializated_type_name. Please register using `_register_namedtuple`."
    )
    assert 'serialized_type_name="mylib.Pair"' in compile_failure(namedtuple)


@pytest.mark.parametrize(
    ("path", "call"),
    [
        (
            "collections.OrderedDict",
            "torch.utils._pytree.register_pytree_node(OrderedDict, flatten_fn, unflatten_fn, "
            'serialized_type_name="collections.OrderedDict", '
            "flatten_with_keys_fn=flatten_with_keys_fn)",
        ),
        (
            "mylib.test_fn.<locals>.Box",
            "torch.export.register_dataclass(Box, "
            'serialized_type_name="mylib.test_fn.<locals>.Box") '
            "for a dataclass, else torch.utils._pytree.register_pytree_node(Box, flatten_fn, "
            'unflatten_fn, serialized_type_name="mylib.test_fn.<locals>.Box", '
            "flatten_with_keys_fn=flatten_with_keys_fn)",
        ),
    ],
)
def test_the_call_is_found_by_class_or_given_for_both_kinds(path: str, call: str) -> None:
    assert named_registration_call(path) == call
