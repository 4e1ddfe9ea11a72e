"""Writing a generated file so a reader sees the old text or the new, never half of it."""
from __future__ import annotations

import os
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary sibling and one rename; the temporary never stays behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
