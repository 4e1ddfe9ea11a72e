"""Fixtures the ``clusterkit diff`` case tests share: the price snapshot and one repository per case."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from diff_fixtures import PRICES
from diff_repo import make_repo

from clusterkit.cost import estimate as cost


@pytest.fixture
def snapshot_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Price both sides from tests/diff/fixtures/prices.json, so the goldens do not move with price updates."""
    real = cost.load_prices
    monkeypatch.setattr(cost, "load_prices", lambda path=PRICES: real(path))


@pytest.fixture(scope="module")
def repo_for(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``repo_for(case)``: the case's throwaway repository, made once per test module."""
    made: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in made:
            made[case] = make_repo(tmp_path_factory.mktemp(case) / "repo", case)
        return made[case]

    return get


@pytest.fixture(scope="module")
def platform_repo_for(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``platform_repo_for(case)``: a throwaway repository of tests/diff/fixtures/platform (platform_fixtures.py)."""
    from platform_fixtures import FIXTURES as PLATFORM_FIXTURES

    made: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in made:
            made[case] = make_repo(tmp_path_factory.mktemp(case) / "repo", case, fixtures=PLATFORM_FIXTURES)
        return made[case]

    return get
