"""Live progress of one ``enroot import``: enroot's own output streamed to the log as it comes, a heartbeat
line at a steady interval, and a small record in the import's work directory that ``status`` reads.

Why: a multi-GB import takes 10-30 minutes; without these the journal shows "importing ..." and then
nothing, and ``status`` shows an empty work directory for the whole download.

What "bytes so far" counts: the bytes this attempt has put on disk, in enroot's three phases. Where they
land was measured with the real enroot 4.1.2 (docker.sh), not assumed:

  downloaded  new entries of ENROOT_CACHE_PATH since the attempt started. Each layer arrives there as
              ``<digest>.XXXXXXXXXX`` (curl | gunzip | zstd: about the layer's compressed size, growing as
              it downloads, a few MB behind the network because zstd writes whole blocks) and is renamed
              to ``<digest>`` once its checksum matches. Layers already in the cache are not downloaded
              again, so they are not counted.
  unpacked    new directories of ENROOT_TEMP_PATH since the attempt started: enroot's
              ``enroot.XXXXXXXXXX`` working directory, where tar extracts the layers ("Extracting image
              layers"); enroot removes it when it exits.
  squashfs    the import's work directory ``<staging>/partial/<name>.<hex>.sqsh.partial-<pid>/``:
              ``image.sqsh`` as mksquashfs writes it ("Creating squashfs filesystem"), the last phase.
              This directory alone stays empty for the whole download, hence the other two.

Sizes are apparent sizes (st_size of regular files, a hard-linked inode once; directories, symlinks and
hidden names such as enroot's ``.tokens.*`` not counted), not allocated blocks: FSx for Lustre reports
blocks lazily, and a size grows steadily. The phases follow each other, so the total only grows while
enroot runs; the throughput is that total over the time since the attempt started (disk writes of the
three phases, not network bytes alone). The cache and temp directories are the ones enroot resolves
(environment, enroot.conf, defaults: sync_config.enroot_setting); another enroot writing new entries
there at the same time would be counted too (the sync lock keeps the image sync's own imports one at a
time). Cost: each heartbeat lists the cache and temp directories and stats every file of the new entries
(the unpacked image: well under a second for a large one, every 30 s by default).

Stdlib only, Python 3.9: one thread, a ``selectors`` loop over enroot's output pipe with the next
heartbeat as its timeout.
"""
from __future__ import annotations

import json
import os
import re
import selectors
import stat
import subprocess
import time
from collections import deque
from typing import Any, Deque, Dict, Iterable, List, Optional, Set, Tuple

from clusterkit_node.contract.console import format_bytes, format_duration, log
from clusterkit_node.contract.layout import PROGRESS_FILE
from clusterkit_node.store.atomic_files import write_json_atomic
from clusterkit_node.store.sync_config import enroot_setting

TAIL_LINES = 5  # enroot lines kept for a failed attempt's one-line summary
PARTS = ("downloaded", "unpacked", "squashfs")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LINE_END_RE = re.compile(rb"\r\n|\r|\n")


def _names(directory: str) -> List[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def tree_bytes(path: str, seen: Set[Tuple[int, int]]) -> int:
    """Apparent size of the regular files at or under path (symlinks not followed; an inode in ``seen``
    not counted again). Entries that vanish while it walks (enroot cleaning up) count as nothing."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if stat.S_ISREG(st.st_mode):
        return _count(st, seen)
    if not stat.S_ISDIR(st.st_mode):
        return 0
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += _count(entry.stat(follow_symlinks=False), seen)
            except OSError:
                continue
    return total


def _count(st: os.stat_result, seen: Set[Tuple[int, int]]) -> int:
    if st.st_nlink > 1:
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return 0
        seen.add(key)
    return st.st_size


def enroot_dirs(env: Dict[str, str]) -> List[str]:
    """The directories enroot writes an import's layers to: its cache and temp paths."""
    return [enroot_setting("ENROOT_CACHE_PATH", env), enroot_setting("ENROOT_TEMP_PATH", env)]


class Footprint:
    """What one import attempt has written so far (the module docstring says what is counted)."""

    def __init__(self, work: str, dirs: Iterable[str]) -> None:
        self.work = work
        self.dirs: List[str] = []
        for d in dirs:  # the same directory twice (cache == temp) is listed once
            if d and os.path.realpath(d) not in (os.path.realpath(x) for x in self.dirs):
                self.dirs.append(d)
        self.before = {d: set(_names(d)) for d in self.dirs}

    def measure(self) -> Dict[str, int]:
        parts = dict.fromkeys(PARTS, 0)
        seen: Set[Tuple[int, int]] = set()
        for d in self.dirs:
            for name in _names(d):
                if name in self.before[d] or name.startswith("."):
                    continue
                path = os.path.join(d, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if stat.S_ISREG(mode):  # a layer, downloading (<digest>.XXXXXXXXXX) or done (<digest>)
                    parts["downloaded"] += tree_bytes(path, seen)
                elif stat.S_ISDIR(mode):  # enroot's working directory: the unpacked layers
                    parts["unpacked"] += tree_bytes(path, seen)
        parts["squashfs"] = work_bytes(self.work, seen)
        return parts


def work_bytes(work: str, seen: Optional[Set[Tuple[int, int]]] = None) -> int:
    """Bytes under an import's work directory (a plain partial file of an older version: its size),
    the progress record not counted."""
    seen = set() if seen is None else seen
    if not os.path.isdir(work) or os.path.islink(work):
        return tree_bytes(work, seen)
    return sum(tree_bytes(os.path.join(work, name), seen) for name in _names(work)
               if not name.startswith(PROGRESS_FILE))


# --- the progress record (<work>/progress.json) ----------------------------------------------------------

def write_record(work: str, record: Dict[str, Any]) -> None:
    """Replace <work>/progress.json (mode 0644: ``status`` may run as another user). Best effort: progress
    never fails an import."""
    final = os.path.join(work, PROGRESS_FILE)
    try:
        write_json_atomic(final, f"{final}.tmp", record)
    except OSError:
        pass


def drop_record(work: str) -> None:
    for name in (PROGRESS_FILE, f"{PROGRESS_FILE}.tmp"):
        try:
            os.unlink(os.path.join(work, name))
        except FileNotFoundError:
            pass


def read_record(work: str) -> Optional[Dict[str, Any]]:
    """The record of a work directory, None when there is none or it is not one this version wrote."""
    try:
        with open(os.path.join(work, PROGRESS_FILE), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("started"), (int, float)) \
            or not isinstance(doc.get("parts"), dict) \
            or not all(isinstance(doc["parts"].get(p), int) for p in PARTS):
        return None
    return doc


def describe_partial(path: str, now: Optional[float] = None) -> Tuple[int, str]:
    """(bytes so far, detail) of an import in progress, for ``status``: the import's last heartbeat record
    (all three phases; the work directory is read again too, it may have grown since) or, for a work
    directory without one (an older version's), its own size and the age of its mtime/ctime."""
    now = time.time() if now is None else now
    live = work_bytes(path)
    record = read_record(path) if os.path.isdir(path) else None
    if record is None:
        try:
            st = os.lstat(path)
            age = f"for {format_duration(now - min(st.st_mtime, st.st_ctime))}"
        except OSError:
            age = "age unknown"
        return live, age
    parts = {p: int(record["parts"][p]) for p in PARTS}
    parts["squashfs"] = max(parts["squashfs"], live)
    total = sum(parts.values())
    elapsed = now - float(record["started"])
    rate = total / elapsed if elapsed > 0 else 0.0
    attempt = f"attempt {record['attempt']}, " if record.get("attempt") else ""
    shown = ", ".join(f"{p} {format_bytes(parts[p])}" for p in PARTS)
    updated = record.get("updated")
    since = f"; heartbeat {format_duration(now - float(updated))} ago" if isinstance(updated, (int, float)) else ""
    return total, (f"{attempt}for {format_duration(elapsed)}, {format_bytes(rate)}/s ({shown}{since})")


# --- following one attempt -----------------------------------------------------------------------------

class ImportProgress:
    """One attempt of one image: stream enroot's lines as "<name>: enroot: <line>", log a heartbeat
    "<name>: importing for 2m30s, 1.23 GB so far (8.2 MB/s; downloaded ..., unpacked ..., squashfs ...)"
    every ``interval`` seconds (0: none), keep the last lines for the failure message, and keep
    <work>/progress.json current for ``status``."""

    def __init__(self, name: str, work: str, dirs: Iterable[str], interval: float, attempt: str) -> None:
        self.name = name
        self.work = work
        self.interval = max(0.0, interval)
        self.attempt = attempt
        self.footprint = Footprint(work, dirs)
        self.tail: Deque[str] = deque(maxlen=TAIL_LINES)
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.record(dict.fromkeys(PARTS, 0))

    def record(self, parts: Dict[str, int]) -> None:
        write_record(self.work, {"pid": os.getpid(), "attempt": self.attempt, "started": self.started_wall,
                                 "updated": time.time(), "bytes": sum(parts.values()), "parts": parts})

    def line(self, raw: bytes) -> None:
        text = _ANSI_RE.sub("", raw.decode("utf-8", "replace")).strip()
        if text:
            self.tail.append(text)
            log(f"{self.name}: enroot: {text}")

    def beat(self) -> None:
        parts = self.footprint.measure()
        total = sum(parts.values())
        elapsed = time.monotonic() - self.started
        rate = total / elapsed if elapsed > 0 else 0.0
        shown = ", ".join(f"{p} {format_bytes(parts[p])}" for p in PARTS)
        log(f"{self.name}: importing for {format_duration(elapsed)}, {format_bytes(total)} so far "
            f"({format_bytes(rate)}/s; {shown})")
        self.record(parts)

    def follow(self, proc: "subprocess.Popen[bytes]") -> int:
        """Read proc's output (stdout, stderr merged into it) until it closes, beating meanwhile;
        returns proc's exit status. proc is killed if this is interrupted."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        pending = b""
        next_beat = self.started + self.interval
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_READ)
                while True:
                    timeout = max(0.0, next_beat - time.monotonic()) if self.interval else None
                    if sel.select(timeout):
                        data = os.read(fd, 65536)
                        if not data:
                            break
                        *lines, pending = _LINE_END_RE.split(pending + data)
                        for raw in lines:
                            self.line(raw)
                    if self.interval and time.monotonic() >= next_beat:
                        self.beat()
                        next_beat = time.monotonic() + self.interval
            self.line(pending)
            return proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
