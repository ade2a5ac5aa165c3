"""Each test's program keys from the last run, to tell "only the weights changed" (an unseeded
model, which recompiles every run) apart. One JSON file per test id under pytest's cache dir: no
two xdist workers write one."""

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
        """Record ``nodeid``'s check ``parts``; True if ``compiled`` only for new weights."""
        if nodeid not in self._previous:
            self._previous[nodeid] = self._read(nodeid)
            self._current[nodeid] = {}
        current = self._current[nodeid]
        current[str(check)] = dict(parts)
        self._write(nodeid, current)
        before = self._previous[nodeid].get(str(check))
        return compiled and before is not None and only_weights_differ(before, parts)

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
        return dict(data["checks"])

    def _write(self, nodeid: str, checks: Mapping[str, Mapping[str, str]]) -> None:
        text = json.dumps({"format": _FORMAT, "test": nodeid, "checks": checks}, indent=1)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            replace_text(self._path(nodeid), text)
        except OSError:
            return  # a hint about seeds is not worth failing over


def only_weights_differ(before: Mapping[str, str], now: Mapping[str, str]) -> bool:
    others = (set(before) | set(now)) - {"weights"}
    same_rest = all(before.get(part) == now.get(part) for part in others)
    return same_rest and before.get("weights") != now.get("weights")
