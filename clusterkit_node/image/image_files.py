"""Files inside a .sqsh, read without mounting or extracting it (``unsquashfs -lln`` / ``-cat``).

Why: the head node reads versions out of every image it publishes, as root, before any job runs it; a
mount would need the root-only squashfuse, an extraction the image's full size in scratch space. Image
content is untrusted, so nothing here executes it or follows its symlinks outside the image root.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Pattern, Sequence, Tuple

from clusterkit_node.image.squashfs import run

CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    kind: str  # 'f' file, 'd' dir, 'l' symlink, other: device/fifo/socket letter
    size: int
    target: str = ""


def list_image(sqsh: str, only: Sequence[str] = ()) -> Dict[str, Entry]:
    """Every path in the image ('/usr/local/cuda' -> Entry), from ``unsquashfs -d '' -lln``; ``only``: just those
    paths (and their parent directories; a missing one is simply absent)."""
    proc = run(["unsquashfs", "-d", "", "-lln", *(["-no-wildcards", sqsh, *only] if only else [sqsh])])
    if proc.returncode != 0:
        raise RuntimeError("unsquashfs -lln failed: "
                           + proc.stderr.decode("utf-8", "replace").strip()[-300:])
    line_re = re.compile(r"^(\S)\S{9} \S+\s+(\d+|\d+,\s*\d+) \d{4}-\d\d-\d\d \d\d:\d\d (.*)$")
    entries: Dict[str, Entry] = {}
    for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
        m = line_re.match(line)
        if not m:
            continue
        kind, size_s, rest = m.group(1), m.group(2), m.group(3)
        size = int(size_s) if size_s.isdigit() else 0
        kind = "f" if kind == "-" else kind
        if kind == "l":
            # "path -> target": the listed size is the target's length, so split by it (robust to " -> "
            # inside names).
            if size and rest[len(rest) - size - 4: len(rest) - size] == " -> ":
                path, target = rest[: len(rest) - size - 4], rest[len(rest) - size:]
            else:  # byte length != character count (non-UTF-8 name): fall back to the last arrow
                path, _, target = rest.rpartition(" -> ")
            entries[path] = Entry("l", size, target)
        elif rest:
            entries[rest] = Entry(kind, size)
    return entries


def resolve(entries: Dict[str, Entry], path: str) -> Optional[str]:
    """Follow symlinks (absolute ones relative to the image root) component by component."""
    parts = [p for p in path.split("/") if p]
    cur = ""
    hops = 0
    while parts:
        comp = parts.pop(0)
        if comp == ".":
            continue
        if comp == "..":
            cur = cur.rsplit("/", 1)[0]
            continue
        nxt = f"{cur}/{comp}"
        ent = entries.get(nxt)
        if ent is None:
            return None
        if ent.kind == "l":
            hops += 1
            if hops > 40:
                return None
            if ent.target.startswith("/"):
                cur = ""
            parts = [p for p in ent.target.split("/") if p] + parts
            continue
        cur = nxt
    return cur or "/"


def is_file(entries: Dict[str, Entry], path: str) -> Optional[str]:
    """The real path of ``path`` when it resolves to a regular file in the image, else None."""
    real = resolve(entries, path)
    return real if real and entries.get(real, Entry("?", 0)).kind == "f" else None


def cat_file(sqsh: str, path: str, limit: int = 64 << 20) -> Optional[bytes]:
    """Contents of one small regular file in the image (a text file; binaries go through ``search``)."""
    proc = run(["unsquashfs", "-no-wildcards", "-cat", sqsh, path])
    if proc.returncode != 0:
        return None
    return proc.stdout[:limit]


def stream(sqsh: str, path: str) -> Iterator[bytes]:
    """The file's bytes in chunks; stopping early stops the decompression (unsquashfs is killed)."""
    proc = subprocess.Popen(["unsquashfs", "-no-wildcards", "-cat", sqsh, path],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        while True:
            chunk = proc.stdout.read(CHUNK)
            if not chunk:
                break
            yield chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.wait()


def search(sqsh: str, path: str, pattern: Pattern[bytes], limit: int = 64 << 20) -> Optional[bytes]:
    """The first match of ``pattern`` (a short, bounded pattern) in the file's first ``limit`` bytes."""
    tail = b""
    seen = 0
    for chunk in stream(sqsh, path):
        window = tail + chunk
        m = pattern.search(window)
        if m and m.end() < len(window):  # a match touching the end may continue in the next chunk
            return m.group(0)
        seen += len(chunk)
        if seen >= limit:
            break
        tail = window[-256:]
    m = pattern.search(tail)
    return m.group(0) if m else None


def read_ranges(sqsh: str, path: str, ranges: Sequence[Tuple[int, int]]) -> Dict[Tuple[int, int], bytes]:
    """The bytes of each (offset, length) range, read in one pass that stops after the last one."""
    if not ranges:
        return {}
    end = max(off + size for off, size in ranges)
    out: Dict[Tuple[int, int], bytearray] = {r: bytearray() for r in ranges}
    pos = 0
    for chunk in stream(sqsh, path):
        lo, hi = pos, pos + len(chunk)
        for (off, size), buf in out.items():
            a, b = max(off, lo), min(off + size, hi)
            if a < b:
                buf += chunk[a - lo: b - lo]
        pos = hi
        if pos >= end:
            break
    return {r: bytes(b) for r, b in out.items()}
