"""Fixtures for the image-lock tests: offline AWS settings and the loopback registry (images_fakes.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def fake_registry():
    from images_fakes import serve

    with serve() as registry:
        yield registry
