"""Each test's program keys from the last run, to tell "only the weights changed" apart.

An unseeded model (``nn.Linear`` without ``torch.manual_seed``) gets new random weights every
run; the weights are part of a program's key, so its package is compiled again every run
and the cache never helps. The key's parts (see :class:`~pytest_aoti.cache.key.ProgramKey`)
show it: same graph, configs, device and torch as the same test's same check last run, other
weights.

One small JSON file per test id under pytest's cache dir: xdist workers run distinct tests, so
no two processes write one file (each write is atomic all the same).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from pytest_aoti.atomic_files import replace_text

SEED_ADVICE = (
    "weights differ from the last run: seed the model, e.g. torch.manual_seed, to reuse the "
    "compiled program"
)
_FORMAT = 1


class KeyHistory:
    """The key parts each test's checks used, this run and the last."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._previous: dict[str, dict[str, dict[str, str]]] = {}
        self._current: dict[str, dict[str, dict[str, str]]] = {}

    def observe(self, nodeid: str, check: int, parts: Mapping[str, str], compiled: bool) -> bool:
        """Record the key ``parts`` of check number ``check`` (1, 2, ...) of test ``nodeid``;
        True when it was ``compiled`` and its key differs from the last run's only in the
        weights."""
        if nodeid not in self._previous:
            self._previous[nodeid] = self._read(nodeid)
            self._current[nodeid] = {}
        current = self._current[nodeid]
        current[str(check)] = dict(parts)
        self._write(nodeid, current)
        before = self._previous[nodeid].get(str(check))
        return compiled and before is not None and _only_weights_differ(before, parts)

    def _path(self, nodeid: str) -> Path:
        digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        return self.root / f"{digest}.json"

    def _read(self, nodeid: str) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self._path(nodeid).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # a first run, or a file from elsewhere: nothing to compare with
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            return {}
        if data.get("test") != nodeid or not isinstance(data.get("checks"), dict):
            return {}
        checks: dict[str, dict[str, str]] = data["checks"]
        return checks

    def _write(self, nodeid: str, checks: Mapping[str, Mapping[str, str]]) -> None:
        text = json.dumps({"format": _FORMAT, "test": nodeid, "checks": checks}, indent=1)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            replace_text(self._path(nodeid), text)
        except OSError:
            return  # a hint about seeds is not worth failing over


def _only_weights_differ(before: Mapping[str, str], now: Mapping[str, str]) -> bool:
    others = (set(before) | set(now)) - {"weights"}
    same_rest = all(before.get(part) == now.get(part) for part in others)
    return same_rest and before.get("weights") != now.get("weights")
