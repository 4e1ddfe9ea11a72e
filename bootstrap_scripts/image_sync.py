#!/usr/bin/env python3
"""Keep the FSx image store in step with the image lock (head node), or check it (compute nodes).

Commands (stdlib only, Python 3.9+, run as root on the head node; compute nodes only run ``verify``):

  image_sync.py sync   --lock LOCK --store DIR [--retries N] [--backoff S] [--verify-all]
  image_sync.py status --store DIR [--lock LOCK]
  image_sync.py verify --store DIR --lock LOCK

Store layout (the contract every other part of ClusterKit reads)::

  <store>/<name>/<digest-hex>.sqsh        mode 0644, written once, never modified in place
  <store>/<name>.sqsh -> <name>/<hex>.sqsh relative symlink: the stable name jobs use
  <store>/manifest.json                    what is in the store; replaced atomically, never half-written
  <store>/.sync.lock                       flock: one importer at a time
  <store>/<name>/.<hex>.sqsh.partial-<pid> import in progress (or debris of a crashed run)

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

Exit codes: 0 everything present, 1 an image failed (or verify found the store unusable), 2 usage,
lock or preflight error (disk space, missing tools).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import errno
import fcntl
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import time
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


def write_manifest(store: str, manifest: dict) -> None:
    """Replace manifest.json atomically: temp file + fsync + rename + fsync(dir).

    A reader (or a crash at any instant) sees either the old or the new complete file, never a mix.
    """
    doc = {"manifest_version": MANIFEST_VERSION, "images": manifest.get("images", {})}
    if manifest.get("rejected"):
        doc["rejected"] = manifest["rejected"]
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
    tmp = os.path.join(store, f".{MANIFEST_NAME}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, 0o644)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, manifest_path(store))
    fsync_dir(store)


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
    return p


def main(argv: Optional[Iterable[str]] = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "sync":
            return cmd_sync(args)
        if args.command == "status":
            return cmd_status(args)
        return cmd_verify(args)
    except UsageError as exc:
        for line in exc.lines:
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
