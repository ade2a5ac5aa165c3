"""Turning ``--aoti-device`` names into devices that exist on this machine."""

from __future__ import annotations

from collections.abc import Sequence

import pytest


def resolve_devices(names: Sequence[str], given: str = "") -> tuple[str, ...]:
    """Replace ``auto`` and check that every CUDA device asked for exists; errors quote ``given``
    (what the user wrote). Missing CUDA is a usage error, not a skip: a GPU CI job must not pass
    untested."""
    import torch  # torch loads on first use

    cuda = torch.cuda.is_available()
    resolved: list[str] = []
    for name in names:
        if name == "auto":
            name = "cuda" if cuda else "cpu"
        elif name.startswith("cuda"):
            option = f"--aoti-device={given or name}" + (
                f" ({name})" if given not in ("", name) else ""
            )
            if not cuda:
                raise pytest.UsageError(
                    f"{option}: torch.cuda.is_available() is False on this machine "
                    f"(torch {torch.__version__}); use --aoti-device=cpu or auto"
                )
            index = int(name.partition(":")[2] or 0)
            count = torch.cuda.device_count()
            if index >= count:
                raise pytest.UsageError(
                    f"{option}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
                )
        if name not in resolved:
            resolved.append(name)
    return tuple(resolved)


def resolve_ini_devices(names: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """Like :func:`resolve_devices` for the ini file's list (the project's, not this machine's):
    a missing CUDA device is skipped. Returns the devices and ``{skipped device: why}``."""
    resolved: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            found = resolve_devices([name])
        except pytest.UsageError as error:
            reason = str(error).removeprefix(f"--aoti-device={name}: ")
            skipped[name] = f"aoti_device in the ini names {name}, but {reason.split(';')[0]}"
            continue
        resolved += [device for device in found if device not in resolved]
    return tuple(resolved), skipped


def devices_from_ini(config: pytest.Config) -> bool:
    """Whether the run's device list comes from the ini file rather than the command line."""
    return config.getoption("aoti_device", None) is None and bool(config.getini("aoti_device"))


def asks_for_cuda(names: Sequence[str]) -> bool:
    """Whether ``names`` names a CUDA device explicitly (``auto`` does not)."""
    return any(name.startswith("cuda") for name in names)
