"""Model specs: :class:`ModelSpec`, its test id, and resolving ``module.path:callable`` and
``path/to/file.py:callable`` specs (``hf:MODEL_TYPE`` specs resolve in ``models.hf``).

A spec is resolved once, at startup: the module imported, the name found, an ``hf:`` spec's
config built. What does not resolve is a ``pytest.UsageError`` that names the spec and what
was expected; calling the factory waits for its test.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_UNSAFE_ID = re.compile(r"[^\w:+./-]+")


@dataclass(frozen=True)
class ModelSpec:
    """One resolved spec: what its test calls to get the module and its inputs."""

    text: str
    """The spec as given (for a member of a collection: the collection's spec)."""
    id: str
    """The test id part: the spec without ``?``, ``&``, ``=`` (clean for ``-k``, ``--lf``)."""
    factory: Callable[..., Any] = field(compare=False, repr=False)
    """Returns ``(module, args)``, ``(module, args, kwargs)`` or a mapping; see
    :func:`pytest_aoti.models.factories.read_case`."""
    member: str = ""
    """For a member of a collection: its key (a dict's key, a function's name)."""
    run: Callable[[Any], None] | None = field(default=None, compare=False, repr=False)
    """A spec of another plugin's prefix that is no module factory: its test, given the
    ``aoti`` fixture, in place of the factory's check."""

    @property
    def label(self) -> str:
        """What messages call the spec: ``zoo.py:MODELS/small`` for a collection's member."""
        return f"{self.text}/{self.member}" if self.member else self.text

    def __str__(self) -> str:
        return self.id


def clean_id(text: str) -> str:
    """``hf:gpt2?attn_implementation=eager&n_layer=1`` → ``hf:gpt2+attn_implementation:eager+n_layer:1``."""
    text = text.replace("?", "+").replace("&", "+").replace("=", ":")
    return _UNSAFE_ID.sub("_", text).strip("_") or "model"


def make_importable(*directories: Path) -> None:
    """Put the rootdir (and the invocation directory) on ``sys.path`` as the ``pythonpath``
    ini would, so ``mymodels:good`` imports under plain ``pytest`` too."""
    for directory in reversed(directories):
        entry = str(directory)
        if entry not in sys.path:
            sys.path.insert(0, entry)


def usage_error(spec: str, message: str) -> pytest.UsageError:
    return pytest.UsageError(f"--aoti-model={spec}: {message}")


def closest(name: str, known: Iterable[str]) -> str:
    """``"; the closest: llama, llama4"``: the names of ``known`` nearest ``name``, as every
    spec kind words a name it does not know; empty where none is near."""
    close = difflib.get_close_matches(name, list(known), n=5, cutoff=0.5)
    return f"; the closest: {', '.join(close)}" if close else ""


def resolve_factory(text: str, rootpath: Path) -> list[ModelSpec]:
    """The spec of a ``module.path:callable`` or ``file.py:callable`` spec, or one per
    member of a collection; a usage error for what does not resolve."""
    target, _, name = text.rpartition(":")
    module = _import_target(text, target, rootpath)
    value: Any = module
    for part in name.split("."):
        if not hasattr(value, part):
            public = sorted(n for n in vars(module) if not n.startswith("_"))
            raise usage_error(
                text,
                f"{target!r} has no attribute {name!r}; expected a callable or a list or dict "
                f"of callables there (it has: {', '.join(public[:12]) or 'nothing public'})",
            )
        value = getattr(value, part)
    return _specs_of(text, value)


def _specs_of(text: str, value: Any) -> list[ModelSpec]:
    base = clean_id(text)
    members: Iterable[tuple[str, Any]]
    if isinstance(value, Mapping):
        members = [(str(key), member) for key, member in value.items()]
    elif isinstance(value, (list, tuple)):
        members = [
            (getattr(member, "__name__", str(index)), member) for index, member in enumerate(value)
        ]
    elif callable(value):
        return [ModelSpec(text, base, value)]
    else:
        raise usage_error(
            text,
            f"expected a callable or a list or dict of callables, got {type(value).__name__}",
        )
    specs = []
    for key, member in members:
        if not callable(member):
            raise usage_error(
                text,
                f"member {key!r} of the collection is a {type(member).__name__}, not a callable",
            )
        specs.append(ModelSpec(text, f"{base}/{clean_id(key)}", member, member=key))
    if not specs:
        raise usage_error(text, "the collection is empty")
    return specs


def _import_target(spec: str, target: str, rootpath: Path) -> Any:
    """The module of ``target``: a dotted module path or a ``.py`` file (rootdir-relative)."""
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser()
        path = path if path.is_absolute() else rootpath / path
        if not path.is_file():
            raise usage_error(spec, f"no file {path}; expected path/to/file.py:callable")
        name = "_aoti_models_" + re.sub(r"\W", "_", str(path.resolve().with_suffix("")))
        if name in sys.modules:
            return sys.modules[name]
        loader_spec = importlib.util.spec_from_file_location(name, path)
        assert loader_spec is not None and loader_spec.loader is not None
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            raise usage_error(spec, f"importing {path} raised {_last_line(error)}") from None
        return module
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name and (target == error.name or target.startswith(error.name + ".")):
            raise usage_error(
                spec,
                f"no module named {error.name!r}; expected module.path:callable importable "
                f"from the rootdir {rootpath}, or path/to/file.py:callable",
            ) from None
        raise usage_error(spec, f"importing {target!r} raised {_last_line(error)}") from None
    except Exception as error:
        raise usage_error(spec, f"importing {target!r} raised {_last_line(error)}") from None


def _last_line(error: BaseException) -> str:
    """``ValueError: bad`` at the innermost frame of the user's module."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}: {error}{where}"
