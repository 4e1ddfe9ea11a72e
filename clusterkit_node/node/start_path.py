"""How pyxis will start containers on this node: in place with squashfuse, or by extracting the image.

Why: pyxis >= 0.24 with ``use_squashfuse=1`` starts every store file and every importer answer with
``enroot start <file>.sqsh`` (pyxis 0.24.0 ``pyxis_slurmstepd.c``, ``pyxis_can_direct_start_squashfs``), which
needs squashfuse, fuse-overlayfs unless enroot mounts kernel overlayfs itself (enroot >= 4.0,
``ENROOT_NATIVE_OVERLAYFS``, default on; ``src/runtime.sh`` ``runtime::_mount_rootfs``), and a ``/dev/fuse`` the
job's user may open. ParallelCluster's alinux2023 and RHEL AMIs ship no squashfuse (node_profiles.json): with
that option every container job would fail while the node looks healthy. Without it pyxis still asks the
importer (locked names still map to store files) and extracts the file with ``enroot create`` onto the
node-local disk. So the choice is made from facts measured on the node, never from the OS name, and the same
``choose`` is what ``clusterkit validate`` runs on a profile's facts to say which path nodes will take.

Being able to start in place is not enough: enroot reads the image through ``squashfuse``, and the high-level one is
single-threaded (parallel reads 4.5x slower than extracted, whole job 1.28x: ../shared/reference/domain.md "Reading
through squashfuse"). So in place is chosen only when the reader enroot will run is multi-threaded
(squashfuse_reader.py links the node's squashfuse_ll >= 0.3.0 there), or when the spec accepts a single-threaded
reader (``containers.pyxis.single_threaded_in_place`` with a reason: large images that jobs read little of).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

from clusterkit_node.node.facts import NODE_PATH, enroot_version, host_path, pyxis_version
from clusterkit_node.node.squashfuse_reader import THREADS_BY_DEFAULT_SINCE, serving, version_tuple

SQUASHFUSE, EXTRACT = "squashfuse", "extract"
PYXIS_SQUASHFUSE_SINCE = (0, 24, 0)  # the pyxis whose importer answers start in place (pyxis_slurmstepd.c)
ENROOT_NATIVE_OVERLAY_SINCE = (4, 0, 0)  # enroot.in: config::export ENROOT_NATIVE_OVERLAYFS true
FIX = ("use an AMI that has it: ParallelCluster's Ubuntu AMIs (os: ubuntu2204 or ubuntu2404) ship squashfuse, "
       "or build a custom AMI with `pcluster build-image` that adds it")
UNPRIVILEGED_USER = "nobody"


@dataclass(frozen=True)
class StartFacts:
    """What decides the start path; measured on a node (``measure``) or read from a profile."""

    pyxis: Optional[str]
    enroot: Optional[str]
    squashfuse: bool
    fuse_overlayfs: bool
    fuse_for_users: bool
    fuse_detail: str = ""
    multi_threaded_reader: bool = False  # the squashfuse enroot runs reads on many threads (squashfuse_reader.py)
    reader: str = ""                     # that reader, described (kind, version, threads, path)


@dataclass(frozen=True)
class StartPath:
    path: str                       # SQUASHFUSE or EXTRACT
    reasons: List[str] = field(default_factory=list)  # why EXTRACT (empty for SQUASHFUSE)
    missing: List[str] = field(default_factory=list)  # programs whose absence forced EXTRACT
    facts: Optional[StartFacts] = None
    slow_reader: bool = False  # EXTRACT only because the reader is single-threaded (the node could start in place)

    def line(self) -> str:
        if self.path == SQUASHFUSE:
            reader = f", read with {self.facts.reader}" if self.facts and self.facts.reader else ""
            return f"start path: squashfuse (store images start in place; nothing is extracted{reader})"
        return "start path: extract (" + "; ".join(self.reasons) + ")"

    def as_dict(self) -> Dict[str, object]:
        return {"path": self.path, "reasons": self.reasons, "missing": self.missing,
                "facts": asdict(self.facts) if self.facts else None, "slow_reader": self.slow_reader}


SLOW_READER = ("reads on one thread: in-place reads would be up to 4.5x slower than from an extracted image "
               "(docs/benchmarks.md); give the nodes squashfuse_ll >= 0.3.0 (os: ubuntu2404 ships it, or a custom "
               "AMI), or accept it with containers.pyxis.single_threaded_in_place and a reason")


def choose(facts: StartFacts, wanted: bool = True, single_threaded_ok: bool = False) -> StartPath:
    """squashfuse only when every piece ``enroot start <file>.sqsh`` needs is there and its reader is multi-threaded
    (or the spec accepts a single-threaded one), else extract, saying why."""
    reasons: List[str] = []
    missing: List[str] = []
    if not wanted:
        reasons.append("use_squashfuse is off in the spec")
    pyxis = version_tuple(facts.pyxis)
    if pyxis is None or pyxis < PYXIS_SQUASHFUSE_SINCE:
        reasons.append(f"pyxis {facts.pyxis or 'of unknown version'} extracts every image (squashfuse starts need "
                       "pyxis >= 0.24.0)")
    if not facts.squashfuse:
        missing.append("squashfuse")
    enroot = version_tuple(facts.enroot)
    if not facts.fuse_overlayfs and (enroot is None or enroot < ENROOT_NATIVE_OVERLAY_SINCE):
        missing.append("fuse-overlayfs")
    if missing:
        reasons.append(f"{' and '.join(missing)} not installed (enroot start <file>.sqsh needs "
                       f"{'them' if len(missing) > 1 else 'it'}): {FIX}")
    if not facts.fuse_for_users:
        reasons.append(f"/dev/fuse is not usable by unprivileged users ({facts.fuse_detail or 'unknown'}): "
                       "squashfuse runs as the job's user")
    if not reasons and not facts.multi_threaded_reader and not single_threaded_ok:
        return StartPath(EXTRACT, [f"the squashfuse enroot runs here ({facts.reader or 'squashfuse'}) {SLOW_READER}"],
                         missing, facts, slow_reader=True)
    return StartPath(EXTRACT if reasons else SQUASHFUSE, reasons, missing, facts)


def _open_as(dev: str, ids: Optional[Tuple[int, int]]) -> int:
    """0 when ``dev`` opens read-write (as uid/gid ``ids`` in a forked child when given), else the errno."""
    if ids is None:
        try:
            os.close(os.open(dev, os.O_RDWR))
            return 0
        except OSError as exc:
            return exc.errno or 1
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, try, report through the exit status, never return
        code = 0
        try:
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])
            os.close(os.open(dev, os.O_RDWR))
        except OSError as exc:
            code = min(exc.errno or 1, 255)
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8


def fuse_for_users(env: Dict[str, str]) -> Tuple[bool, str]:
    """Can an unprivileged user open /dev/fuse read-write (what squashfuse does as the job's user)?
    Measured by opening it as ``nobody`` (when root) or as ourselves: a mode says too little (ACLs,
    a missing fuse module behind a static node, a read-only /dev)."""
    dev = host_path(env, "/dev/fuse")
    if not os.path.exists(dev):
        return False, "/dev/fuse does not exist (fuse kernel module not loaded?)"
    mode = f"{os.stat(dev).st_mode & 0o777:04o}"
    ids: Optional[Tuple[int, int]] = None
    who = "this user"
    if os.geteuid() == 0:
        try:
            import pwd  # noqa: PLC0415 (POSIX only; the node is Linux)
            entry = pwd.getpwnam(UNPRIVILEGED_USER)
        except (ImportError, KeyError):
            return False, f"mode {mode}; no '{UNPRIVILEGED_USER}' user to try it as"
        ids, who = (entry.pw_uid, entry.pw_gid), UNPRIVILEGED_USER
    err = _open_as(dev, ids)
    if err == 0:
        return True, f"mode {mode}, opened read-write as {who}"
    return False, f"mode {mode}, {who} cannot open it: {os.strerror(err)}"


def measure(env: Dict[str, str]) -> StartFacts:
    path = NODE_PATH if not env.get("CK_ROOT") else env.get("PATH", NODE_PATH)
    ok, detail = fuse_for_users(env)
    version = pyxis_version(env)
    reader = serving(env)
    return StartFacts(pyxis=None if version == "present" else version, enroot=enroot_version(env),
                      squashfuse=shutil.which("squashfuse", path=path) is not None,
                      fuse_overlayfs=shutil.which("fuse-overlayfs", path=path) is not None,
                      fuse_for_users=ok, fuse_detail=detail,
                      multi_threaded_reader=bool(reader and reader.serves_in_place),
                      reader=reader.describe() if reader else "")


def profile_differences(facts: StartFacts, os_name: str) -> List[str]:
    """Where this node differs from ParallelCluster's AMI of ``os_name`` (a custom AMI, a changed AMI)."""
    from clusterkit_node.contract import profiles  # noqa: PLC0415 (only the CLI command needs the data file)
    profile = profiles.load().get(os_name)
    if profile is None:
        return [f"no node profile for os {os_name}"]
    out = []
    for program, have in (("squashfuse", facts.squashfuse), ("fuse-overlayfs", facts.fuse_overlayfs)):
        if have != profile.has(program):
            out.append(f"{'has' if have else 'lacks'} {program}, which ParallelCluster's {os_name} AMI "
                       f"{'lacks' if have else 'has'} ({profile.programs[program].source})")
    expected = version_tuple(profile.squashfuse_ll.value)
    profile_mt = expected is not None and expected >= THREADS_BY_DEFAULT_SINCE
    if facts.multi_threaded_reader != profile_mt:
        out.append(f"enroot reads in-place images with {facts.reader or 'no squashfuse'}; the {os_name} AMI's "
                   f"squashfuse_ll is {profile.squashfuse_ll.value or 'absent'} ({profile.squashfuse_ll.source})")
    if facts.fuse_for_users != profile.fuse_for_users:
        out.append(f"/dev/fuse {'is' if facts.fuse_for_users else 'is not'} usable by users ({facts.fuse_detail}); "
                   f"the {os_name} profile says mode {profile.dev_fuse_mode.value}")
    return out


def report(want_squashfuse: bool, os_name: Optional[str], single_threaded_ok: bool = False) -> List[str]:
    """The text lines: ``path=squashfuse|extract`` first (the node scripts and pyxis_conf.py read that line),
    then the facts, each ``why extract:`` reason (``slow reader:`` when the node could start in place but its
    reader is single-threaded) and each difference from the OS's profile."""
    facts = measure(dict(os.environ))
    decided = choose(facts, wanted=want_squashfuse, single_threaded_ok=single_threaded_ok)
    lines = [f"path={decided.path}",
             f"facts: pyxis {facts.pyxis or 'unknown'}, enroot {facts.enroot or 'unknown'}, squashfuse "
             f"{'yes' if facts.squashfuse else 'no'}, fuse-overlayfs {'yes' if facts.fuse_overlayfs else 'no'}, "
             f"/dev/fuse for users: {'yes' if facts.fuse_for_users else 'no'} ({facts.fuse_detail}), reader: "
             f"{facts.reader or 'none'}"]
    lines += [f"{'slow reader' if decided.slow_reader else 'why extract'}: {reason}" for reason in decided.reasons]
    if os_name:
        lines += [f"differs from the {os_name} profile: {line}" for line in profile_differences(facts, os_name)]
    return lines


def cmd_start_path(args: "argparse.Namespace") -> int:
    """Print ``path=squashfuse|extract`` first (the node scripts read that line), then why."""
    if args.format == "json":
        env = dict(os.environ)
        facts = measure(env)
        doc = choose(facts, wanted=args.want_squashfuse == "1",
                     single_threaded_ok=args.single_threaded_in_place == "1").as_dict()
        doc["differs_from_profile"] = profile_differences(facts, args.os) if args.os else []
        print(json.dumps(doc, sort_keys=True))
        return 0
    for line in report(args.want_squashfuse == "1", args.os, args.single_threaded_in_place == "1"):
        print(line)
    return 0


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("start-path", help="how pyxis will start containers on this node (squashfuse in place, or "
                                          "extract) and why, from facts measured here")
    p.add_argument("--want-squashfuse", choices=("0", "1"), default="1",
                   help="the spec's pyxis.use_squashfuse (PYXIS_USE_SQUASHFUSE)")
    p.add_argument("--single-threaded-in-place", choices=("0", "1"), default="0",
                   help="start in place even with a single-threaded squashfuse (PYXIS_SINGLE_THREADED_IN_PLACE)")
    p.add_argument("--os", help="compare this node with ParallelCluster's AMI profile of this OS (CK_OS)")
    p.add_argument("--format", choices=("text", "json"), default="text")
