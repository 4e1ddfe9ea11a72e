"""``selftest``: start a real container on this node, the way users' jobs will, before it takes jobs.

Why: a node whose enroot.conf, hooks, user namespaces, squashfuse or /dev/fuse cannot start containers
used to boot "ready" (the old check only asked ``srun --help`` whether ``--container-image`` existed) and
then failed every container job. Here the node builds a tiny image (selftest_image.py) with its own
mksquashfs and starts it as an unprivileged user with the node's own enroot.conf, by the path pyxis will
take (start_path.py): ``enroot start <file>.sqsh`` for squashfuse starts, ``enroot create`` + ``start`` +
``remove`` for extraction. slurmd is not running yet at OnNodeConfigured, so enroot is called directly;
it is what pyxis calls. Exit 1 with one line on failure: compute_node_configured.sh then fails the boot and
ParallelCluster replaces the node (docs/troubleshooting.md says why failing beats draining here).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from typing import Dict, List, Optional, Tuple

from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error, log
from clusterkit_node.contract.settings import DEFAULT_SQUASH_OPTIONS
from clusterkit_node.node.facts import NODE_PATH, find_tool, host_path
from clusterkit_node.node.selftest_image import GPU_PATHS, MESSAGE, write_rootfs
from clusterkit_node.node.start_path import EXTRACT, SQUASHFUSE, UNPRIVILEGED_USER, choose, measure
from clusterkit_node.node.user_dirs import Log, make_all

WORK_DIR = "/var/lib/clusterkit/selftest"
TIMEOUT = 120.0


def _run(cmd: List[str], env: Dict[str, str], ids: Optional[Tuple[int, int]], timeout: float = TIMEOUT,
         cwd: Optional[str] = None) -> Tuple[int, str]:
    kwargs: Dict[str, object] = {}
    if ids is not None:
        kwargs = {"user": ids[0], "group": ids[1], "extra_groups": []}
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                              cwd=cwd, **kwargs)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return 127, str(exc)
    out: str = proc.stdout.decode("utf-8", "replace")
    return int(proc.returncode), out


def _last(out: str) -> str:
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-3:]) if lines else "no output"


def build_image(work: str, squash_options: str, env: Dict[str, str], gpu: bool = False) -> str:
    """The self-test .sqsh in ``work``, made by the node's own mksquashfs with the store's options."""
    tree = tempfile.mkdtemp(prefix="rootfs.", dir=work)
    try:
        write_rootfs(tree, os.uname().machine, gpu)
        image = os.path.join(work, "selftest-gpu.sqsh" if gpu else "selftest.sqsh")
        partial = image + ".partial"
        if os.path.exists(partial):
            os.unlink(partial)
        rc, out = _run(["mksquashfs", tree, partial, "-noappend", "-all-root", "-quiet",
                        *shlex.split(squash_options)], env, None)
        if rc != 0:
            raise RuntimeError(f"mksquashfs could not build the self-test image: {_last(out)}")
        os.chmod(partial, 0o644)
        os.replace(partial, image)
        return image
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _user_ids(env: Dict[str, str]) -> Optional[Tuple[int, int]]:
    """nobody's uid/gid when root on a node; None (run as ourselves) when not root or under CK_ROOT, the node
    scripts' test-root convention, where enroot is a stand-in in a directory only root may enter."""
    if os.geteuid() != 0 or env.get("CK_ROOT"):
        return None
    import pwd  # noqa: PLC0415 (POSIX only)
    entry = pwd.getpwnam(UNPRIVILEGED_USER)
    return entry.pw_uid, entry.pw_gid


# What the GPU start's output means, first match wins: (text in enroot's output, the cause and the fix). The texts
# are enroot's 98-nvidia.sh (common::checkcmd's "Command not found") and nvidia-container-cli's own errors
# (libnvidia-container src/cli: "initialization error", "driver error", "unsatisfied condition").
GPU_CAUSES = (
    ("Command not found: nvidia-container-cli",
     "nvidia-container-cli is not installed, and enroot's 98-nvidia.sh hook runs it for every image that sets "
     "NVIDIA_VISIBLE_DEVICES (every CUDA image): the gpu-runtime line above says why it was not installed "
     "(containers.nvidia_container_cli, docs/gpu.md)"),
    ("initialization error",
     "nvidia-container-cli is installed but the NVIDIA driver does not answer it (driver not loaded, or no GPU on "
     "this instance: check `nvidia-smi`)"),
    ("driver error", "the NVIDIA driver refused nvidia-container-cli (check `nvidia-smi` and the kernel log)"),
    ("unsatisfied condition", "the driver fails a requirement of the image (NVIDIA_REQUIRE_*)"),
    ("missing: ", "the GPU container started but lacks what nvidia-container-cli should have put there"),
)


def gpu_cause(out: str) -> Optional[str]:
    """The cause and fix of a failed GPU start, from what enroot and nvidia-container-cli printed, or None."""
    for text, cause in GPU_CAUSES:
        if text in out:
            return cause
    return None


def start_container(enroot: str, image: str, path: str, work: str,
                    ids: Optional[Tuple[int, int]], check_paths: Tuple[str, ...] = ()) -> Tuple[bool, str]:
    """Start ``image`` as the unprivileged user by ``path``, its program checking ``check_paths`` inside; (ok, what
    happened)."""
    home = tempfile.mkdtemp(prefix="home.", dir=work)
    try:
        if ids is not None:
            os.chown(home, *ids)
        # a login-like environment, as a job user's; CK_* pass through (the node scripts' test-root convention)
        env = {"PATH": NODE_PATH, "HOME": home, "USER": UNPRIVILEGED_USER, "LANG": "C.UTF-8",
               **{k: v for k, v in os.environ.items() if k.startswith("CK_")}}
        if path == SQUASHFUSE:
            steps = [[enroot, "start", image, "/bin/sh", *check_paths]]
        else:
            name = f"clusterkit-selftest-{os.getpid()}"
            steps = [[enroot, "create", "--force", "--name", name, image],
                     [enroot, "start", name, "/bin/sh", *check_paths], [enroot, "remove", "--force", name]]
        said = ""
        for cmd in steps:
            rc, out = _run(cmd, env, ids, cwd=home)
            if rc != 0:
                if path != SQUASHFUSE and cmd[1] == "start":
                    _run(steps[-1], env, ids, cwd=home)  # the extracted container goes either way
                shown = shlex.join(["enroot", *cmd[1:len(cmd) - (len(check_paths) if cmd[1] == "start" else 0)]])
                cause = gpu_cause(out) if check_paths else None
                said_last = _missing(out) if cause and "missing: " in out else _last(out)
                return False, (f"{cause + ': ' if cause else ''}`{shown}` as "
                               f"{UNPRIVILEGED_USER if ids else 'this user'} exited {rc}: {said_last}")
            said += out
        if MESSAGE.decode().strip() not in said:
            return False, f"the container started but its program did not run (output: {_last(said)})"
        return True, f"{'enroot start <file>.sqsh' if path == SQUASHFUSE else 'enroot create + start'} as " \
                     f"{UNPRIVILEGED_USER if ids else 'this user'}: container ran"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _missing(out: str) -> str:
    return ", ".join(ln.strip()[len("missing: "):] for ln in out.splitlines() if ln.strip().startswith("missing: "))


def cmd_selftest(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    env["PATH"] = NODE_PATH if not env.get("CK_ROOT") else env.get("PATH", NODE_PATH)
    facts = measure(env)
    decided = choose(facts, wanted=args.want_squashfuse == "1",
                     single_threaded_ok=args.single_threaded_in_place == "1")
    path = args.path or decided.path
    if args.format == "text":
        log(decided.line())
    try:
        ids = _user_ids(env)
    except KeyError:
        error(f"selftest: no '{UNPRIVILEGED_USER}' user on this node to start a container as")
        return EXIT_USAGE
    enroot = find_tool("enroot", env, "/usr/bin/enroot")
    if enroot is None:
        error("selftest: enroot not found (ParallelCluster AMIs >= 3.11.1 ship it in /usr/bin)")
        return EXIT_FAILED
    work = host_path(env, args.work_dir)
    try:
        os.makedirs(work, mode=0o755, exist_ok=True)
        os.chmod(work, 0o755)
        image = build_image(work, args.squash_options, env, gpu=args.gpu)
        # the user's enroot dirs, as the Slurm prolog makes them for a job's user (user_dirs.py)
        if ids is not None and not make_all(ids[0], ids[1], "selftest", Log(None, echo=args.format == "text")):
            raise RuntimeError(f"could not make {UNPRIVILEGED_USER}'s enroot dirs (user-dirs lines above)")
        ok, detail = start_container(enroot, image, path, work, ids, GPU_PATHS if args.gpu else ())
        if ok and path == SQUASHFUSE:
            detail += f"; read with {facts.reader or 'squashfuse'}"
    except (RuntimeError, OSError) as exc:
        ok, detail = False, str(exc)
    if args.format == "json":
        print(json.dumps({"ok": ok, "path": path, "gpu": args.gpu, "detail": detail,
                          "start_path": decided.as_dict()}, sort_keys=True))
    elif ok:
        log(f"selftest: {path} start{' of a CUDA-style image (GPUs, libcuda, driver)' if args.gpu else ''} works: "
            f"{detail}")
    else:
        error(f"selftest: this node cannot start {'GPU ' if args.gpu else ''}containers by the {path} path: {detail}")
    return EXIT_OK if ok else EXIT_FAILED


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("selftest", help="start a tiny container as an unprivileged user, by the path pyxis "
                                        "will take (exit 1 if it cannot)")
    p.add_argument("--want-squashfuse", choices=("0", "1"), default="1",
                   help="the spec's pyxis.use_squashfuse (PYXIS_USE_SQUASHFUSE)")
    p.add_argument("--single-threaded-in-place", choices=("0", "1"), default="0",
                   help="the spec's pyxis.single_threaded_in_place (PYXIS_SINGLE_THREADED_IN_PLACE)")
    p.add_argument("--path", choices=(SQUASHFUSE, EXTRACT),
                   help="test this start path instead of the one this node's facts choose")
    p.add_argument("--squash-options", default=DEFAULT_SQUASH_OPTIONS, help="mksquashfs options of the store")
    p.add_argument("--gpu", action="store_true",
                   help="GPU nodes (CK_GPU=1): the image asks for GPUs as CUDA images do; check them inside")
    p.add_argument("--work-dir", default=WORK_DIR)
    p.add_argument("--format", choices=("text", "json"), default="text")
