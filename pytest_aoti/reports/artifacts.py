"""Where a test's files go: repro bundles (``--aoti-keep-failed``) and engine traces
(``--aoti-profile``), one per test, numbered when a test writes several."""

from __future__ import annotations

from pathlib import Path

from pytest_aoti.folder_names import bundle_dir_name


class ArtifactPaths:
    """Names each test's next bundle folder and trace file; ``None`` roots turn them off."""

    def __init__(self, bundles: Path | None, profiles: Path | None) -> None:
        self._bundles_root = bundles
        self._profiles_root = profiles
        self._bundles: dict[str, int] = {}
        self._profiles: dict[str, int] = {}

    def bundle_dir(self, test: str) -> Path | None:
        """Where the next repro bundle of ``test`` (a node id) goes, or None."""
        if self._bundles_root is None:
            return None
        name = bundle_dir_name(test)
        count = self._bundles[name] = self._bundles.get(name, 0) + 1
        if count > 1:  # a test that goes on after a failed check
            name = f"{name}-{count}"
        return self._bundles_root / name

    def profile_path(self, test: str) -> Path | None:
        """Where the next Chrome trace of ``test`` (a node id) goes, or None."""
        if self._profiles_root is None:
            return None
        name = bundle_dir_name(test)
        count = self._profiles[name] = self._profiles.get(name, 0) + 1
        return self._profiles_root / (f"{name}.json" if count == 1 else f"{name}-{count}.json")
