"""xdist: each worker sends one payload, the controller merges it in one place."""

from __future__ import annotations

from typing import Any

from pytest_aoti.reports.collector import PAYLOAD_KEY, ReportCollector


def send_payload(config: Any, payload: dict[str, Any]) -> None:
    """On a worker: hand the payload to xdist, which carries it to the controller."""
    config.workeroutput[PAYLOAD_KEY] = payload


class XdistControllerHooks:
    """Merges workers' payloads on the xdist controller; registered only with xdist."""

    def __init__(self, collector: ReportCollector) -> None:
        self._collector = collector

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        payload = getattr(node, "workeroutput", {}).get(PAYLOAD_KEY)
        if payload:
            self._collector.merge(payload)
