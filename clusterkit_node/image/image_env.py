"""An image's ``/etc/environment``, read from its ``.sqsh``: the ``NVIDIA_*`` settings enroot's NVIDIA hook will see.

Why: ``enroot import`` writes the image config's ``Env`` into the image's ``/etc/environment`` (enroot's docker.sh)
and the hook reads that file when a container starts, so on the nodes this file is the truth about an image's
``NVIDIA_*`` settings (an offline lock never read the config). The sync records what it read here in the image's
manifest entry; ``fingerprint`` reads the file itself for an entry recorded before that; ``inspect`` shows it.
Read with unsquashfs, without mounting (image_files.py); nothing from the image is executed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from clusterkit_node.image.image_files import cat_file, is_file, list_image
from clusterkit_node.image.nvidia_hook import nvidia_settings

ENVIRONMENT = "/etc/environment"


@dataclass(frozen=True)
class EnvReading:
    settings: Optional[Dict[str, str]]  # the NVIDIA_* settings; None: the file could not be read
    source: str                         # where they were read, or why they could not be


def read_nvidia_settings(sqsh: str) -> EnvReading:
    """The ``NVIDIA_*`` settings of the image's ``/etc/environment`` (none when the image has no such file: the hook
    then sees none either), or why the image could not be read."""
    try:
        entries = list_image(sqsh, [ENVIRONMENT])
        entry = entries.get(ENVIRONMENT)
        if entry is not None and entry.kind == "l":  # follow it inside the image (never outside)
            entries = list_image(sqsh)
        real = is_file(entries, ENVIRONMENT) if entry is not None else None
        if entry is None or real is None:
            what = "no" if entry is None else "no regular file at"
            return EnvReading({}, f"{sqsh} ({what} {ENVIRONMENT}: no NVIDIA_* setting)")
        data = cat_file(sqsh, real)
    except (OSError, RuntimeError) as exc:
        return EnvReading(None, f"{sqsh}: {ENVIRONMENT} unreadable ({exc})")
    if data is None:
        return EnvReading(None, f"{sqsh}: unsquashfs cannot read {ENVIRONMENT}")
    return EnvReading(nvidia_settings([data.decode("utf-8", "replace")]), f"{sqsh}:{ENVIRONMENT}")
