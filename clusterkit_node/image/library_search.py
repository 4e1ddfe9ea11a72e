"""Where the dynamic loader finds a library inside an image, following ld.so(8)'s order.

Why: an image can hold several copies of NCCL (a system one from the CUDA base image and a pip wheel's);
the one a job runs is the one the loader picks for the program that needs it. Order, per ld.so(8):
DT_RPATH of the object (only when it has no DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH, then the
ld.so.cache (approximated by the directories /etc/ld.so.conf lists, which ldconfig builds it from), then
the default directories. LD_LIBRARY_PATH is the image's: enroot applies the image config's Env, which it
writes to the image's /etc/environment.
"""
from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from clusterkit_node.image.elf_dynamic import Dynamic
from clusterkit_node.image.image_files import Entry, is_file

# glibc's trusted directories: Debian/Ubuntu multiarch first, then the RHEL/Amazon Linux ones
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")


@dataclass(frozen=True)
class Found:
    path: str   # the file's real path in the image
    via: str    # how the loader got there: "DT_RPATH $ORIGIN/../../nvidia/nccl/lib", "ld.so.conf", ...


@dataclass(frozen=True)
class LoaderSetup:
    ld_library_path: Tuple[str, ...]
    conf_dirs: Tuple[str, ...]

    @classmethod
    def of_image(cls, entries: Dict[str, Entry], read_text: Callable[[str], Optional[str]]) -> "LoaderSetup":
        env = parse_environment(read_text("/etc/environment") or "")
        return cls(ld_library_path=tuple(p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p),
                   conf_dirs=tuple(conf_dirs(entries, read_text)))


def parse_environment(text: str) -> Dict[str, str]:
    """KEY=VALUE lines (optionally quoted, optionally after ``export``), as enroot writes the image's Env."""
    env: Dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if m:
            value = m.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            env[m.group(1)] = value
    return env


def conf_dirs(entries: Dict[str, Entry], read_text: Callable[[str], Optional[str]],
              conf: str = "/etc/ld.so.conf", depth: int = 0) -> List[str]:
    """The directories /etc/ld.so.conf lists, ``include`` globs expanded in sorted order (as ldconfig)."""
    dirs: List[str] = []
    if depth > 8:
        return dirs
    for raw in (read_text(conf) or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include"):
            for pattern in line.split()[1:]:
                pattern = pattern if pattern.startswith("/") else posixpath.join(posixpath.dirname(conf), pattern)
                for path in sorted(p for p in entries if fnmatch.fnmatchcase(p, pattern)):
                    dirs += conf_dirs(entries, read_text, path, depth + 1)
        elif line.startswith("/"):
            dirs.append(line.split("=", 1)[0])
    return dirs


def expand(path: str, origin: str) -> str:
    """$ORIGIN, $LIB and $PLATFORM as the loader substitutes them (x86_64 values for the last two)."""
    for token, value in (("ORIGIN", origin), ("LIB", "lib64"), ("PLATFORM", "x86_64")):
        path = path.replace("${" + token + "}", value).replace("$" + token, value)
    return posixpath.normpath(path)


def find_library(entries: Dict[str, Entry], setup: LoaderSetup, name: str, *,
                 needed_by: Optional[Tuple[str, Dynamic]] = None) -> Optional[Found]:
    """The file the loader opens for ``name`` when ``needed_by`` (path, its dynamic entries) needs it."""
    if "/" in name:
        real = is_file(entries, name)
        return Found(real, "a path") if real else None
    search: List[Tuple[str, str]] = []
    origin = ""
    rpath: Tuple[str, ...] = ()
    runpath: Tuple[str, ...] = ()
    if needed_by:
        origin = posixpath.dirname(needed_by[0])
        rpath = () if needed_by[1].runpath else needed_by[1].rpath
        runpath = needed_by[1].runpath
    search += [(expand(d, origin), f"DT_RPATH {d}") for d in rpath]
    search += [(d, f"LD_LIBRARY_PATH {d}") for d in setup.ld_library_path]
    search += [(expand(d, origin), f"DT_RUNPATH {d}") for d in runpath]
    search += [(d, "/etc/ld.so.conf") for d in setup.conf_dirs]
    search += [(d, "the default directories") for d in DEFAULT_DIRS]
    for directory, via in search:
        real = is_file(entries, posixpath.join(directory, name))
        if real:
            return Found(real, via)
    return None
