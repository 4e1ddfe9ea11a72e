#!/usr/bin/env python3
"""Keep the FSx image store in step with the image lock (head node), or check it (compute nodes).

Commands (stdlib only, Python 3.9+, run as root on the head node; compute nodes run ``verify`` and
``fingerprint``):

  image_sync.py sync        --lock LOCK --store DIR [--retries N] [--backoff S] [--verify-all]
  image_sync.py status      --store DIR [--lock LOCK]
  image_sync.py verify      --store DIR --lock LOCK
  image_sync.py fingerprint --store DIR --lock LOCK [--rules FILE] [--node-name NAME]
  image_sync.py drift       --store DIR [--rules FILE] [--format table|json] [--max-age-hours H]

Store layout (the contract every other part of ClusterKit reads)::

  <store>/<name>/<digest-hex>.sqsh        mode 0644, written once, never modified in place
  <store>/<name>.sqsh -> <name>/<hex>.sqsh relative symlink: the stable name jobs use
  <store>/manifest.json                    what is in the store; replaced atomically, never half-written
  <store>/.sync.lock                       flock: one importer at a time
  <store>/<name>/.<hex>.sqsh.partial-<pid> import in progress (or debris of a crashed run)
  <store>/.nodes/<hostname>.json           what each compute node runs (``fingerprint``, read by ``drift``)

Why each decision:
- A present image is skipped after a stat and a manifest lookup only (no hashing, no subprocess), so a
  re-run on every node update costs milliseconds even with tens of GB in the store. A ``.sqsh`` whose size
  differs from the manifest (truncated or replaced) is re-imported; ``--verify-all`` additionally runs
  ``unsquashfs -s`` and a superblock/size check on every present image (slower, reads metadata only).
- Imports write to a temp name inside the store (same filesystem, so the final ``rename`` is atomic);
  a crash leaves only dot-files that the next run removes while holding the lock. Nothing half-written is
  ever visible under a final name.
- ``unsquashfs -s`` + "file size >= superblock bytes_used" catches an import that produced a truncated
  or non-squashfs file before it is published.
- Versions (CUDA, NCCL, aws-ofi-nccl, EFA installer, libfabric, PyTorch) are read from the ``.sqsh``
  with ``unsquashfs -lln`` / ``unsquashfs -cat`` (no mount, no root-only squashfuse); an image whose
  versions contradict the lock's ``expect`` never gets the stable name.

- Each compute node records a fingerprint of its software (driver, EFA, enroot, pyxis, Slurm, AMI, the
  manifest it saw) and refuses to boot when its NVIDIA driver cannot run a locked image's CUDA, per
  compat_rules.json evaluated by compat.py (both ship next to this file): a replaced node at boot beats
  a crashed job at hour ten. ``drift`` groups the fingerprints per queue and shows what differs.

Exit codes: 0 everything present, 1 an image failed (or verify found the store unusable, or a node
cannot run a locked image, or nodes of one queue differ), 2 usage, lock or preflight error (disk
space, missing tools, missing compat files).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import errno
import fcntl
import hashlib
import http.client
import importlib.util
import json
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

PROG = "image_sync"
MANIFEST_VERSION = 1
MANIFEST_NAME = "manifest.json"
LOCK_NAME = ".sync.lock"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

# enroot reads /etc/enroot/enroot.conf; environment variables take precedence over it (enroot docs,
# doc/configuration.md). CK_ENROOT_CONF points elsewhere (tests; unusual installs).
ENROOT_CONF_DEFAULT = "/etc/enroot/enroot.conf"
# enroot's built-in default (conf/enroot.conf.in; recent releases append -exit-on-error). Only recorded
# in the manifest when neither the environment nor enroot.conf sets ENROOT_SQUASH_OPTIONS.
DEFAULT_SQUASH_OPTIONS = "-comp lzo -noD"

# Disk preflight factors, relative to the lock's compressed_size (sum of the gzip/zstd layer blobs):
# - ENROOT_TEMP_PATH holds the unpacked root filesystem while enroot converts the layers; container
#   layers compress about 2.5-3.5x with gzip, so 3x is a realistic upper bound (ADT #427/#127: root
#   volumes filled up exactly here). Imports run one at a time, so the largest image sets the need.
# - ENROOT_CACHE_PATH keeps the downloaded layer blobs (1x each, persistent), so they add up.
# - The store receives the .sqsh: with compressed data (zstd, lz4, lzo without -noD) it is about the
#   size of the layers, 1.2x leaves headroom; with -noD (enroot's default) data blocks are stored
#   uncompressed, so the .sqsh is about the unpacked size: 3x.
TEMP_FACTOR = 3.0
CACHE_FACTOR = 1.0
STORE_FACTOR_COMPRESSED = 1.2
STORE_FACTOR_UNCOMPRESSED_DATA = 3.0

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")
PARTIAL_RE = re.compile(r"^\.([0-9a-f]{64})\.sqsh\.partial-(\d+)$")
LINK_TMP_RE = re.compile(r"^\..+\.sqsh\.link-\d+$")
MANIFEST_TMP_RE = re.compile(r"^\.manifest\.json\.tmp-\d+$")

# squashfs superblock compression ids (squashfs_fs.h)
COMPRESSORS = {1: "gzip", 2: "lzma", 3: "lzo", 4: "xz", 5: "lz4", 6: "zstd"}
SQUASHFS_MAGIC = 0x73717368


# --------------------------------------------------------------------------------------------- logging

def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def log(msg: str) -> None:
    """Timestamped progress line on stdout (the systemd journal keeps it)."""
    print(f"{now_utc()} {PROG}: {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"{now_utc()} {PROG}: warning: {msg}", file=sys.stderr, flush=True)


def error(msg: str) -> None:
    print(f"{now_utc()} {PROG}: error: {msg}", file=sys.stderr, flush=True)


class UsageError(Exception):
    """A problem the operator must fix before anything can run (exit 2); one line per problem."""

    def __init__(self, lines: List[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def mb(n: int) -> float:
    return n / 1e6


# ------------------------------------------------------------------------------------------ image lock

@dataclass(frozen=True)
class LockedImage:
    """One entry of cluster_configs/<name>.images.lock (only the fields image_sync needs)."""

    name: str
    digest: str
    enroot_uri: str
    source: str
    compressed_size: int
    expect: Dict[str, str] = field(default_factory=dict)

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]

    @property
    def short(self) -> str:
        return self.hex[:12]

    @property
    def rel_file(self) -> str:
        return f"{self.name}/{self.hex}.sqsh"


def load_lock(path: str) -> List[LockedImage]:
    """Parse and validate the lock; every problem is reported at once (UsageError)."""
    hint = "regenerate it with `python -m clusterkit lock NAME`"
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError([f"{path}: cannot read image lock: {exc.strerror} (is --lock right?)"])
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError([f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg} ({hint})"])
    problems: List[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise UsageError([f"{path}: images: missing or not a list ({hint})"])
    images: List[LockedImage] = []
    seen = set()
    for i, raw in enumerate(doc["images"]):
        where = f"{path}: images[{i}]"
        if not isinstance(raw, dict):
            problems.append(f"{where}: not an object ({hint})")
            continue
        name, digest, uri = raw.get("name"), raw.get("digest"), raw.get("enroot_uri")
        size, expect = raw.get("compressed_size"), raw.get("expect", {})
        ok = True
        if not isinstance(name, str) or not NAME_RE.match(name):
            problems.append(f"{where}.name: {name!r} is not a store name (letters, digits, . _ -; "
                            f"no leading dot)")
            ok = False
        elif name.endswith(".sqsh") or name == MANIFEST_NAME or name.startswith(MANIFEST_NAME + "."):
            # <name>/ and <name>.sqsh must not collide with another image's link or the manifest
            problems.append(f"{where}.name: {name!r} collides with store entries (drop the .sqsh "
                            f"suffix; {MANIFEST_NAME} is reserved)")
            ok = False
        elif name in seen:
            problems.append(f"{where}.name: duplicate image name {name!r}")
            ok = False
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            problems.append(f"{where}.digest: {digest!r} is not sha256:<64 hex> ({hint})")
            ok = False
        if not isinstance(uri, str) or not uri.startswith("docker://"):
            problems.append(f"{where}.enroot_uri: {uri!r} is not a docker:// URI ({hint})")
            ok = False
        elif isinstance(digest, str) and not uri.endswith("@" + digest):
            problems.append(f"{where}.enroot_uri: {uri!r} does not pin digest {digest} ({hint})")
            ok = False
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            problems.append(f"{where}.compressed_size: {size!r} is not a byte count ({hint})")
            ok = False
        if not isinstance(expect, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in expect.items()):
            problems.append(f"{where}.expect: must map version names to strings, got {expect!r}")
            ok = False
        if ok:
            seen.add(name)
            images.append(LockedImage(name=name, digest=digest, enroot_uri=uri,
                                      source=str(raw.get("source", "")), compressed_size=size,
                                      expect=dict(expect)))
    if problems:
        raise UsageError(problems)
    return sorted(images, key=lambda im: im.name)


# -------------------------------------------------------------------------------------------- manifest

def manifest_path(store: str) -> str:
    return os.path.join(store, MANIFEST_NAME)


def empty_manifest() -> dict:
    return {"manifest_version": MANIFEST_VERSION, "images": {}}


def read_manifest(store: str) -> dict:
    """The store's manifest; a missing file is an empty store. Raises ValueError if unreadable."""
    path = manifest_path(store)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return empty_manifest()
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}")
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), dict):
        raise ValueError(f"{path}: images: missing or not an object")
    if doc.get("manifest_version") != MANIFEST_VERSION:
        raise ValueError(f"{path}: manifest_version {doc.get('manifest_version')!r} is not "
                         f"{MANIFEST_VERSION} (written by a different image_sync?)")
    doc.setdefault("rejected", {})
    return doc


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(directory: str, name: str, doc: dict) -> str:
    """<directory>/<name> via a dot temp file in the same directory (same filesystem: atomic rename)."""
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, 0o644)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    fsync_dir(directory)
    return final


def write_manifest(store: str, manifest: dict) -> None:
    """Replace manifest.json atomically: temp file + fsync + rename + fsync(dir).

    A reader (or a crash at any instant) sees either the old or the new complete file, never a mix.
    """
    doc = {"manifest_version": MANIFEST_VERSION, "images": manifest.get("images", {})}
    if manifest.get("rejected"):
        doc["rejected"] = manifest["rejected"]
    write_json_atomic(store, MANIFEST_NAME, doc)


# -------------------------------------------------------------------------------- enroot configuration

_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand_shell_vars(value: str, env: Dict[str, str]) -> str:
    """Expand $VAR, ${VAR} and ${VAR:-default} the way enroot's config loader (bash) would."""
    def repl(m: "re.Match[str]") -> str:
        name = m.group(1) or m.group(3)
        got = env.get(name, "")
        if m.group(1) and m.group(2) is not None and not got:
            return expand_shell_vars(m.group(2), env)
        return got
    return _VAR_RE.sub(repl, value)


def enroot_conf(env: Dict[str, str]) -> Dict[str, str]:
    """KEY value pairs of enroot.conf (comments and blank lines skipped); {} if there is none."""
    path = env.get("CK_ENROOT_CONF", ENROOT_CONF_DEFAULT)
    values: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                parts = line.split(None, 1)  # "KEY<spaces or tabs>VALUE"
                value = parts[1].strip() if len(parts) > 1 else ""
                values[parts[0]] = value.strip('"').strip("'")
    except OSError:
        pass
    return values


def enroot_setting(key: str, env: Dict[str, str]) -> str:
    """What enroot will use for KEY: environment, then enroot.conf, then enroot's own default."""
    home = env.get("HOME", "/root")
    defaults = {
        "ENROOT_TEMP_PATH": "${TMPDIR:-/tmp}",
        "ENROOT_CACHE_PATH": "${XDG_CACHE_HOME:-" + home + "/.cache}/enroot",
        "ENROOT_SQUASH_OPTIONS": DEFAULT_SQUASH_OPTIONS,
    }
    if env.get(key):
        return env[key]
    value = enroot_conf(env).get(key) or defaults.get(key, "")
    return expand_shell_vars(value, env)


def data_uncompressed(squash_options: str) -> bool:
    """True when mksquashfs will store data blocks uncompressed (the .sqsh is ~ the unpacked size)."""
    opts = shlex.split(squash_options)
    return any(o in ("-noD", "-noData", "-no-compression") for o in opts)


# -------------------------------------------------------------------------------------- squashfs files

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


def run(cmd: List[str], timeout: Optional[float] = None) -> subprocess.CompletedProcess:
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


# ------------------------------------------------------------------------------- versions in the image

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


def version_key(v: str) -> Tuple:
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
            m = re.search(rb"aws-ofi-nccl (\d+\.\d+(?:\.\d+)?)", data)
            if m:
                ofi = m.group(1).decode()
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


# ------------------------------------------------------------------------------------------- the store

def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def partials(store: str) -> List[Tuple[str, str, int]]:
    """(path, hex, pid) of every import temp file in the store."""
    found = []
    try:
        names = sorted(os.listdir(store))
    except OSError:
        return found
    for name in names:
        d = os.path.join(store, name)
        if name.startswith(".") or not os.path.isdir(d) or os.path.islink(d):
            continue
        for f in sorted(os.listdir(d)):
            m = PARTIAL_RE.match(f)
            if m:
                found.append((os.path.join(d, f), m.group(1), int(m.group(2))))
    return found


def clean_debris(store: str) -> None:
    """Remove temp files of crashed runs. Called only while holding the sync lock: no other importer
    can be running, so every partial is debris (whatever its pid)."""
    for path, _hex, pid in partials(store):
        state = "live pid" if pid_alive(pid) else "dead pid"
        log(f"removing stale temp file {path} ({state} {pid}, left by an interrupted sync)")
        os.unlink(path)
    for f in os.listdir(store):
        if LINK_TMP_RE.match(f) or MANIFEST_TMP_RE.match(f):
            log(f"removing stale temp file {os.path.join(store, f)}")
            os.unlink(os.path.join(store, f))


def point_stable_name(store: str, img: LockedImage) -> None:
    """<store>/<name>.sqsh -> <name>/<hex>.sqsh, swapped atomically (symlink to a temp name + rename)."""
    link = os.path.join(store, f"{img.name}.sqsh")
    tmp = os.path.join(store, f".{img.name}.sqsh.link-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(img.rel_file, tmp)
    os.replace(tmp, link)
    fsync_dir(store)


def stable_name_ok(store: str, img: LockedImage) -> bool:
    try:
        return os.readlink(os.path.join(store, f"{img.name}.sqsh")) == img.rel_file
    except OSError:
        return False


def drop_stable_name(store: str, img: LockedImage) -> None:
    if stable_name_ok(store, img):
        os.unlink(os.path.join(store, f"{img.name}.sqsh"))
        fsync_dir(store)


def ensure_dir(path: str) -> None:
    """mkdir with mode 0755 regardless of umask (other users must be able to traverse the store)."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        return
    os.chmod(path, 0o755)


def file_size(path: str) -> Optional[int]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size


# ------------------------------------------------------------------------------------------------ sync

@dataclass
class Result:
    img: LockedImage
    status: str  # present | imported | failed | rejected
    size: int = 0
    detail: str = ""


@dataclass
class Plan:
    """What one image needs. action: none | relink | promote | demote | adopt | import | rejected."""

    action: str
    reason: str = ""


def plan_image(store: str, manifest: dict, img: LockedImage, verify: bool) -> Plan:
    """Decide with a stat and dictionary lookups only (the O(1) path); ``verify`` adds the
    unsquashfs/superblock check of present files."""
    path = os.path.join(store, img.rel_file)
    size = file_size(path)
    entry = manifest["images"].get(img.name)
    rejected = manifest.get("rejected", {}).get(img.name)
    if entry and entry.get("digest") == img.digest and entry.get("file") == img.rel_file:
        if size is None:
            return Plan("import", "missing although recorded in the manifest")
        if size != entry.get("size"):
            return Plan("import", f"size {size} differs from the manifest's {entry.get('size')} "
                                  f"(truncated or replaced)")
        if verify:
            ok, detail = check_squashfs(path)
            if not ok:
                return Plan("import", f"--verify-all: {detail}")
        problems = expect_problems(img.expect, entry.get("versions", {}))
        if problems:
            return Plan("demote", "; ".join(problems))
        if not stable_name_ok(store, img):
            return Plan("relink", "stable name missing or pointing elsewhere")
        return Plan("none")
    if rejected and rejected.get("digest") == img.digest and rejected.get("file") == img.rel_file \
            and size is not None and size == rejected.get("size"):
        problems = expect_problems(img.expect, rejected.get("versions", {}))
        if problems:
            return Plan("rejected", "; ".join(problems))
        return Plan("promote", "expectations now met")
    if size is not None:
        return Plan("adopt", "file present but not recorded (interrupted run?)")
    return Plan("import", "not in the store")


@dataclass
class SyncConfig:
    store: str
    retries: int
    backoff: float
    verify_all: bool
    env: Dict[str, str]
    squash_options: str = ""
    enroot_version: str = ""


def preflight(cfg: SyncConfig, todo: List[LockedImage]) -> List[str]:
    """Fail before importing if a filesystem cannot hold what the imports will write there."""
    if not todo:
        return []
    needs: List[Tuple[str, str, int, str]] = []  # (path, setting, bytes, why)
    largest = max(todo, key=lambda im: im.compressed_size)
    needs.append((enroot_setting("ENROOT_TEMP_PATH", cfg.env), "ENROOT_TEMP_PATH",
                  int(TEMP_FACTOR * largest.compressed_size),
                  f"{TEMP_FACTOR:g}x the largest compressed image, {largest.name}: the unpacked "
                  f"root filesystem lives there during import"))
    total = sum(im.compressed_size for im in todo)
    needs.append((enroot_setting("ENROOT_CACHE_PATH", cfg.env), "ENROOT_CACHE_PATH",
                  int(CACHE_FACTOR * total), "the downloaded layers are cached there"))
    factor = STORE_FACTOR_UNCOMPRESSED_DATA if data_uncompressed(cfg.squash_options) \
        else STORE_FACTOR_COMPRESSED
    needs.append((cfg.store, "--store", int(factor * total),
                  f"{factor:g}x the compressed layers for the .sqsh files "
                  f"(ENROOT_SQUASH_OPTIONS '{cfg.squash_options}')"))
    by_dev: Dict[int, List[Tuple[str, str, int, str]]] = {}
    probe: Dict[int, str] = {}
    for path, setting, need, why in needs:
        existing = path
        while not os.path.exists(existing):
            parent = os.path.dirname(existing.rstrip("/")) or "/"
            if parent == existing:
                break
            existing = parent
        dev = os.stat(existing).st_dev
        by_dev.setdefault(dev, []).append((path, setting, need, why))
        probe.setdefault(dev, existing)
    problems = []
    for dev, items in by_dev.items():
        need = sum(i[2] for i in items)
        free = shutil.disk_usage(probe[dev]).free
        if need > free:
            what = "; ".join(f"{p} ({s}) {n} bytes: {w}" for p, s, n, w in items)
            problems.append(
                f"preflight: not enough disk space on the filesystem of {items[0][0]}: needs {need} "
                f"bytes ({mb(need):.1f} MB), {free} bytes ({mb(free):.1f} MB) available [{what}] "
                f"(free space, or point {items[0][1]} at a larger local disk)")
    return problems


def enroot_version(env: Dict[str, str]) -> str:
    try:
        proc = subprocess.run(["enroot", "version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return proc.stdout.decode("utf-8", "replace").strip() or f"unknown (exit {proc.returncode})"


def manifest_entry(cfg: SyncConfig, img: LockedImage, size: int, compressor: str,
                   versions: Dict[str, str], status: str, reason: str = "") -> dict:
    entry = {
        "digest": img.digest,
        "file": img.rel_file,
        "size": size,
        "compression": compressor,
        "squash_options": cfg.squash_options,
        "enroot_version": cfg.enroot_version,
        "synced_at": now_utc(),
        "source": img.source,
        "versions": versions,
        "status": status,
    }
    if reason:
        entry["reason"] = reason
    return entry


def run_import(cfg: SyncConfig, img: LockedImage, tmp: str) -> Tuple[bool, str]:
    """One ``enroot import`` attempt into tmp; (ok, last lines of output)."""
    cmd = ["enroot", "import", "-o", tmp, img.enroot_uri]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=cfg.env)
    except OSError as exc:
        return False, f"cannot run enroot: {exc}"
    tail = " | ".join(proc.stdout.decode("utf-8", "replace").strip().splitlines()[-5:])
    if proc.returncode != 0:
        return False, f"enroot import exited {proc.returncode}: {tail}"
    if not os.path.isfile(tmp):
        return False, f"enroot import exited 0 but wrote no {tmp}: {tail}"
    return True, tail


def import_image(cfg: SyncConfig, manifest: dict, img: LockedImage, adopt: bool) -> Result:
    """Import (or adopt an unrecorded final file), check, read versions, publish, record."""
    store = cfg.store
    ensure_dir(os.path.join(store, img.name))
    final = os.path.join(store, img.rel_file)
    tmp = os.path.join(store, img.name, f".{img.hex}.sqsh.partial-{os.getpid()}")
    started = time.monotonic()
    source = final if adopt else tmp
    compressor = ""
    if adopt:
        ok, detail = check_squashfs(final)
        if ok:
            compressor = detail
            log(f"{img.name}: adopting {final} (complete file left unrecorded by an interrupted run)")
        else:
            log(f"{img.name}: {final} is unusable ({detail}); importing again")
            adopt, source = False, tmp
    if not adopt:
        attempts = cfg.retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            if os.path.lexists(tmp):
                os.unlink(tmp)
            log(f"{img.name}: importing {img.enroot_uri} (attempt {attempt}/{attempts})")
            ok, last = run_import(cfg, img, tmp)
            if ok:
                ok, detail = check_squashfs(tmp)
                if ok:
                    compressor = detail
                    break
                last = f"imported file failed the squashfs check: {detail}"
            warn(f"{img.name}: attempt {attempt}/{attempts} failed: {last}")
            if os.path.lexists(tmp):
                os.unlink(tmp)
            if attempt < attempts:
                delay = cfg.backoff * (2 ** (attempt - 1))
                log(f"{img.name}: retrying in {delay:g} s")
                time.sleep(delay)
        else:
            return Result(img, "failed", detail=f"{attempts} attempts failed; last: {last}")
        os.chmod(tmp, 0o644)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        versions = read_versions(source)
    except RuntimeError as exc:
        if not adopt and os.path.lexists(tmp):
            os.unlink(tmp)
        return Result(img, "failed", detail=f"cannot read versions: {exc}")
    size = os.stat(source).st_size
    if not adopt:
        os.replace(tmp, final)
        fsync_dir(os.path.dirname(final))
    else:
        os.chmod(final, 0o644)
    problems = expect_problems(img.expect, versions)
    if problems:
        reason = "; ".join(problems)
        drop_stable_name(store, img)
        if manifest["images"].get(img.name, {}).get("digest") == img.digest:
            del manifest["images"][img.name]
        manifest.setdefault("rejected", {})[img.name] = manifest_entry(
            cfg, img, size, compressor, versions, "rejected", reason)
        write_manifest(store, manifest)
        return Result(img, "rejected", size, reason)
    point_stable_name(store, img)
    manifest["images"][img.name] = manifest_entry(cfg, img, size, compressor, versions, "ok")
    manifest.get("rejected", {}).pop(img.name, None)
    write_manifest(store, manifest)
    elapsed = time.monotonic() - started
    rate = mb(size) / elapsed if elapsed > 0 else 0.0
    verb = "adopted" if adopt else "imported"
    log(f"{img.name}: {verb} {mb(size):.1f} MB in {elapsed:.1f} s ({rate:.1f} MB/s) "
        f"versions {format_versions(versions)}")
    return Result(img, "imported", size, f"{elapsed:.1f} s, {rate:.1f} MB/s")


def format_versions(versions: Dict[str, str]) -> str:
    return " ".join(f"{k}={versions[k]}" for k in sorted(versions)) or "-"


def print_table(headers: List[str], rows: List[List[str]]) -> None:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [headers] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    sys.stdout.flush()


def ensure_store(store: str) -> None:
    """Create the store directory itself, never its parent: a missing /fsx means FSx is not mounted,
    and writing images onto the root volume instead would fill it."""
    if os.path.isdir(store):
        return
    parent = os.path.dirname(os.path.abspath(store))
    if not os.path.isdir(parent):
        raise UsageError([f"{store}: parent directory {parent} does not exist (is FSx mounted?)"])
    ensure_dir(store)


def load_manifest_for_sync(store: str) -> dict:
    """A corrupt manifest (never written by us: we replace it atomically) is moved aside; complete
    .sqsh files are then adopted again cheaply (superblock check + version read, no import)."""
    try:
        return read_manifest(store)
    except ValueError as exc:
        aside = f"{manifest_path(store)}.corrupt-{int(time.time())}"
        error(f"{exc}; moving it to {aside} and rebuilding the manifest")
        os.replace(manifest_path(store), aside)
        return {"manifest_version": MANIFEST_VERSION, "images": {}, "rejected": {}}


def cmd_sync(args: argparse.Namespace) -> int:
    images = load_lock(args.lock)
    store = os.path.abspath(args.store)
    env = dict(os.environ)
    cfg = SyncConfig(store=store, retries=max(0, args.retries), backoff=max(0.0, args.backoff),
                     verify_all=args.verify_all, env=env,
                     squash_options=enroot_setting("ENROOT_SQUASH_OPTIONS", env))
    ensure_store(store)
    try:
        manifest = read_manifest(store)
    except ValueError:  # dealt with under the lock (load_manifest_for_sync)
        manifest = {"manifest_version": MANIFEST_VERSION, "images": {}, "rejected": {}}
    results: Dict[str, Result] = {}
    pending: List[LockedImage] = []
    for img in images:
        plan = plan_image(store, manifest, img, cfg.verify_all)
        if plan.action == "none":
            results[img.name] = Result(img, "present", manifest["images"][img.name]["size"])
        elif plan.action == "rejected":
            results[img.name] = Result(img, "rejected", manifest["rejected"][img.name]["size"],
                                       plan.reason)
        else:
            pending.append(img)
    if pending:
        lock_fd = os.open(os.path.join(store, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                log(f"waiting for {os.path.join(store, LOCK_NAME)} (another sync is running)")
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            clean_debris(store)
            manifest = load_manifest_for_sync(store)  # another sync may have finished meanwhile
            work: List[Tuple[LockedImage, Plan]] = []
            for img in pending:
                plan = plan_image(store, manifest, img, cfg.verify_all)
                if plan.action == "none":
                    results[img.name] = Result(img, "present", manifest["images"][img.name]["size"],
                                               "imported by a concurrent sync")
                elif plan.action == "rejected":
                    results[img.name] = Result(img, "rejected", manifest["rejected"][img.name]["size"],
                                               plan.reason)
                else:
                    work.append((img, plan))
            to_import = [img for img, plan in work if plan.action == "import"]
            tools = (["enroot"] if to_import else []) + \
                (["unsquashfs"] if any(p.action in ("import", "adopt") for _, p in work) else [])
            missing = [t for t in tools if shutil.which(t, path=env.get("PATH")) is None]
            if missing:
                raise UsageError([f"{' and '.join(missing)} not found on PATH {env.get('PATH', '')} "
                                  f"(install enroot and squashfs-tools on the head node)"])
            problems = preflight(cfg, to_import)
            if problems:
                raise UsageError(problems)
            if to_import or any(p.action == "adopt" for _, p in work):
                cfg.enroot_version = enroot_version(env)
            for img, plan in work:
                log(f"{img.name}: {plan.action} ({plan.reason})")
                results[img.name] = apply_plan(cfg, manifest, img, plan)
        finally:
            os.close(lock_fd)
    rows = []
    for img in images:
        r = results[img.name]
        status = "failed" if r.status == "rejected" else r.status
        detail = f"rejected: {r.detail}" if r.status == "rejected" else r.detail
        rows.append([img.name, img.short, status, f"{mb(r.size):.1f}", detail])
    print_table(["NAME", "DIGEST", "STATUS", "SIZE_MB", "DETAIL"], rows)
    failed = [r for r in results.values() if r.status in ("failed", "rejected")]
    for r in failed:
        error(f"{r.img.name}: {r.detail}")
    return EXIT_FAILED if failed else EXIT_OK


def apply_plan(cfg: SyncConfig, manifest: dict, img: LockedImage, plan: Plan) -> Result:
    store = cfg.store
    if plan.action == "relink":
        point_stable_name(store, img)
        return Result(img, "present", manifest["images"][img.name]["size"], "stable name repaired")
    if plan.action == "promote":
        entry = manifest["rejected"].pop(img.name)
        entry["status"] = "ok"
        entry.pop("reason", None)
        point_stable_name(store, img)
        manifest["images"][img.name] = entry
        write_manifest(store, manifest)
        return Result(img, "present", entry["size"], "now meets expect; stable name set")
    if plan.action == "demote":
        entry = manifest["images"].pop(img.name)
        entry["status"], entry["reason"] = "rejected", plan.reason
        drop_stable_name(store, img)
        manifest.setdefault("rejected", {})[img.name] = entry
        write_manifest(store, manifest)
        return Result(img, "rejected", entry["size"], plan.reason)
    return import_image(cfg, manifest, img, adopt=plan.action == "adopt")


# ---------------------------------------------------------------------------------------------- status

def cmd_status(args: argparse.Namespace) -> int:
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        error(f"store {store} is not a directory (is FSx mounted? has sync run?)")
        return EXIT_FAILED
    try:
        manifest = read_manifest(store)
    except ValueError as exc:
        error(str(exc))
        return EXIT_FAILED
    live = {}
    for path, hx, pid in partials(store):
        if pid_alive(pid):
            live[(os.path.basename(os.path.dirname(path)), hx)] = (pid, file_size(path) or 0)
    rows = []

    def row(name: str, digest: str, state: str, size: int, entry: Optional[dict], detail: str) -> None:
        rows.append([name, digest.split(":")[-1][:12], state, f"{mb(size):.1f}",
                     (entry or {}).get("synced_at", "-"),
                     format_versions((entry or {}).get("versions", {})), detail])

    if args.lock:
        images = load_lock(args.lock)
        for img in images:
            entry = manifest["images"].get(img.name)
            rej = manifest["rejected"].get(img.name)
            size = file_size(os.path.join(store, img.rel_file))
            if (img.name, img.hex) in live:
                pid, sofar = live[(img.name, img.hex)]
                row(img.name, img.digest, "in progress", sofar, None, f"pid {pid}")
            elif entry and entry.get("digest") == img.digest and size == entry.get("size"):
                row(img.name, img.digest, "present", size, entry, "")
            elif entry and entry.get("digest") == img.digest:
                row(img.name, img.digest, "corrupt", size or 0, entry,
                    f"file size {size} != manifest {entry.get('size')}")
            elif rej and rej.get("digest") == img.digest:
                row(img.name, img.digest, "rejected", rej.get("size", 0), rej, rej.get("reason", ""))
            else:
                other = f"store has {entry['digest'].split(':')[-1][:12]}" if entry else ""
                row(img.name, img.digest, "missing", 0, None, other)
    else:
        names = sorted(set(manifest["images"]) | set(manifest["rejected"]) | {n for n, _ in live})
        for name in names:
            entry = manifest["images"].get(name)
            rej = manifest["rejected"].get(name)
            for (n, hx), (pid, sofar) in sorted(live.items()):
                if n == name:
                    row(name, hx, "in progress", sofar, None, f"pid {pid}")
            if entry:
                size = file_size(os.path.join(store, entry["file"]))
                state = "present" if size == entry.get("size") else "corrupt"
                row(name, entry["digest"], state, size or 0, entry, "")
            if rej:
                row(name, rej["digest"], "rejected", rej.get("size", 0), rej, rej.get("reason", ""))
    print_table(["NAME", "DIGEST", "STATE", "SIZE_MB", "SYNCED_AT", "VERSIONS", "DETAIL"], rows)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- verify

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


def cmd_verify(args: argparse.Namespace) -> int:
    """Compute-node check: never imports, never writes to the store."""
    images = load_lock(args.lock)
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        error(f"verify: image store {store} is not a directory (is FSx mounted at "
              f"{os.path.dirname(store)}?)")
        return EXIT_FAILED
    if not os.path.isfile(manifest_path(store)):
        error(f"verify: {manifest_path(store)} does not exist (has the head node's image sync run?)")
        return EXIT_FAILED
    try:
        manifest = read_manifest(store)
    except ValueError as exc:
        error(f"verify: {exc} (the head node's image sync rewrites it)")
        return EXIT_FAILED
    present: List[Tuple[LockedImage, str]] = []
    for img in images:
        entry = manifest["images"].get(img.name)
        path = os.path.join(store, img.rel_file)
        size = file_size(path)
        if entry and entry.get("digest") == img.digest and size is not None and size == entry.get("size"):
            log(f"verify: {img.name}: present {img.short} ({mb(size):.1f} MB) "
                f"{format_versions(entry.get('versions', {}))}")
            present.append((img, path))
        elif manifest["rejected"].get(img.name, {}).get("digest") == img.digest:
            warn(f"verify: {img.name}: {img.short} was rejected by the head node's sync "
                 f"({manifest['rejected'][img.name].get('reason', '')}); jobs using {img.name}.sqsh "
                 f"will fail")
        else:
            warn(f"verify: {img.name}: {img.short} missing from {store} (the head node may still be "
                 f"importing it; jobs using {img.name}.sqsh will fail until it is present)")
    if present:
        if shutil.which("unsquashfs") is None:
            error("verify: unsquashfs not found (install squashfs-tools: enroot needs it to create "
                  "containers from .sqsh files)")
            return EXIT_FAILED
        by_comp: Dict[str, Tuple[LockedImage, str]] = {}
        for img, path in present:
            try:
                comp = read_superblock(path).compressor
            except (OSError, ValueError) as exc:
                warn(f"verify: {img.name}: {exc}")
                continue
            by_comp.setdefault(comp, (img, path))
        for comp, (img, path) in sorted(by_comp.items()):
            ok, detail = unsquashfs_can_read(path)
            if not ok:
                error(f"verify: this node's unsquashfs cannot read {comp}-compressed images "
                      f"({path}; unsquashfs says '{detail}'): install a squashfs-tools with {comp} "
                      f"support or sync with other ENROOT_SQUASH_OPTIONS")
                return EXIT_FAILED
            if detail:
                warn(f"verify: {img.name}: unsquashfs could not list {path}: {detail}")
            else:
                log(f"verify: unsquashfs reads {comp} images ({img.name})")
    log(f"verify: {len(present)}/{len(images)} locked images present in {store}")
    return EXIT_OK


# ------------------------------------------------------------------------ node fingerprints and drift

NODES_DIR = ".nodes"
FINGERPRINT_VERSION = 1
COMPAT_MODULE = "compat.py"
RULES_NAME = "compat_rules.json"
# ParallelCluster names compute nodes <queue>-<st|dy>-<compute resource>-<n> and, unless UseEc2Hostnames
# is set, uses that name as the hostname. Greedy like PC's own parser: the last -st-/-dy- splits it.
NODE_NAME_RE = re.compile(r"^(?P<queue>[a-z][a-z0-9-]*)-(?:st|dy)-(?P<cr>[A-Za-z][A-Za-z0-9-]*)-\d+$")
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
FINGERPRINT_TMP_RE = re.compile(r"^\.(?P<host>.+)\.json\.tmp-(?P<pid>\d+)$")
# Software that must be identical on all nodes of a queue (same AMI, same bootstrap). Instance type and
# compute resource may differ inside one queue by design, so they describe a node without counting.
DRIFT_FIELDS = ("ami_id", "kernel", "nvidia_driver", "cuda_driver_api", "efa_installer", "libfabric",
                "enroot", "pyxis", "slurm", "manifest_sha256")
NODE_FIELDS = ("hostname", "queue", "compute_resource", "instance_type", "instance_id", "recorded_at")
PYXIS_SO = "/usr/local/lib/slurm/spank_pyxis.so"
EFA_PACKAGES = "/opt/amazon/efa_installed_packages"
IMDS_DEFAULT = "http://169.254.169.254"
# CK_IMDS_ENDPOINT may point only at IMDS itself or at loopback (tests), so the session token never
# leaves the instance.
IMDS_HOSTS = ("169.254.169.254", "fd00:ec2::254", "127.0.0.1", "::1", "localhost")
IMDS_TIMEOUT = 1.0


def load_compat():
    """compat.py from this script's directory (the bundle ships both side by side)."""
    name = "clusterkit_compat"
    if name in sys.modules:
        return sys.modules[name]
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, COMPAT_MODULE)
    if not os.path.isfile(path):
        raise UsageError([f"{path} not found: the ClusterKit bundle in {here} is incomplete (rebuild "
                          f"and redeploy it with the CDK app)"])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def default_rules_path() -> str:
    """Next to this script (the bundle), else the repository's clusterkit/data (a checkout)."""
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, RULES_NAME)
    repo = os.path.join(os.path.dirname(here), "clusterkit", "data", RULES_NAME)
    return bundled if os.path.isfile(bundled) or not os.path.isfile(repo) else repo


def load_rules(path: Optional[str]):
    compat = load_compat()
    path = path or default_rules_path()
    try:
        return compat, compat.load_rules(path)
    except compat.RulesError as exc:
        raise UsageError(exc.lines + ["(the compatibility rules ship in the ClusterKit bundle as "
                                      f"{RULES_NAME}; rebuild it with the CDK app)"])


def host_path(env: Dict[str, str], path: str) -> str:
    """A host file, under CK_ROOT when set (the node scripts' test root convention)."""
    return env.get("CK_ROOT", "") + path


def read_host_text(env: Dict[str, str], path: str) -> str:
    try:
        with open(host_path(env, path), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def find_tool(name: str, env: Dict[str, str], *known: str) -> Optional[str]:
    """The tool at its usual place on PC AMIs (under CK_ROOT), else on PATH."""
    for path in known:
        full = host_path(env, path)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    return shutil.which(name, path=env.get("PATH"))


def run_tool(cmd: List[str], env: Dict[str, str], timeout: float = 20) -> Tuple[int, str]:
    """(exit code, stdout+stderr); 127 when it cannot run at all."""
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def nvidia_facts(env: Dict[str, str]) -> Tuple[Optional[str], Optional[str], str]:
    """(driver version, CUDA driver API version, why unknown). CPU instances of a GPU AMI have
    nvidia-smi but no device: both unknown, never an error."""
    exe = find_tool("nvidia-smi", env, "/usr/bin/nvidia-smi")
    if not exe:
        return None, None, "nvidia-smi not found"
    rc, out = run_tool([exe, "--query-gpu=driver_version", "--format=csv,noheader"], env)
    drivers = sorted({ln.strip() for ln in out.splitlines() if re.fullmatch(r"\d+(\.\d+)+", ln.strip())})
    if rc != 0 or not drivers:
        return None, None, f"nvidia-smi: {first_line(out) or f'exit {rc}'}"
    _rc, header = run_tool([exe], env)
    m = re.search(r"CUDA Version:\s*(\d+(?:\.\d+)*)", header)
    return drivers[0], (m.group(1) if m else None), ""


def imds_facts(env: Dict[str, str]) -> Tuple[Dict[str, Optional[str]], str]:
    """instance type, AMI id and instance id from IMDSv2 (token PUT, then GETs; 1 s timeouts)."""
    paths = {"instance_type": "instance-type", "ami_id": "ami-id", "instance_id": "instance-id"}
    facts: Dict[str, Optional[str]] = dict.fromkeys(paths)
    if env.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return facts, "IMDS disabled by AWS_EC2_METADATA_DISABLED"
    base = env.get("CK_IMDS_ENDPOINT", IMDS_DEFAULT).rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme != "http" or parts.hostname not in IMDS_HOSTS:
        return facts, f"CK_IMDS_ENDPOINT {base} is neither IMDS nor loopback; not queried"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # IMDS never via a proxy
    failures = (OSError, ValueError, http.client.HTTPException)
    try:
        req = urllib.request.Request(f"{base}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with opener.open(req, timeout=IMDS_TIMEOUT) as resp:
            token = resp.read().decode("ascii", "replace").strip()
    except failures as exc:
        return facts, f"no IMDSv2 token from {base} ({exc})"
    for key, path in paths.items():
        req = urllib.request.Request(f"{base}/latest/meta-data/{path}",
                                     headers={"X-aws-ec2-metadata-token": token})
        try:
            with opener.open(req, timeout=IMDS_TIMEOUT) as resp:
                facts[key] = resp.read().decode("utf-8", "replace").strip() or None
        except failures:
            pass
    return facts, ""


def libfabric_version(env: Dict[str, str], packaged: Optional[str]) -> Optional[str]:
    """`fi_info --version` ("libfabric: X": the library actually loaded), else the EFA package record."""
    exe = find_tool("fi_info", env, "/opt/amazon/efa/bin/fi_info")
    if exe:
        rc, out = run_tool([exe, "--version"], env)
        m = re.search(r"^libfabric:\s*(\S+)", out, re.M)
        if rc == 0 and m:
            return m.group(1)
    return packaged


def pyxis_version(env: Dict[str, str]) -> Optional[str]:
    """pyxis >= 0.11 compiles "pyxis: version vX.Y.Z" into its plugin (NVIDIA/pyxis pyxis_slurmd.c);
    an older plugin is recorded as "present"."""
    path = host_path(env, PYXIS_SO)
    try:
        with open(path, "rb") as fh:
            data = fh.read(64 << 20)
    except OSError:
        return None
    m = re.search(rb"pyxis: version v(\d+\.\d+(?:\.\d+)?)", data)
    return m.group(1).decode() if m else "present"


def tool_version(env: Dict[str, str], cmd: List[str], pattern: str) -> Optional[str]:
    rc, out = run_tool(cmd, env)
    m = re.search(pattern, out, re.M)
    return m.group(1) if rc == 0 and m else None


def node_identity(name: str) -> Tuple[Optional[str], Optional[str]]:
    m = NODE_NAME_RE.match(name)
    return (m.group("queue"), m.group("cr")) if m else (None, None)


def read_manifest_bytes(store: str) -> Tuple[Optional[str], dict]:
    """(sha256 of manifest.json as read, its content); (None, empty) when there is none yet."""
    try:
        with open(manifest_path(store), "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None, empty_manifest()
    except OSError as exc:
        raise ValueError(f"{manifest_path(store)}: cannot read: {exc.strerror}")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{manifest_path(store)}: not valid JSON ({exc})")
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), dict):
        raise ValueError(f"{manifest_path(store)}: images: missing or not an object")
    return hashlib.sha256(data).hexdigest(), doc


def image_versions(img: LockedImage, manifest: dict) -> Tuple[Dict[str, str], str]:
    """Recorded versions when the store holds this digest, else what the lock expects."""
    entry = manifest["images"].get(img.name)
    if entry and entry.get("digest") == img.digest and isinstance(entry.get("versions"), dict):
        return dict(entry["versions"]), "recorded"
    return dict(img.expect), "expected"


def clean_fingerprint_debris(nodes: str, host: str) -> None:
    """This host's temp files left by a crashed earlier run (no other writer uses this host's name)."""
    for f in os.listdir(nodes):
        m = FINGERPRINT_TMP_RE.match(f)
        if m and m.group("host") == host and not pid_alive(int(m.group("pid"))):
            os.unlink(os.path.join(nodes, f))


def cmd_fingerprint(args: argparse.Namespace) -> int:
    """Compute node, OnNodeConfigured: record what this node runs, refuse what it cannot run."""
    compat, rules = load_rules(args.rules)
    images = load_lock(args.lock)
    env = dict(os.environ)
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        error(f"fingerprint: image store {store} is not a directory (is FSx mounted?)")
        return EXIT_FAILED
    host = args.node_name or socket.gethostname().split(".")[0]
    if not HOSTNAME_RE.match(host):
        raise UsageError([f"node name {host!r} cannot name a fingerprint file (letters, digits, . _ -)"])
    try:
        manifest_sha, manifest = read_manifest_bytes(store)
    except ValueError as exc:
        error(f"fingerprint: {exc} (the head node's image sync rewrites it)")
        return EXIT_FAILED
    queue, resource = node_identity(host)
    driver, cuda_api, no_driver = nvidia_facts(env)
    imds, no_imds = imds_facts(env)
    efa = parse_efa_packages(read_host_text(env, EFA_PACKAGES))
    enroot_exe = find_tool("enroot", env, "/usr/bin/enroot")
    sinfo = find_tool("sinfo", env, "/opt/slurm/bin/sinfo")
    doc = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "hostname": host,
        "queue": queue,
        "compute_resource": resource,
        "recorded_at": now_utc(),
        "instance_type": imds["instance_type"],
        "instance_id": imds["instance_id"],
        "ami_id": imds["ami_id"],
        "kernel": os.uname().release,
        "nvidia_driver": driver,
        "cuda_driver_api": cuda_api,
        "efa_installer": efa.get("efa_installer"),
        "libfabric": libfabric_version(env, efa.get("libfabric")),
        "enroot": tool_version(env, [enroot_exe, "version"], r"^\s*(\d\S*)") if enroot_exe else None,
        "pyxis": pyxis_version(env),
        "slurm": tool_version(env, [sinfo, "--version"], r"^slurm\S*\s+(\S+)") if sinfo else None,
        "manifest_sha256": manifest_sha,
        "rules_as_of": rules.as_of,
    }
    findings = []
    gpu_images = []
    for img in images:
        versions, origin = image_versions(img, manifest)
        if versions.get("cuda"):
            gpu_images.append(img.name)
        for f in compat.check(rules, img.name, versions, driver):
            findings.append((f, origin))
    doc["findings"] = [dict(f.as_dict(), versions=origin) for f, origin in findings]
    nodes = os.path.join(store, NODES_DIR)
    ensure_dir(nodes)
    clean_fingerprint_debris(nodes, host)
    path = write_json_atomic(nodes, f"{host}.json", doc)
    shown = {k: doc[k] for k in ("queue", "instance_type", "nvidia_driver", "cuda_driver_api",
                                 "efa_installer", "libfabric", "enroot", "pyxis", "slurm")}
    log(f"fingerprint: wrote {path}: " + " ".join(f"{k}={v if v is not None else '-'}"
                                                  for k, v in shown.items()))
    if no_imds:
        log(f"fingerprint: instance type and AMI unknown: {no_imds}")
    if driver is None and gpu_images:
        warn(f"fingerprint: no NVIDIA driver answers ({no_driver}): CUDA images "
             f"{', '.join(gpu_images)} cannot use GPUs on this node")
    fatal = []
    for f, origin in findings:
        if f.kind == "driver_for_cuda" and f.level == "error":
            fatal.append(f)
            error(f"fingerprint: {f.text()}")
        elif f.level == "error":
            # Image-level: every node would fail the same way, so replacing this one cannot help.
            warn(f"fingerprint: {f.text()} (versions {origin}; an image problem, not this node's: fix "
                 f"the image)")
        else:
            warn(f"fingerprint: {f.text()} (versions {origin})")
    if fatal:
        error(f"fingerprint: this node cannot run {len(fatal)} locked image(s); failing its bootstrap so "
              f"ParallelCluster replaces it (use an AMI with a newer NVIDIA driver, or images built for "
              f"an older CUDA)")
    return EXIT_FAILED if fatal else EXIT_OK


def natural_key(name: str) -> List[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def read_fingerprints(nodes: str, max_age_hours: Optional[float]) -> Tuple[List[dict], List[str]]:
    """Every <host>.json in .nodes (dot files are temp files); (fingerprints, skipped with reason)."""
    found: List[dict] = []
    skipped: List[str] = []
    try:
        names = sorted(os.listdir(nodes), key=natural_key)
    except FileNotFoundError:
        return found, skipped
    now = _dt.datetime.now(_dt.timezone.utc)
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        path = os.path.join(nodes, name)
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            skipped.append(f"{path}: unreadable ({exc})")
            continue
        if not isinstance(doc, dict) or doc.get("fingerprint_version") != FINGERPRINT_VERSION:
            skipped.append(f"{path}: not a version {FINGERPRINT_VERSION} fingerprint")
            continue
        doc.setdefault("hostname", name[:-len(".json")])
        if max_age_hours is not None:
            try:
                at = _dt.datetime.strptime(str(doc.get("recorded_at")), "%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                skipped.append(f"{path}: recorded_at {doc.get('recorded_at')!r} is not a UTC timestamp")
                continue
            age = (now - at.replace(tzinfo=_dt.timezone.utc)).total_seconds() / 3600
            if age > max_age_hours:
                skipped.append(f"{path}: recorded {age:.1f} h ago (older than --max-age-hours "
                               f"{max_age_hours:g})")
                continue
        found.append(doc)
    return found, skipped


def group_queue(fps: List[dict]) -> List[dict]:
    """Nodes with identical DRIFT_FIELDS form one group; biggest group first, labelled A, B, ..."""
    groups: Dict[Tuple, List[dict]] = {}
    for fp in fps:
        groups.setdefault(tuple(str(fp.get(k)) for k in DRIFT_FIELDS), []).append(fp)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), natural_key(g[0]["hostname"])))
    out = []
    for i, members in enumerate(ordered):
        label = chr(ord("A") + i) if i < 26 else f"G{i + 1}"
        times = sorted(str(m.get("recorded_at")) for m in members)
        out.append({"label": label,
                    "nodes": sorted((m["hostname"] for m in members), key=natural_key),
                    "fingerprint": {k: members[0].get(k) for k in DRIFT_FIELDS},
                    "recorded": [times[0], times[-1]]})
    return out


def current_incompatibilities(store: str, fps: List[dict], rules_path: Optional[str]
                              ) -> Tuple[List[dict], str]:
    """Each node's driver against the images the store serves NOW: a node that booted before a new
    image arrived was never checked against it."""
    try:
        compat, rules = load_rules(rules_path)
        _sha, manifest = read_manifest_bytes(store)
    except (UsageError, ValueError) as exc:
        text = "; ".join(exc.lines) if isinstance(exc, UsageError) else str(exc)
        return [], f"cannot check drivers against the current images: {text}"
    found = []
    for fp in fps:
        driver = fp.get("nvidia_driver")
        if not driver:
            continue
        for name in sorted(manifest["images"]):
            versions = manifest["images"][name].get("versions") or {}
            for f in compat.check(rules, name, versions, driver):
                if f.kind == "driver_for_cuda" and f.level == "error":
                    found.append({"node": fp["hostname"], "image": name, "rule": f.rule,
                                  "message": f.message})
    return found, ""


def short_nodes(nodes: List[str], limit: int = 4) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" (+{len(nodes) - limit} more)" if len(nodes) > limit else "")


def cmd_drift(args: argparse.Namespace) -> int:
    """Head node: do the nodes of each queue run the same software? (exit 1 when they do not)"""
    store = os.path.abspath(args.store)
    if not os.path.isdir(store):
        raise UsageError([f"store {store} is not a directory (is FSx mounted at "
                          f"{os.path.dirname(store)}?)"])
    nodes_dir = os.path.join(store, NODES_DIR)
    fps, skipped = read_fingerprints(nodes_dir, args.max_age_hours)
    by_queue: Dict[str, List[dict]] = {}
    for fp in fps:
        by_queue.setdefault(fp.get("queue") or "(unknown)", []).append(fp)
    report = {"queues": {}, "skipped": skipped, "nodes": len(fps)}
    for queue in sorted(by_queue):
        groups = group_queue(by_queue[queue])
        differing = [k for k in DRIFT_FIELDS
                     if len({str(g["fingerprint"].get(k)) for g in groups}) > 1]
        report["queues"][queue] = {"drift": len(groups) > 1, "differing_fields": differing,
                                   "groups": groups, "nodes": len(by_queue[queue])}
    incompatible, no_check = current_incompatibilities(store, fps, args.rules) if fps else ([], "")
    report["incompatible"] = incompatible
    report["drift"] = any(q["drift"] for q in report["queues"].values())
    bad = report["drift"] or bool(incompatible)
    if args.format == "json":
        print(json.dumps(report, indent=2, sort_keys=True))
        sys.stdout.flush()
        return EXIT_FAILED if bad else EXIT_OK
    for line in skipped:
        warn(f"drift: skipped {line}")
    if no_check:
        warn(f"drift: {no_check}")
    if not fps:
        print(f"no node fingerprints in {nodes_dir} (compute nodes write them at OnNodeConfigured)")
        return EXIT_OK
    for queue, q in report["queues"].items():
        groups = q["groups"]
        if not q["drift"]:
            print(f"queue {queue}: {q['nodes']} node(s), one fingerprint: no drift")
            continue
        print(f"queue {queue}: {q['nodes']} nodes, {len(groups)} different fingerprints: DRIFT")
        headers = ["  FIELD"] + [f"{g['label']} ({len(g['nodes'])} node{'s' if len(g['nodes']) > 1 else ''})"
                               for g in groups]
        rows = [[k] + ["-" if g["fingerprint"].get(k) is None else str(g["fingerprint"][k])
                       for g in groups] for k in q["differing_fields"]]
        rows.append(["nodes"] + [short_nodes(g["nodes"]) for g in groups])
        rows.append(["recorded"] + [g["recorded"][0] if g["recorded"][0] == g["recorded"][1]
                                    else f"{g['recorded'][0]}..{g['recorded'][1]}" for g in groups])
        print_table(headers, [["  " + r[0]] + r[1:] for r in rows])
    for item in incompatible:
        print(f"node {item['node']}: {item['message']} [{item['rule']}]")
    drifting = [q for q, v in report["queues"].items() if v["drift"]]
    print(f"{len(fps)} node(s) in {len(report['queues'])} queue(s): "
          f"{'drift in ' + ', '.join(drifting) if drifting else 'no drift'}"
          f"{f'; {len(incompatible)} node/image pair(s) the node driver cannot run' if incompatible else ''}")
    return EXIT_FAILED if bad else EXIT_OK


# ------------------------------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="image_sync.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sync", help="import missing locked images into the store (head node)")
    s.add_argument("--lock", required=True, help="cluster_configs/<name>.images.lock")
    s.add_argument("--store", required=True, help="image store directory, e.g. /fsx/containers")
    s.add_argument("--retries", type=int, default=2,
                   help="extra attempts per image after a failed import (default 2)")
    s.add_argument("--backoff", type=float, default=15.0,
                   help="seconds before the first retry, doubled each time (default 15)")
    s.add_argument("--verify-all", action="store_true",
                   help="also check every present image with unsquashfs -s (reads metadata)")
    st = sub.add_parser("status", help="present / missing / in progress per image")
    st.add_argument("--store", required=True)
    st.add_argument("--lock")
    v = sub.add_parser("verify", help="compute node: store mounted, manifest readable (never imports)")
    v.add_argument("--store", required=True)
    v.add_argument("--lock", required=True)
    f = sub.add_parser("fingerprint",
                       help="compute node: record this node's software in <store>/.nodes/<host>.json; "
                            "exit 1 if its NVIDIA driver cannot run a locked image")
    f.add_argument("--store", required=True)
    f.add_argument("--lock", required=True)
    f.add_argument("--rules", help=f"compatibility rules (default: {RULES_NAME} next to this script)")
    f.add_argument("--node-name", help="override the hostname (the Slurm node name <queue>-st|dy-<cr>-<n>)")
    d = sub.add_parser("drift", help="head node: group node fingerprints per queue, show what differs; "
                                     "exit 1 when nodes of one queue differ")
    d.add_argument("--store", required=True)
    d.add_argument("--rules", help=f"compatibility rules (default: {RULES_NAME} next to this script)")
    d.add_argument("--format", choices=("table", "json"), default="table")
    d.add_argument("--max-age-hours", type=float,
                   help="ignore fingerprints recorded longer ago (nodes long gone)")
    return p


def main(argv: Optional[Iterable[str]] = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "sync":
            return cmd_sync(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "fingerprint":
            return cmd_fingerprint(args)
        if args.command == "drift":
            return cmd_drift(args)
        return cmd_verify(args)
    except UsageError as exc:
        for line in exc.lines:
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
