"""The one wall clock the CLI side reads (``status`` expiry, a deploy's TTL start).

Why one place: a report that says "expires in 3d" depends on today's date, and a test that reads the real
clock passes only until that date; tests replace ``utc_now`` (monkeypatch ``clusterkit.clock.utc_now``) and
every caller reads the time through this module, never ``datetime.now`` directly.
"""
from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)
