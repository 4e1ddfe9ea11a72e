"""Fixtures of the image-versions tier: test images built from REAL NCCL, CUDA runtime, aws-ofi-nccl and libfabric
binaries (artifacts.py, layouts.py). Skips with one line when the artifacts cannot be had here, EXCEPT under CI=true
or CK_REQUIRE_ARTIFACTS=1 (.ci/run): there it fails, so CI never goes green without this evidence."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import artifacts  # noqa: E402
import layouts  # noqa: E402


def required() -> bool:
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("CK_REQUIRE_ARTIFACTS") == "1")


def unavailable(reason: str) -> None:
    if required():
        pytest.fail(f"image-versions tier required here but cannot run: {reason}")
    pytest.skip(f"image-versions tier skipped: {reason}")


@pytest.fixture(scope="session")
def real_image(tmp_path_factory):
    """build(name) -> the layout's .sqsh, built once per session."""
    missing = [t for t in ("mksquashfs", "unsquashfs", "gcc") if shutil.which(t) is None]
    if missing:
        unavailable(f"missing {' '.join(missing)} (apt-get install squashfs-tools gcc)")
    work = tmp_path_factory.mktemp("real-images")
    built: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name not in built:
            try:
                built[name] = layouts.build(name, work)
            except artifacts.Unavailable as exc:
                unavailable(str(exc))
        return built[name]
    return build
