"""Is a .sqsh complete and readable? ``unsquashfs`` plus our own reading of the superblock.

Why: ``unsquashfs -s`` + "file size >= superblock bytes_used" catches an import that produced a
truncated or non-squashfs file before it is published, and on compute nodes a listing shows whether
this node's squashfs-tools can decompress the images at all (enroot needs it to start containers).
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
from dataclasses import dataclass
from typing import List, Optional, Tuple

# squashfs superblock compression ids (squashfs_fs.h)
COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
SQUASHFS_MAGIC = 0x73717368


@dataclass(frozen=True)
class Superblock:
    compressor: str
    bytes_used: int
    block_size: int


def read_superblock(path: str) -> Superblock:
    """Parse the 96-byte squashfs 4.0 superblock ourselves: works even where unsquashfs cannot
    decompress the image, so an unsupported compressor can be named."""
    with open(path, "rb") as fh:
        raw = fh.read(96)
    if len(raw) < 96:
        raise ValueError(f"{path}: {len(raw)} bytes, too short for a squashfs superblock")
    magic, _inodes, _mtime, block_size, _frags, comp, _blog, _flags, _ids, major, _minor = \
        struct.unpack_from("<IIIIIHHHHHH", raw, 0)
    (bytes_used,) = struct.unpack_from("<Q", raw, 40)
    if magic != SQUASHFS_MAGIC or major != 4:
        raise ValueError(f"{path}: no squashfs 4.x superblock (magic {magic:#x}, major {major})")
    return Superblock(compressor=COMPRESSORS.get(comp, f"unknown (id {comp})"),
                      bytes_used=bytes_used, block_size=block_size)


def run(cmd: List[str], timeout: Optional[float] = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def check_squashfs(path: str) -> Tuple[bool, str]:
    """(ok, detail): ``unsquashfs -s`` accepts the file and its size covers the superblock's bytes_used
    (mksquashfs pads to 4 KiB, so the file may be larger, never smaller). Detects truncation."""
    try:
        proc = run(["unsquashfs", "-s", path])
    except OSError as exc:
        return False, f"cannot run unsquashfs: {exc}"
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        detail = (proc.stderr.decode("utf-8", "replace").strip() or out.strip()).splitlines()
        return False, f"unsquashfs -s failed: {detail[-1] if detail else 'exit %d' % proc.returncode}"
    m = re.search(r"Filesystem size (\d+) bytes", out)
    if not m:
        return False, "unsquashfs -s printed no filesystem size"
    used = int(m.group(1))
    size = os.stat(path).st_size
    if size < used:
        return False, f"truncated: file has {size} bytes, superblock says {used} are used"
    try:
        sb = read_superblock(path)
    except ValueError as exc:
        return False, str(exc)
    if sb.bytes_used != used:
        return False, f"superblock bytes_used {sb.bytes_used} != unsquashfs's {used}"
    return True, sb.compressor


def unsquashfs_can_read(sqsh: str) -> Tuple[bool, str]:
    """List the image's top directory: this needs the image's decompressor (``unsquashfs -s`` does
    not: it prints the superblock even for compressors this build cannot decompress)."""
    proc = run(["unsquashfs", "-lc", "-max-depth", "1", sqsh])
    text = (proc.stderr + proc.stdout).decode("utf-8", "replace")
    if proc.returncode == 0:
        return True, ""
    m = re.search(r"Filesystem uses (\S+) compression, this is unsupported", text)
    if m:
        return False, m.group(1)
    return True, text.strip().splitlines()[-1] if text.strip() else f"exit {proc.returncode}"


def content_sha256(path: str) -> str:
    """sha256 of the whole file (any file: store/package_set.py checks OS packages with it). Recorded when an image is
    published (the file was just written, so
    it is cheap then) and compared by ``verify --deep`` / ``sync --verify-all``: the only check that
    catches same-size corruption inside data blocks, which size and superblock checks cannot see."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
