"""Which ``squashfuse`` enroot runs for an in-place start, and whether it reads on more than one thread.

Why: enroot mounts every in-place start with the program named ``squashfuse`` on the job's PATH (enroot 4.1.2
``src/runtime.sh`` ``runtime::_mount_rootfs_shim``: ``squashfuse -f -o uid=U,gid=G IMAGE LOWER``). The high-level
``squashfuse`` serves every read on one thread in every release: on a 16-core H200 node a DataLoader with 8
workers read 4.46x slower than from an extracted image (../shared/reference/domain.md, "Reading through
squashfuse"). ``squashfuse_ll`` is multi-threaded by default since 0.3.0 (squashfuse NEWS: "Enable multithreading in
squashfuse_ll by default"; 0.2.0 only with ``--enable-multithreading``) and takes enroot's ``-o uid=,gid=`` since
0.2.0 (older ones fail: ``fuse: unknown option(s)``). So a node that has a multi-threaded ``squashfuse_ll``
(Ubuntu 24.04's squashfuse 0.5.0, or a custom AMI's) puts it first on the PATH enroot searches, as
``/usr/local/bin/squashfuse`` (a two-line wrapper that runs it with one malloc arena, see TUNABLE; ``/usr/bin`` and
the OS package stay untouched), and the start path (start_path.py) starts images in place only where the reader is
multi-threaded.

How a binary is judged, without trusting its name or its ``--help`` (Debian's single-threaded 0.1.104 prints the
libfuse multi-thread options all the same): its version from ``--help``'s first line, its kind and threading from
its ELF dynamic string table (image/elf_dynamic.py): the low-level one imports ``fuse_session_new``, and only a
multi-threaded build calls ``fuse_session_loop_mt`` (ll_main.c, ``#ifdef SQFS_MULTITHREADED``).

``squashfuse-reader`` (both roles, before the start path is chosen; idempotent): write, keep, or remove the wrapper
and say which binary will serve, one ``LEVEL message`` line each (file_set.py).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
from dataclasses import asdict, dataclass
from typing import Dict, Optional, Sequence, Tuple

from clusterkit_node.image.elf_dynamic import RangeReader, read_dynamic
from clusterkit_node.node.facts import NODE_PATH, host_path, run_tool
from clusterkit_node.node.file_set import Changes, NodeProblem, remove_file, report, write_file

READER_LINK = "/usr/local/bin/squashfuse"   # first on the PATH enroot searches (start_path.NODE_PATH, PATHs of PC AMIs)
LOW_LEVEL, HIGH_LEVEL = "squashfuse_ll", "squashfuse"
OPTIONS_SINCE = (0, 2, 0)        # squashfuse NEWS 0.2.0: squashfuse_ll takes -o uid=N,gid=N
THREADS_BY_DEFAULT_SINCE = (0, 3, 0)  # squashfuse NEWS 0.3.0: multi-threading on by default
MT_SYMBOL = "fuse_session_loop_mt"   # libfuse's multi-threaded loop (versioned: fuse_session_loop_mt_32, ...)
LL_SYMBOL = "fuse_session_new"       # only the low-level API creates a session itself
VERSION_RE = re.compile(r"squashfuse (\d+\.\d+\.\d+)")
MAX_BINARY = 64 << 20


def version_tuple(text: Optional[str]) -> Optional[Tuple[int, ...]]:
    if not text or not re.fullmatch(r"\d+(\.\d+){1,3}", text):
        return None
    return tuple(int(p) for p in text.split("."))


@dataclass(frozen=True)
class Reader:
    """One squashfuse binary as measured on this node."""

    path: str                   # the real file (symlinks resolved)
    kind: str                   # LOW_LEVEL or HIGH_LEVEL (from what it imports)
    version: Optional[str]      # from its --help, None when it did not say
    multi_threaded: bool        # it calls libfuse's multi-threaded loop
    takes_enroot_options: bool  # -o uid=N,gid=N (enroot passes them on every start)

    @property
    def serves_in_place(self) -> bool:
        """Fit to be what enroot runs: takes enroot's options and reads on many threads."""
        return self.multi_threaded and self.takes_enroot_options

    def describe(self) -> str:
        threads = "multi-threaded" if self.multi_threaded else "single-threaded"
        return f"{self.kind} {self.version or '(version unknown)'} ({threads}, {self.path})"

    def as_dict(self) -> Dict[str, object]:
        return asdict(self)

    def summary(self) -> str:
        """What the fingerprint records and drift compares: kind, version, threads (no path: two AMIs may differ
        in where they keep the same binary)."""
        return f"{self.kind} {self.version or '?'} {'multi-threaded' if self.multi_threaded else 'single-threaded'}"


def _read_ranges(path: str) -> RangeReader:
    def read(ranges: Sequence[Tuple[int, int]]) -> Dict[Tuple[int, int], bytes]:
        out: Dict[Tuple[int, int], bytes] = {}
        with open(path, "rb") as fh:
            for off, length in ranges:
                fh.seek(off)
                out[(off, length)] = fh.read(min(length, MAX_BINARY))
        return out
    return read


def probe(path: str, env: Dict[str, str]) -> Optional[Reader]:
    """The binary at ``path`` judged, or None when it is not an executable ELF file."""
    real = os.path.realpath(path)
    try:
        if not os.path.isfile(real) or not os.access(real, os.X_OK) or os.path.getsize(real) > MAX_BINARY:
            return None
        dynamic = read_dynamic(_read_ranges(real))
    except OSError:
        return None
    names = dynamic.names if dynamic else frozenset()
    _rc, out = run_tool([real, "--help"], env, timeout=5)
    match = VERSION_RE.search(out)
    version = match.group(1) if match else None
    kind = LOW_LEVEL if LL_SYMBOL in names else HIGH_LEVEL
    threaded = kind == LOW_LEVEL and any(n.startswith(MT_SYMBOL) for n in names)
    vt = version_tuple(version)
    options = kind == HIGH_LEVEL or (vt is not None and vt >= OPTIONS_SINCE)
    return Reader(real, kind, version, threaded, options)


def _search_path(env: Dict[str, str]) -> str:
    return NODE_PATH if not env.get("CK_ROOT") else env.get("PATH", NODE_PATH)


def serving(env: Dict[str, str]) -> Optional[Reader]:
    """What enroot will run as ``squashfuse`` (the first on the node's PATH; through ClusterKit's wrapper, the binary
    it runs), judged; None when there is none."""
    found = shutil.which(HIGH_LEVEL, path=_search_path(env))
    if found is None:
        return None
    target = wrapper_target(found)
    return probe(host_path(env, target) if target else found, env)


def low_level_candidate(env: Dict[str, str]) -> Optional[Reader]:
    """The node's own squashfuse_ll (the OS package's or a custom AMI's), judged; None when there is none."""
    found = shutil.which(LOW_LEVEL, path=_search_path(env))
    return probe(found, env) if found else None


def why_not(reader: Reader) -> str:
    """Why ``reader`` cannot serve in place (for the log)."""
    vt = version_tuple(reader.version)
    if not reader.takes_enroot_options:
        return (f"{reader.describe()}: older than 0.2.0, it rejects enroot's -o uid=,gid= "
                "(squashfuse NEWS 0.2.0) and would fail every in-place start")
    if vt is not None and vt < THREADS_BY_DEFAULT_SINCE:
        return f"{reader.describe()}: built without multi-threading (the default only since 0.3.0)"
    return f"{reader.describe()}: it reads on one thread"


WRAPPER_MARK = "# clusterkit-squashfuse-reader target="
SAFE_PATH = re.compile(r"/[A-Za-z0-9._+/-]{1,255}")
# glibc reads /proc/sys/vm/overcommit_memory the first time a thread's malloc arena shrinks (malloc/arena.c
# check_may_shrink_heap). Under enroot the reader's root is the container it serves (pivot_root moves every process of
# the mount namespace), so that open is a FUSE request to itself: answered by a sibling thread, or never when the
# siblings are being killed at teardown (a zombie, a step that cannot end: docs/benchmarks.md "The whole job in
# place"). One arena has no per-thread heap to shrink: measured with strace, squashfuse_ll 0.6.2 opened that file once
# per mount under 8 parallel readers, never with this setting, at the same read time.
TUNABLE = "glibc.malloc.arena_max=1"


def wrapper_text(target: str) -> str:
    """The /usr/local/bin/squashfuse enroot runs: the multi-threaded squashfuse_ll, with one malloc arena."""
    if not SAFE_PATH.fullmatch(target) or "/../" in target:
        raise NodeProblem(f"squashfuse-reader: refusing to write a wrapper for the path {target!r}")
    return ("#!/bin/sh\n"
            "# Written by ClusterKit (clusterkit_node/node/squashfuse_reader.py): enroot's in-place reader is this\n"
            "# node's multi-threaded squashfuse_ll, with one malloc arena (it must never open a file through the\n"
            "# image it serves). Rewritten or removed at every boot.\n"
            f"{WRAPPER_MARK}{target}\n"
            f'GLIBC_TUNABLES="${{GLIBC_TUNABLES:+$GLIBC_TUNABLES:}}{TUNABLE}"\n'
            "export GLIBC_TUNABLES\n"
            f'exec {target} "$@"\n')


def wrapper_target(path: str) -> Optional[str]:
    """The squashfuse_ll a ClusterKit wrapper at ``path`` runs, or None when ``path`` is not ours."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    for line in head.splitlines():
        if line.startswith(WRAPPER_MARK):
            target = line[len(WRAPPER_MARK):]
            return target if SAFE_PATH.fullmatch(target) else None
    return None


def set_reader(env: Dict[str, str], ch: Changes) -> Optional[Reader]:
    """Make ``READER_LINK`` a wrapper running the node's multi-threaded squashfuse_ll when it has one; remove a wrapper
    of ours that no longer serves; leave a file someone else put there alone. Returns what enroot will run, judged."""
    wrapper = host_path(env, READER_LINK)
    candidate = low_level_candidate(env)
    ours = os.path.lexists(wrapper) and wrapper_target(wrapper) is not None
    if os.path.lexists(wrapper) and not ours:
        current = serving(env)
        ch.log("INFO", f"squashfuse-reader: {READER_LINK} is not ClusterKit's (a custom AMI's?): left alone; "
                       f"enroot runs {current.describe() if current else 'nothing runnable'}")
        return current
    if candidate is not None and candidate.serves_in_place:
        target = candidate.path
        if env.get("CK_ROOT") and target.startswith(env["CK_ROOT"]):
            target = target[len(env["CK_ROOT"]):]
        os.makedirs(os.path.dirname(wrapper), exist_ok=True)
        changed = write_file(ch, READER_LINK, "0755", wrapper_text(target).encode())
        ch.log("INFO", f"squashfuse-reader: {READER_LINK} runs {target}{'' if changed else ' already'}: enroot's "
                       f"in-place starts read with {candidate.describe()}, {TUNABLE}")
        return serving(env)
    if ours:
        remove_file(ch, READER_LINK)
        ch.log("WARN", f"squashfuse-reader: removed ClusterKit's {READER_LINK}: its squashfuse_ll no longer serves "
                       f"({why_not(candidate) if candidate else 'gone'})")
    if candidate is not None:
        ch.log("INFO", f"squashfuse-reader: not using {why_not(candidate)}")
    current = serving(env)
    shown = current.describe() if current else "no squashfuse (none on PATH)"
    slow = "" if current and current.serves_in_place else (
        ": no multi-threaded squashfuse_ll >= 0.3.0 here, so images are extracted unless the spec allows "
        "single-threaded in-place starts (containers.pyxis.single_threaded_in_place)")
    ch.log("INFO", f"squashfuse-reader: enroot runs {shown}{slow}")
    return current


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    sub.add_parser("squashfuse-reader", help="make this node's multi-threaded squashfuse_ll the squashfuse enroot "
                                             f"runs (a wrapper at {READER_LINK}) when it has one; say which serves")


def cmd_squashfuse_reader(_args: "argparse.Namespace") -> int:
    def step(ch: Changes) -> None:
        try:
            set_reader(dict(os.environ), ch)
        except OSError as exc:
            raise NodeProblem(f"squashfuse-reader: cannot write {READER_LINK}: {exc.strerror or exc}") from exc
    return report(step)
