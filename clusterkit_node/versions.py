"""Software versions inside a .sqsh (CUDA, NCCL, aws-ofi-nccl, EFA installer, libfabric, PyTorch) and
whether they match what the lock expects.

Why: versions are read from well-known files with ``unsquashfs -lln`` / ``unsquashfs -cat`` (no mount,
no root-only squashfuse); an image whose versions contradict the lock's ``expect`` never gets the
stable name, so jobs never start on a stack nobody asked for.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .console import log
from .squashfs import run


@dataclass(frozen=True)
class Entry:
    kind: str  # 'f' file, 'd' dir, 'l' symlink, other: device/fifo/socket letter
    size: int
    target: str = ""


def list_image(sqsh: str) -> Dict[str, Entry]:
    """Every path in the image ('/usr/local/cuda' -> Entry), from ``unsquashfs -d '' -lln``."""
    proc = run(["unsquashfs", "-d", "", "-lln", sqsh])
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


def cat_file(sqsh: str, path: str, limit: int = 64 << 20) -> Optional[bytes]:
    """Contents of one regular file in the image (``unsquashfs -cat``; no mount, no extraction)."""
    proc = run(["unsquashfs", "-no-wildcards", "-cat", sqsh, path])
    if proc.returncode != 0:
        return None
    return proc.stdout[:limit]


def version_key(v: str) -> Tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.+-]", v))


def parse_efa_packages(text: str) -> Dict[str, str]:
    """/opt/amazon/efa_installed_packages as written by efa_installer.sh::write_package_file:
    '# EFA installer version: 1.38.0' then the package file names (deb name_ver_arch or rpm
    name-ver-rel.arch), whitespace separated."""
    found: Dict[str, str] = {}
    m = re.search(r"^#\s*EFA installer version:\s*(\S+)", text, re.M)
    if m:
        found["efa_installer"] = m.group(1)
    for token in text.split():
        for key, pat in (("aws_ofi_nccl", r"libnccl-ofi"), ("libfabric", r"libfabric1?-aws")):
            mt = re.match(pat + r"(?:-[A-Za-z][A-Za-z0-9]*)*[-_](\d[^_\s-]*)", token)
            if mt and key not in found:
                found[key] = mt.group(1)
    return found


def read_versions(sqsh: str) -> Dict[str, str]:
    """Software versions inside the image, read from well-known files without mounting it.

    cuda          /usr/local/cuda/version.json (following the cuda -> cuda-X.Y symlink chain), else the
                  highest /usr/local/cuda-*/version.json, else version.txt ("CUDA Version X")
    nccl          highest libnccl.so.2.X.Y outside Python site-packages, else include/nccl.h
                  NCCL_MAJOR/MINOR/PATCH, else a nvidia_nccl_cu*-X.dist-info wheel
    aws_ofi_nccl  the "aws-ofi-nccl X.Y.Z" string compiled into libnccl-net*.so (source builds in
                  /opt/aws-ofi-nccl first, then the EFA installer's /opt/amazon/ofi-nccl), else the
                  libnccl-ofi package in /opt/amazon/efa_installed_packages
    efa_installer '# EFA installer version:' in /opt/amazon/efa_installed_packages
    libfabric     the libfabric-aws package in efa_installed_packages (the libfabric.so.1.X.Y file name
                  carries the libtool ABI version, not the release, so it is not used)
    pytorch       __version__ in .../site-packages|dist-packages/torch/version.py
    """
    entries = list_image(sqsh)
    versions: Dict[str, str] = {}

    def read_text(path: str) -> Optional[str]:
        real = resolve(entries, path)
        if not real or entries.get(real, Entry("?", 0)).kind != "f":
            return None
        data = cat_file(sqsh, real)
        return data.decode("utf-8", "replace") if data is not None else None

    # CUDA
    def cuda_from_dir(d: str) -> Optional[str]:
        txt = read_text(f"{d}/version.json")
        if txt:
            try:
                v = json.loads(txt).get("cuda", {}).get("version")
                if isinstance(v, str) and v:
                    return v
            except (ValueError, AttributeError):
                pass
        txt = read_text(f"{d}/version.txt")
        m = re.search(r"CUDA Version\s+(\d[\w.]*)", txt or "")
        return m.group(1) if m else None

    cuda = cuda_from_dir("/usr/local/cuda")
    if not cuda:
        dirs = sorted((p for p, e in entries.items()
                       if e.kind == "d" and re.fullmatch(r"/usr/local/cuda-\d+(\.\d+)*", p)),
                      key=lambda p: version_key(p.rsplit("-", 1)[1]), reverse=True)
        for d in dirs:
            cuda = cuda_from_dir(d)
            if cuda:
                break
    if cuda:
        versions["cuda"] = cuda

    def in_site_packages(p: str) -> bool:
        return "/site-packages/" in p or "/dist-packages/" in p

    # NCCL
    libs = sorted({m.group(1) for p in entries
                   for m in [re.search(r"/libnccl\.so\.(\d+\.\d+\.\d+)$", p)]
                   if m and not in_site_packages(p)}, key=version_key)
    if libs:
        versions["nccl"] = libs[-1]
        if len(libs) > 1:
            log(f"{os.path.basename(sqsh)}: several NCCL libraries {', '.join(libs)}; recording {libs[-1]}")
    else:
        for p in sorted(p for p in entries if p.endswith("/include/nccl.h") and not in_site_packages(p)):
            txt = read_text(p) or ""
            parts = [re.search(rf"#define\s+NCCL_{k}\s+(\d+)", txt) for k in ("MAJOR", "MINOR", "PATCH")]
            if all(parts):
                versions["nccl"] = ".".join(x.group(1) for x in parts)  # type: ignore[union-attr]
                break
        else:
            for p in sorted(entries):
                m = re.search(r"/nvidia_nccl_cu\d+-(\d[\w.]*)\.dist-info$", p)
                if m:
                    versions["nccl"] = m.group(1)
                    break

    # EFA installer / libfabric / aws-ofi-nccl package record
    efa = parse_efa_packages(read_text("/opt/amazon/efa_installed_packages") or "")
    for key in ("efa_installer", "libfabric"):
        if key in efa:
            versions[key] = efa[key]

    # aws-ofi-nccl: the plugin binary knows its own version (PACKAGE_STRING in its init log line)
    ofi = None
    for root in ("/opt/aws-ofi-nccl/", "/opt/amazon/ofi-nccl/"):
        plugins = sorted(p for p, e in entries.items()
                         if p.startswith(root) and e.kind == "f"
                         and re.match(r"libnccl-net.*\.so", os.path.basename(p)))
        for p in plugins:
            data = cat_file(sqsh, p) or b""
            hit = re.search(rb"aws-ofi-nccl (\d+\.\d+(?:\.\d+)?)", data)
            if hit:
                ofi = hit.group(1).decode()
                break
        if ofi:
            break
    ofi = ofi or efa.get("aws_ofi_nccl")
    if ofi:
        versions["aws_ofi_nccl"] = ofi

    # PyTorch
    for p in sorted((p for p in entries
                     if p.endswith("/torch/version.py") and in_site_packages(p)), key=len):
        m = re.search(r"^__version__\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)['\"]", read_text(p) or "", re.M)
        if m:
            versions["pytorch"] = m.group(1)
            break
    return versions


KNOWN_VERSION_KEYS = ("aws_ofi_nccl", "cuda", "efa_installer", "libfabric", "nccl", "pytorch")


def version_matches(expect: str, found: str) -> bool:
    """Prefix match on version boundaries: 12.8 matches 12.8.1 and 12.8, not 12.80."""
    if found == expect:
        return True
    return bool(expect) and found.startswith(expect) and not found[len(expect)].isdigit()


def expect_problems(expect: Dict[str, str], versions: Dict[str, str]) -> List[str]:
    problems = []
    for key in sorted(expect):
        want = expect[key]
        if key not in KNOWN_VERSION_KEYS:
            problems.append(f"cannot check expect {key} (known: {', '.join(KNOWN_VERSION_KEYS)})")
        elif key not in versions:
            problems.append(f"expected {key} {want}, found none")
        elif not version_matches(want, versions[key]):
            problems.append(f"expected {key} {want}, found {versions[key]}")
    return problems
