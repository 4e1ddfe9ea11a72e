"""Both sides' cost estimates of a cluster or a platform in a diff (``clusterkit.cost``'s figures, per hour).

Apart from ``report`` so that ``platforms`` (a platform's diff, which carries its cost) and ``report`` (which
prices it) both name the type without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostSide:
    """One side's estimate (``clusterkit.cost.estimate``): USD per hour idle (min nodes) and busy (max nodes)."""

    idle_hourly: float
    busy_hourly: float
    missing: tuple[str, ...] = ()  # items the price file has no price for (not in the figures)


@dataclass(frozen=True)
class CostDelta:
    """Both sides' estimates; a side is None when the cluster does not exist there."""

    old: CostSide | None
    new: CostSide | None
    hours_30_days: int = 720

    def delta(self, figure: str) -> float:
        return getattr(self.new, figure, 0.0) - getattr(self.old, figure, 0.0)
