"""What an exported program says about mutation, read from the decomposed program (only
``run_decompositions()`` fills the maps). Their keys are output node names that change with the
op, so only the values (input names, buffer FQNs) are kept."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.export import ExportedProgram


@dataclass(frozen=True)
class MutationSignature:
    """A decomposed program's graph signature as plain data, stored with a cached package."""

    user_inputs: tuple[str, ...]
    """Names of the user inputs in flattening order (tensor and constant inputs)."""
    mutated_inputs: frozenset[str]
    """User inputs the program writes to (values of ``user_inputs_to_mutate``)."""
    mutated_buffers: frozenset[str]
    """Buffer FQNs the program writes to (values of ``buffers_to_mutate``)."""
    output_kinds: tuple[str, ...]
    """``OutputKind`` names of every graph output, e.g. ``USER_INPUT_MUTATION``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "user_inputs": list(self.user_inputs),
            "mutated_inputs": sorted(self.mutated_inputs),
            "mutated_buffers": sorted(self.mutated_buffers),
            "output_kinds": list(self.output_kinds),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MutationSignature:
        return cls(
            user_inputs=tuple(data["user_inputs"]),
            mutated_inputs=frozenset(data["mutated_inputs"]),
            mutated_buffers=frozenset(data["mutated_buffers"]),
            output_kinds=tuple(data["output_kinds"]),
        )


def read_signature(decomposed: ExportedProgram) -> MutationSignature:
    """Summarize the mutation maps of a program returned by ``run_decompositions()``."""
    signature = decomposed.graph_signature
    return MutationSignature(
        user_inputs=read_signature_names(decomposed),
        mutated_inputs=frozenset(signature.user_inputs_to_mutate.values()),
        mutated_buffers=frozenset(signature.buffers_to_mutate.values()),
        output_kinds=tuple(spec.kind.name for spec in signature.output_specs),
    )


def flat_user_inputs(
    program: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[Any]:
    """``(args, kwargs)`` flattened in the program's user-input order."""
    import torch.utils._pytree as pytree

    return pytree.tree_flatten((tuple(args), ordered_kwargs(program, kwargs)))[0]


def ordered_kwargs(program: ExportedProgram, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` in the order ``program`` flattens its keyword inputs (the forward's)."""
    keywords = _layout(program).keywords
    if keywords is None:
        return dict(kwargs)
    return {name: kwargs[name] for name in keywords if name in kwargs}


def named_user_inputs(
    program: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Each user-input name (``x``, ``xs_0``, a keyword) of ``program`` to the caller's leaf."""
    mismatch = describe_call_mismatch(program, args, kwargs)
    if mismatch is not None:
        raise ValueError(mismatch)
    names = _layout(program).names
    leaves = flat_user_inputs(program, args, kwargs)
    if len(names) != len(leaves):
        raise ValueError(
            f"the program takes {len(names)} inputs ({', '.join(names)}) "
            f"but {len(leaves)} were given"
        )
    return dict(zip(names, leaves))


def describe_call_mismatch(
    program: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> str | None:
    """How ``(args, kwargs)`` differs from the exported structure, how to call; else None."""
    import torch.utils._pytree as pytree

    layout = _layout(program)
    in_spec = layout.in_spec
    if in_spec is None or in_spec.num_children != 2:
        return None
    keywords, positional = layout.keyword_names, layout.positional
    if len(args) != len(positional) or set(kwargs) != set(keywords):
        return _layout_mismatch(positional, keywords, args, kwargs)
    given = (tuple(args), {name: kwargs[name] for name in keywords})
    if pytree.tree_flatten(given)[1] == in_spec:
        return None
    labels = _exported_leaf_labels(program)
    if len(labels) != in_spec.num_leaves:
        labels = ["?"] * in_spec.num_leaves
    exported = pytree.tree_unflatten(labels, in_spec)
    return (
        f"input structure differs from export: exported {_render_call(exported)}, "
        f"got {_render_call(pytree.tree_map(_leaf_label, given))}: pass the same nesting "
        "(and number of elements)"
    )


@dataclass(frozen=True)
class _CallLayout:
    """How ``program`` is called, read once per program: ``call_spec`` is rebuilt on every
    access, and a search reads it several times per input set."""

    in_spec: Any
    keywords: tuple[str, ...] | None
    """The keyword inputs in flattening order (None: the spec names none)."""
    positional: list[str]
    names: tuple[str, ...]
    """:func:`read_signature_names`."""

    @property
    def keyword_names(self) -> list[str]:
        return [str(name) for name in (self.keywords or [])]


_LAYOUTS: weakref.WeakKeyDictionary[Any, _CallLayout] = weakref.WeakKeyDictionary()


def _layout(program: ExportedProgram) -> _CallLayout:
    layout = _LAYOUTS.get(program)
    if layout is None:
        in_spec = program.call_spec.in_spec
        keywords, positional = None, []
        if in_spec is not None and in_spec.num_children == 2:
            context = _child(in_spec, 1).context
            keywords = tuple(context) if context is not None else None
            positional = _positional_names(program, _child(in_spec, 0).num_children)
        layout = _CallLayout(in_spec, keywords, positional, read_signature_names(program))
        _LAYOUTS[program] = layout
    return layout


def _child(spec: Any, index: int) -> Any:
    # ``child()`` replaced ``children_specs`` in torch 2.10; older releases lack it.
    return spec.child(index) if hasattr(spec, "child") else spec.children_specs[index]


def forward_arg_names(program: ExportedProgram) -> list[str]:
    """The forward's parameter names from the program's module call graph (empty where none)."""
    call_graph = program.module_call_graph
    signature = call_graph[0].signature if call_graph else None
    return list(getattr(signature, "forward_arg_names", None) or [])


def _positional_names(program: ExportedProgram, count: int) -> list[str]:
    names = forward_arg_names(program)
    if len(names) < count:
        names += [f"arg{index}" for index in range(len(names), count)]
    return names[:count]


def _layout_mismatch(
    positional: list[str], keywords: list[str], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> str:
    """Positional and keyword inputs that differ from export, and what to pass instead."""
    takes = f"the program takes {_count(len(positional), 'positional input')}"
    if positional:
        takes += f" ({', '.join(positional)})"
    if keywords:
        takes += f" and {_count(len(keywords), 'keyword input')} ({', '.join(keywords)})"
    got = f"got {len(args)} positional"
    if kwargs:
        given = ", ".join(f"{name}={_leaf_label(value)}" for name, value in kwargs.items())
        got += f" and keyword {given}"
    advice = []
    as_keywords = [name for name in kwargs if name in positional]
    if as_keywords:
        which = "it" if len(as_keywords) == 1 else ", ".join(as_keywords)
        advice.append(f"pass {which} positionally, as at export")
    extra = len(args) - len(positional)
    if extra > 0 and keywords:
        advice.append(f"pass {', '.join(keywords[:extra])} as keyword, as at export")
    unknown = [name for name in kwargs if name not in positional and name not in keywords]
    if unknown:
        advice.append(f"the program has no input {', '.join(unknown)}")
    missing = [name for name in keywords if name not in kwargs][max(extra, 0) :]
    if missing and not unknown:
        advice.append(f"keyword {', '.join(missing)} missing")
    if not advice or missing:
        call = ", ".join([*positional, *(f"{name}={name}" for name in keywords)])
        advice.append(f"call it as at export: program({call})")
    return f"{takes}; {got}: {'; '.join(advice)}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _exported_leaf_labels(program: ExportedProgram) -> list[str]:
    """``Tensor``, ``int``, ``float``... for each user input, in flattening order."""
    from torch.export.graph_signature import ConstantArgument, InputKind, TensorArgument

    labels = []
    for spec in program.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        if isinstance(spec.arg, TensorArgument):
            labels.append("Tensor")
        elif isinstance(spec.arg, ConstantArgument):
            labels.append(type(spec.arg.value).__name__)
        else:  # SymInt/SymFloat/SymBool arguments
            labels.append(
                type(spec.arg).__name__.removeprefix("Sym").removesuffix("Argument").lower()
            )
    return labels


def _leaf_label(value: Any) -> str:
    import torch

    return "Tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def _render_call(call: Any) -> str:
    args, kwargs = call
    text = f"args {_render(tuple(args))}"
    if kwargs:
        text += f" kwargs {_render(dict(kwargs))}"
    return text


def _render(tree: Any) -> str:
    """A pytree of leaf labels as Python-like text: ``([Tensor, Tensor],)``."""
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        items = [_render(item) for item in tree]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(tree, list):
        return f"[{', '.join(_render(item) for item in tree)}]"
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{key}: {_render(value)}" for key, value in tree.items()) + "}"
    if isinstance(tree, tuple):  # a namedtuple
        fields = getattr(tree, "_fields")  # noqa: B009 - mypy knows no _fields on tuple
        inner = ", ".join(f"{key}={_render(value)}" for key, value in zip(fields, tree))
        return f"{type(tree).__name__}({inner})"
    return "None" if tree is None else str(tree)


def read_signature_names(program: ExportedProgram) -> tuple[str, ...]:
    """User-input names of ``program``, decomposed or not, in flattening order."""
    from torch.export.graph_signature import InputKind

    return tuple(
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    )


def aliased_inputs(
    program: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[list[str]]:
    """Groups of user-input names whose tensors share storage, e.g. ``[["x", "y"]]``."""
    import torch

    groups: dict[tuple[str, int], list[str]] = {}
    for name, leaf in named_user_inputs(program, args, kwargs).items():
        if isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided and leaf.numel():
            storage = leaf.untyped_storage()
            groups.setdefault((str(leaf.device), storage.data_ptr()), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


class ProgramCall:
    """How an exported program is called: its user inputs' names and flattening order, read
    once per program. ``ProgramCall(program.exported).named(args, kwargs)``."""

    def __init__(self, program: ExportedProgram) -> None:
        self.program = program

    @property
    def names(self) -> tuple[str, ...]:
        """The user-input names (``x``, ``xs_0``, a keyword) in flattening order."""
        return _layout(self.program).names

    def ordered_kwargs(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``kwargs`` in the order the program flattens its keyword inputs."""
        return ordered_kwargs(self.program, kwargs)

    def flat(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        """``(args, kwargs)`` flattened in the program's user-input order."""
        return flat_user_inputs(self.program, args, kwargs)

    def named(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Each user-input name to the caller's leaf; ``ValueError`` on a call the program
        does not take."""
        return named_user_inputs(self.program, args, kwargs)

    def aliased(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[list[str]]:
        """Groups of user-input names whose tensors share storage, e.g. ``[["x", "y"]]``."""
        return aliased_inputs(self.program, args, kwargs)
