"""``user-dirs``: each user's enroot directories, made by root before the user's job can touch them.

Why: enroot keeps a user's containers, layer cache and runtime state in ``<parent>/user-<uid>`` (enroot.conf,
enroot_conf.py) and makes that directory itself, with ``mkdir -p`` and no ownership check. With world-writable
parents (mode 1777, as /tmp) user A could make B's directory first and then swap B's named containers, plant
``pyxis_<next job>_<name>`` for B's next job, or put a layer under its digest in B's cache: B then runs A's files
as B (measured on the real enroot 4.1.2 + pyxis 0.24.0). So the parents are root's and mode 0755 (enroot.sh), and
root makes ``user-<uid>`` for the job's user, mode 0700, before any step of the job runs: from a Slurm prolog
(ParallelCluster's slurm.conf runs ``/opt/slurm/etc/scripts/prolog.d/*`` as root on every node of a job, cookbook
``slurm.conf.erb``), and from the boot self-test for the user it starts a container as. pyxis does the same for
its own runtime dir (pyxis_slurmstepd.c: ``<runtime_path>/<uid>`` made by root, 0700, chowned).

A directory already there is used only when it is a real directory of that uid that nobody else can write. Any
other (another user's, a symlink, a file, group- or world-writable: what an older node with 1777 parents may
hold) is moved aside into ``<parent>/.clusterkit-quarantine/`` (root's, 0700; kept for inspection, never used)
and a fresh one made, with a WARN line in the log and syslog. The prolog never fails: a prolog that exits
non-zero drains the node (slurm.conf(5) Prolog), and nothing a user does may take a node out of service. So
every problem is a line in ``/var/log/clusterkit/user-dirs.log`` (and syslog, which ParallelCluster's CloudWatch
agent ships), and the job goes on; its container step then fails on its own with enroot's message.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import stat
import sys
from typing import TYPE_CHECKING, List, Optional, Tuple

from clusterkit_node.contract.console import now_utc
from clusterkit_node.contract.enroot_conf_syntax import parse_enroot_conf

if TYPE_CHECKING:  # the prolog runs without argparse (prolog(), called by the zipapp's __main__)
    import argparse

ENROOT_CONF = "/etc/enroot/enroot.conf"
LOG_FILE = "/var/log/clusterkit/user-dirs.log"
QUARANTINE = ".clusterkit-quarantine"
# The enroot.conf keys whose value is a per-user directory under a parent root keeps (enroot_conf.render writes
# them as "<parent>/user-$(id -u)"); ENROOT_TEMP_PATH is shared (1777, mktemp names) and not listed.
PER_USER_KEYS = ("ENROOT_RUNTIME_PATH", "ENROOT_DATA_PATH", "ENROOT_CACHE_PATH")
PER_USER_SUFFIX = "/user-$(id -u)"
_ID_RE = re.compile(r"[0-9]{1,10}")
_PARENT_RE = re.compile(r"/[A-Za-z0-9._/-]+")  # an absolute path with nothing the shell would expand
CK_ROOT = os.environ.get("CK_ROOT", "")  # the node scripts' test-root convention


class Log:
    """Lines for the log file, stdout and (WARN and ERROR) syslog; never raises."""

    def __init__(self, path: Optional[str], echo: bool = True) -> None:
        self.path = path
        self.echo = echo
        self.lines: List[str] = []

    def say(self, level: str, message: str) -> None:
        line = f"{now_utc()} user-dirs {level} {message}"
        self.lines.append(line)
        if self.echo:
            print(line, flush=True)
        if self.path:
            try:
                os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError:
                pass
        if level in ("WARN", "ERROR"):
            try:
                import syslog  # noqa: PLC0415 (POSIX only)
                syslog.openlog("clusterkit-user-dirs", 0, syslog.LOG_AUTH)
                syslog.syslog(syslog.LOG_WARNING if level == "WARN" else syslog.LOG_ERR, message)
            except (ImportError, OSError):
                pass


def parents(conf_text: str) -> List[str]:
    """The parents of the per-user dirs enroot.conf names (in PER_USER_KEYS order, once each)."""
    values = parse_enroot_conf(conf_text)
    found: List[str] = []
    for key in PER_USER_KEYS:
        value = values.get(key, "")
        parent = value[: -len(PER_USER_SUFFIX)] if value.endswith(PER_USER_SUFFIX) else ""
        if _PARENT_RE.fullmatch(parent) and ".." not in parent.split("/") and parent not in found:
            found.append(parent)
    return found


def _problem(st: os.stat_result, uid: int) -> Optional[str]:
    """Why an existing user-<uid> entry must not be used (None: it is the user's own, private enough)."""
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _parent_problem(st: os.stat_result) -> Optional[str]:
    if st.st_uid != 0:
        return f"owned by uid {st.st_uid}, not root"
    if st.st_mode & 0o022:
        return f"mode {stat.S_IMODE(st.st_mode):04o} lets users make other users' directories in it"
    return None


def ensure(parent: str, uid: int, gid: int, tag: str, log: Log) -> bool:
    """``parent/user-<uid>`` as a 0700 directory of uid:gid; True when it is ready. Works through a descriptor
    of the parent (opened without following a symlink), so nothing is resolved twice."""
    try:
        pfd = os.open(CK_ROOT + parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        log.say("INFO", f"{parent}: not there yet (enroot makes it on first use by root); nothing to do")
        return True
    except OSError as exc:
        log.say("ERROR", f"{parent}: cannot open ({exc.strerror}); users' enroot dirs under it were not made "
                         f"(re-run the node's bootstrap: enroot.sh makes it root's, mode 0755)")
        return False
    try:
        why = _parent_problem(os.fstat(pfd))
        if why is not None:
            log.say("ERROR", f"{parent}: {why}; not making user dirs in it (re-run the node's bootstrap: "
                             f"enroot.sh makes it root's, mode 0755)")
            return False
        name = f"user-{uid}"
        try:
            st: Optional[os.stat_result] = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            why = _problem(st, uid)
            if why is None:
                return True
            moved = _quarantine(pfd, name, tag)
            log.say("WARN", f"{parent}/{name} was {why}: moved to {parent}/{moved} (not used; inspect and "
                            f"delete it) and made anew for uid {uid}")
        os.mkdir(name, 0o700, dir_fd=pfd)
        os.chown(name, uid, gid, dir_fd=pfd, follow_symlinks=False)
        os.chmod(name, 0o700, dir_fd=pfd)  # mkdir's mode went through the umask
        log.say("INFO", f"made {parent}/{name} (uid {uid}, gid {gid}, mode 0700)")
        return True
    except OSError as exc:
        log.say("ERROR", f"{parent}/user-{uid}: {exc.strerror}; uid {uid}'s container steps on this node may fail")
        return False
    finally:
        os.close(pfd)


def _quarantine(pfd: int, name: str, tag: str) -> str:
    """Move ``name`` into the parent's quarantine dir (root's, 0700); returns its new relative path."""
    try:
        os.mkdir(QUARANTINE, 0o700, dir_fd=pfd)
    except FileExistsError:
        st = os.stat(QUARANTINE, dir_fd=pfd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:  # only root writes the parent: cannot happen
            raise OSError(17, f"{QUARANTINE} is not root's directory") from None
    os.chmod(QUARANTINE, 0o700, dir_fd=pfd)
    target = f"{QUARANTINE}/{name}.{tag}"
    n = 0
    while True:
        try:
            os.stat(target, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            break
        n += 1
        target = f"{QUARANTINE}/{name}.{tag}.{n}"
    os.rename(name, target, src_dir_fd=pfd, dst_dir_fd=pfd)
    return target


def make_all(uid: int, gid: int, tag: str, log: Log, conf: str = ENROOT_CONF) -> bool:
    """Every per-user dir enroot.conf names, for uid:gid; True when all are ready."""
    try:
        with open(CK_ROOT + conf, encoding="utf-8") as fh:
            found = parents(fh.read())
    except OSError as exc:
        log.say("ERROR", f"{conf}: {exc.strerror}; no enroot dirs made for uid {uid} (re-run the node's bootstrap)")
        return False
    if not found:
        log.say("INFO", f"{conf} names no per-user enroot dirs ({PER_USER_SUFFIX}); nothing to do")
        return True
    return all([ensure(parent, uid, gid, tag, log) for parent in found])


def _prolog_ids() -> Optional[Tuple[int, int, str]]:
    """uid, gid and job id from the environment Slurm gives a prolog (slurm.conf(5) "Prolog and Epilog")."""
    uid, gid, job = (os.environ.get(k, "") for k in ("SLURM_JOB_UID", "SLURM_JOB_GID", "SLURM_JOB_ID"))
    if not (_ID_RE.fullmatch(uid) and _ID_RE.fullmatch(gid) and _ID_RE.fullmatch(job)):
        return None
    return int(uid), int(gid), f"job{job}"


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("user-dirs", help="make a user's enroot dirs as root (Slurm prolog, self-test): 0700, "
                                         "theirs, anything else in the way quarantined")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--prolog", action="store_true",
                     help="the job's user from Slurm's prolog environment; always exits 0 (a failing prolog "
                          "drains the node)")
    who.add_argument("--uid", type=int, help="this uid (with --gid)")
    p.add_argument("--gid", type=int)
    p.add_argument("--conf", default=ENROOT_CONF, help=f"enroot.conf to read the dirs from (default {ENROOT_CONF})")
    p.add_argument("--log-file", default=LOG_FILE, help=f"append lines here too (default {LOG_FILE}; '' for none)")


def prolog(conf: str = ENROOT_CONF, log_file: str = LOG_FILE) -> int:
    """``user-dirs --prolog``: the job user's dirs, from Slurm's prolog environment; always 0. The zipapp's
    ``__main__`` calls this directly for the prolog's exact words (no argparse: it runs for every job)."""
    log = Log(CK_ROOT + log_file if log_file else None)
    ids = _prolog_ids()
    if ids is None:
        log.say("ERROR", "prolog run without SLURM_JOB_UID, SLURM_JOB_GID and SLURM_JOB_ID: nothing made")
        return 0
    try:
        make_all(*ids, log, conf)
    except Exception as exc:  # noqa: BLE001 (the prolog must not fail: say it and let the job run)
        log.say("ERROR", f"unexpected {type(exc).__name__}: {exc}")
    return 0


def cmd_user_dirs(a: argparse.Namespace) -> int:
    if a.prolog:
        return prolog(a.conf, a.log_file)
    log = Log(CK_ROOT + a.log_file if a.log_file else None)
    if a.gid is None or a.uid < 0 or a.gid < 0:
        print("user-dirs: error: --uid needs --gid (both >= 0)", file=sys.stderr)
        return 2
    return 0 if make_all(a.uid, a.gid, f"uid{a.uid}-{int(_dt.datetime.now().timestamp())}", log, a.conf) else 1
