"""ClusterKit's pyxis importer: a registry name a user knows starts the locked image from the store.

pyxis >= 0.24 runs the program named by ``importer=`` in plugstack instead of ``enroot import`` (pyxis
0.24.0 importers/README.md, pyxis_slurmstepd.c enroot_container_create) for every ``--container-image``
that is not a file path:

  importer get URI   stdout: one absolute path to a squashfs file; diagnostics on stderr, which pyxis
                     prints only when the exit code is not 0. With ``use_squashfuse=1`` and a temporary
                     container pyxis starts that file in place (squashfuse), else ``enroot create``s it.
  importer release   clean up; pyxis may call it twice per step (after ``enroot create`` and at task
                     cleanup), so it is idempotent and never fails for something already gone.

pyxis runs it as the job's user with the job's environment (PATH removed, SLURM_JOB_UID/GID set, plus
PYXIS_RUNTIME_PATH), hence the zipapp's ``#!/usr/bin/python3 -I`` (no PYTHON* variables or user site from
the job; pyxis runs ``clusterkit_node.pyz get URI``, and its ``__main__`` hands ``get`` and ``release``
here) and a fixed PATH for enroot. Resolution: the URI is parsed as enroot 4.x parses it
(enroot_uri.parse_request); the image lock next to the zipapp names the image when registry, repository
and the locked tag or digest match; the answer is the digest-named store file ``<store>/<name>/<hex>.sqsh``
(immutable, unlike the stable ``<name>.sqsh`` link a sync may re-point mid-job), so a node never contacts a
registry for a locked image and always runs the locked digest. Only a file the head node's sync recorded as
published (published.py: its private record in the staging directory, root-owned) whose ``lstat`` still
matches the record (inode, size, mtime, ctime; a real image directory) is answered: a file changed behind the
sync's back is refused with one line, at the cost of a few syscalls and a small JSON read, never a hash.
Anything else follows CK_UNLOCKED_IMAGES from the node's settings: ``refuse`` (default, reproducible: one
line naming `make lock`) or ``import`` (``enroot import`` of that URI, or of the locked digest while the store
cannot serve it, into a per-step file under PYXIS_RUNTIME_PATH, as pyxis' own import does; ``release``
removes it).

Leases: a store file answered to a job may be removed by ``gc`` on the head node only once no job uses it, and the
head node cannot see other nodes' processes. So ``get`` leaves a lease ``<staging>/inuse/<host>.<job>.<step>.<uid>
.json`` (naming the file; the directory is 1777 like /tmp, each user's leases their own) and ``release`` removes
it; gc keeps a leased file until the lease is released or older than its ``--lease-days`` (a node that died
mid-job never releases). A lease that cannot be written is a warning on stderr, never a failed step.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, Dict, List, Optional

from clusterkit_node.contract.console import UsageError, os_error_line
from clusterkit_node.contract.layout import STORE_PATTERN, inuse_dir, record_path

# pyxis runs `get` and `release` for every container step, so each imports only what it uses: `release` what is
# above, `get` also the image lock, enroot's URI grammar and the sync's record (inside the functions below, marked
# "get only"), and `enroot` only when it imports. tests/node_package/test_per_job_imports.py holds them to that.
if TYPE_CHECKING:
    from clusterkit_node.contract.lock import LockedImage

PROG = "clusterkit importer"
CK_ROOT = os.environ.get("CK_ROOT", "")  # a throwaway root in tests; the job user gains nothing by it
NODE_ENV = "/etc/clusterkit/node.env"
POLICIES = ("refuse", "import")
ENROOT_PATH = "/usr/local/bin:/usr/bin:/bin"  # what pyxis' own enroot calls get
_ID_RE = re.compile(r"[0-9]{1,10}")
_STEP_RE = re.compile(r"[0-9]{1,10}|batch|extern|interactive")
_PATH_RE = re.compile(STORE_PATTERN)  # an absolute path with no '.'-leading part (no '..'): CK_STORE's pattern


class Refused(Exception):
    """The image cannot be given to this job; the message is the one line pyxis shows the user."""


def node_settings(path: str = NODE_ENV) -> Dict[str, str]:
    """KEY=VALUE pairs of the node's settings file (written by enroot.sh ck_write_node_env, shell-quoted)."""
    settings: Dict[str, str] = {}
    with open(CK_ROOT + path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and not line.lstrip().startswith("#"):
                for word in shlex.split(line):
                    key, sep, value = word.partition("=")
                    if sep:
                        settings[key] = value
    store, policy = settings.get("CK_STORE", ""), settings.get("CK_UNLOCKED_IMAGES", "refuse")
    if not _PATH_RE.fullmatch(store):  # what the settings table's check of CK_STORE accepts (contract/settings.py)
        raise Refused(f"{path}: CK_STORE={store!r} is not an absolute store path (re-run the node's bootstrap)")
    if policy not in POLICIES:
        raise Refused(f"{path}: CK_UNLOCKED_IMAGES={policy!r} is not one of {', '.join(POLICIES)}")
    return settings


def step_file() -> str:
    """This step's private import target (PYXIS_RUNTIME_PATH/<uid>/clusterkit.<job>.<step>.sqsh), the
    same for `get` and both `release` calls since it depends only on what pyxis sets."""
    runtime = os.environ.get("PYXIS_RUNTIME_PATH", "")
    uid, job = os.environ.get("SLURM_JOB_UID", ""), os.environ.get("SLURM_JOB_ID", "")
    step = os.environ.get("SLURM_STEP_ID") or "batch"
    if not (_PATH_RE.fullmatch(runtime) and _ID_RE.fullmatch(uid)
            and _ID_RE.fullmatch(job) and _STEP_RE.fullmatch(step)):
        raise Refused("not run by pyxis (PYXIS_RUNTIME_PATH, SLURM_JOB_UID, SLURM_JOB_ID or SLURM_STEP_ID "
                      "missing or malformed)")
    return os.path.join(runtime, uid, f"clusterkit.{job}.{step}.sqsh")


def store_file(store: str, img: LockedImage) -> Optional[str]:
    """The store's file for img when it is there and this user can read it."""
    path = os.path.join(store, img.rel_file)
    return path if os.path.isfile(CK_ROOT + path) and os.access(CK_ROOT + path, os.R_OK) else None


def serve_check(store: str, img: LockedImage) -> Optional[str]:
    """Why the store's file for img must not be served (see the module docstring), or None."""
    from clusterkit_node.store.published import RecordError, read_record, serve_problem  # get only
    try:
        files = read_record(CK_ROOT + record_path(store))
    except RecordError as exc:
        return str(exc)
    return serve_problem(CK_ROOT + store, img.rel_file, img.digest, files)


def enroot_env() -> Dict[str, str]:
    return dict(os.environ, PATH=ENROOT_PATH)


def enroot_import(uri: str) -> str:
    """`enroot import` URI into this step's file (enroot's progress goes to stderr); returns the file."""
    import subprocess  # only an import runs a program
    target = step_file()
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    if os.path.lexists(target):
        os.unlink(target)  # a retried step: enroot import -o refuses an existing file
    cmd = ["enroot", "import", "--output", target, uri]
    if subprocess.run(cmd, stdout=sys.stderr, env=enroot_env(), check=False).returncode != 0:
        raise Refused(f"enroot import {uri} failed (its output is above)")
    return target


def locked_label(img: LockedImage) -> str:
    registry, repository = img.location
    return (f"{img.name}={registry}/{repository}:{img.tag}" if img.tag
            else f"{img.name}={registry}/{repository}@{img.digest}")


def resolve(uri: str, settings: Dict[str, str], images: List[LockedImage]) -> str:
    """The squashfs path for URI (see the module docstring); Refused says why there is none."""
    from clusterkit_node.contract.bundle_files import ZIPAPP_NAME  # get only
    from clusterkit_node.contract.enroot_uri import import_uri, parse_request
    from clusterkit_node.contract.lock import find_locked
    store, policy = settings["CK_STORE"], settings.get("CK_UNLOCKED_IMAGES", "refuse")
    cluster = settings.get("CK_CLUSTER", "?")
    request = parse_request(uri)
    img = find_locked(images, request) if request else None
    if img is not None:
        found = store_file(store, img)
        problem = serve_check(store, img) if found else None
        if found and not problem:
            take_lease(store, img)
            return found
        if not found and os.path.isfile(CK_ROOT + os.path.join(store, img.rel_file)):
            raise Refused(f"{store}/{img.rel_file} (locked {img.name}) is not readable by uid {os.getuid()}: store "
                          f"files must be mode 0644, as image_sync publishes them (check who changed it: ls -l)")
        if policy == "import":
            import subprocess
            version = subprocess.run(["enroot", "version"], capture_output=True, text=True, env=enroot_env(),
                                     check=False).stdout
            return enroot_import(import_uri(img.enroot_uri, version))
        if problem:
            raise Refused(f"refusing {store}/{img.rel_file} (locked {img.name}): {problem}; the head node's image "
                          f"sync re-checks it on its next run and re-imports it if its content changed "
                          f"(`systemctl start clusterkit-image-sync` on the head node)")
        raise Refused(f"{uri} is locked as {img.name} ({img.digest[:19]}...) but {store}/{img.rel_file} is not "
                      f"in the store yet: the head node's image sync is importing it (check with "
                      f"`python3 /opt/parallelcluster/shared/clusterkit/{ZIPAPP_NAME} status --store {store}` "
                      f"on the head node) - retry when it is there")
    if policy == "import":
        return enroot_import(uri)
    locked = ", ".join(locked_label(i) for i in images) or "none"
    what = "is not an image reference enroot understands" if request is None else \
        f"is not in the image lock of cluster {cluster}"
    raise Refused(f"{uri} {what} (locked: {locked}); add it to containers.images in the cluster spec, run "
                  f"`make lock CLUSTER={cluster}` and deploy, or start a store file: "
                  f"--container-image={store}/<name>.sqsh")


def _hostname() -> str:
    """socket.gethostname() without importing socket (glibc's gethostname is uname's nodename)."""
    return os.uname().nodename


def lease_path(store: str) -> str:
    """This step's lease (see the module docstring); Refused when not run by pyxis."""
    step_file()  # the same checks of pyxis' variables
    uid, job = os.environ["SLURM_JOB_UID"], os.environ["SLURM_JOB_ID"]
    step = os.environ.get("SLURM_STEP_ID") or "batch"
    host = _hostname().split(".")[0] or "localhost"
    return os.path.join(CK_ROOT + inuse_dir(store), f"{host}.{job}.{step}.{uid}.json")


def take_lease(store: str, img: LockedImage) -> None:
    """Write this step's lease on img's store file: a temp file created exclusively (never through a symlink
    another user put there), renamed into place. Best effort: a warning on stderr, the step goes on."""
    import json  # get only
    import time
    try:
        final = lease_path(store)
    except Refused:
        return
    if not os.path.isdir(os.path.dirname(final)):
        return  # a store synced by an older ClusterKit: no leases until its sync creates inuse/
    doc = {"lease_version": 1, "host": _hostname(), "job": os.environ["SLURM_JOB_ID"],
           "step": os.environ.get("SLURM_STEP_ID") or "batch", "uid": int(os.environ["SLURM_JOB_UID"]),
           "file": img.rel_file, "digest": img.digest, "created": int(time.time())}
    tmp = f"{final}.tmp-{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        os.replace(tmp, final)
    except OSError as exc:
        print(f"{PROG}: warning: cannot write the lease {final} ({exc.strerror}): gc on the head node cannot see "
              f"that this step uses {img.rel_file}", file=sys.stderr, flush=True)
        try:
            os.unlink(tmp)
        except OSError:
            pass


def release() -> None:
    """Remove this step's import and lease, if any; store files are never touched."""
    try:
        os.unlink(step_file())
    except FileNotFoundError:
        pass
    try:
        settings = node_settings()
        os.unlink(lease_path(settings["CK_STORE"]))
    except (OSError, ValueError, Refused):  # no settings, no lease: nothing to release
        pass


def fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return 1


def main(argv: List[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "get":
            if len(argv[1]) > 4096 or any(ord(c) < 0x20 or c == "\x7f" for c in argv[1]):
                raise Refused(f"{argv[1][:80]!r}: control characters or over 4096 characters in the image name")
            from clusterkit_node.contract.bundle_files import LOCK_NAME, bundle_dir  # get only
            from clusterkit_node.contract.lock import load_lock
            settings = node_settings()
            lock = os.path.join(bundle_dir(), LOCK_NAME)
            if not os.path.isfile(lock):
                raise Refused(f"{lock} not found: the ClusterKit bundle next to the importer is incomplete "
                              f"(the head node's bootstrap installs it; redeploy)")
            print(resolve(argv[1], settings, load_lock(lock)), flush=True)
            return 0
        if argv == ["release"]:
            release()
            return 0
        print(f"usage: {os.path.basename(sys.argv[0])} get URI | release (called by pyxis)", file=sys.stderr)
        return 2
    except Refused as exc:
        return fail(str(exc))
    except UsageError as exc:
        return fail(" | ".join(exc.lines))
    except OSError as exc:
        return fail(os_error_line(exc))
