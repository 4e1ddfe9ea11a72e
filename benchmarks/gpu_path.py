#!/usr/bin/env python3
"""The GPU path, checked on a machine with one NVIDIA GPU: prepared here, run there (CI never needs a GPU).

``--prepare DIR`` (as root on the development machine, Debian 12, no GPU needed; needs the real-runtime tier's
Debian packages and `make test-artifacts`' wheels) builds into DIR everything the GPU machine needs, which has no
internet and no Debian packages of ours:
  * enroot 4.1.2 + pyxis 0.24.0 (tests/real_runtime/runtime_build.py, gen4) as a root tree, ``enroot/``;
  * the REAL nvidia-container-cli 1.17.0 and its deb/rpm stand-ins of NVIDIA's packages in a repository laid out
    like NVIDIA's (tests/real_runtime/nvidia_build.py, nvidia_packages.py), ``nvidia-stage/``, ``nvidia-repo/``;
  * the image ``store/gpu-check.sqsh``, squashed with the store's options: NVIDIA's CUDA base layout
    (tests/image_versions/layouts.py ngc_cuda_base: the REAL CUDA runtime 12.9.79 and NCCL 2.21.5 from their pinned
    wheels) plus busybox as /bin/sh, Debian's glibc, ``NVIDIA_VISIBLE_DEVICES=all`` and
    ``NVIDIA_DRIVER_CAPABILITIES=compute,utility`` in its /etc/environment (what enroot's 98-nvidia.sh reads), and
    gpu_path/gpu_check.c compiled here: it dlopens the image's libcudart/libnccl and prints, as JSON, the versions
    they report at run time, the device count, a one-rank NCCL init time and an allreduce's result;
  * ``node/clusterkit_node`` (the node tools, stdlib only) and ``debs/``: Debian 12 packages of the libraries and
    tools the above need at run time (`apt-get download`), unpacked there only where the machine lacks them.
``--run DIR`` (as root on the GPU machine, within a few minutes): first ``nvidia-container-cli info`` from DIR
without installing anything; no driver or no GPU ends it there with one line (exit 2). Then it installs the CLI
from the stand-in packages (dpkg -i, else rpm -U), enroot + pyxis from the stage, configures the node with
ClusterKit's own node tools (``enroot-files`` as compute_node_configured.sh runs it, ``user-dirs`` as the Slurm
prolog does), and for root and a user (ckgpu, created if absent) runs ``enroot create`` + ``enroot start`` of the
store .sqsh with the program (no Slurm on such a machine: the srun path is the real-runtime tier's, without GPU).
It compares ``clusterkit_node inspect``'s versions of the .sqsh with what CUDA and NCCL report inside the
container and writes ``gpu_path.json`` (+ the printed table) under $OUT when set, else DIR/results.

Usage: python3 benchmarks/gpu_path.py --prepare DIR | --run DIR
Exit: 0 all passed; 1 a step failed (one line); 2 no usable NVIDIA GPU here (one line).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for sub in ("tests/real_runtime", "tests/image_versions"):
    sys.path.insert(0, str(REPO / sub))

IMAGE = "store/gpu-check.sqsh"
PROGRAM = "/usr/local/bin/gpu-check"
USER = "ckgpu"
NODE_ARGS = ["CK_CLUSTER=gpucheck", "CK_OS=ubuntu2204"]
# Debian 12 packages whose files the GPU machine may lack: the CLI's libraries (ldd of the Debian build),
# unsquashfs (enroot create), jq (enroot), busybox is in the image.
DEBS = ("libtirpc3 libtirpc-common libelf1 libseccomp2 libcap2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 "
        "libkrb5support0 libkeyutils1 libcom-err2 zlib1g squashfs-tools liblzo2-2 liblz4-1 libzstd1 liblzma5 "
        "jq libjq1 libonig5").split()


class Failed(Exception):
    """One line: what failed."""


class LibsMissing(Failed):
    """The Debian build of the CLI cannot load here: a library of it is missing (debs/ brings it)."""


def sh(cmd: list[str], *, check: bool = True, env: dict[str, str] | None = None,
       timeout: int = 300) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except FileNotFoundError:
        raise Failed(f"{cmd[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise Failed(f"{' '.join(cmd)}: no answer in {timeout} s") from None
    if check and proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        raise Failed(f"{' '.join(cmd)} exited {proc.returncode}: {tail[0]}")
    return proc


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine())
    return f"{model}, {os.cpu_count()} cores, kernel {platform.release()}"


# ------------------------------------------------------------------------------------------------ prepare

def _image(dest: Path, work: Path) -> Path:
    import layouts

    tree = layouts.Tree(work / "gpu-check-root")
    layouts.ngc_cuda_base(tree)
    program = work / "gpu-check"
    sh(["gcc", "-O2", "-Wall", "-Wextra", "-o", str(program), str(REPO / "benchmarks/gpu_path/gpu_check.c"), "-ldl"])
    tree.copy(program, PROGRAM)
    # Debian's glibc (and what the CUDA runtime and NCCL link: libdl, libpthread, librt, libm, libstdc++ ...) under
    # the names the loader asks for; ldd here resolves them as the image's loader will
    libs = {"/lib64/ld-linux-x86-64.so.2"}
    for obj in (program, tree.root / "usr/lib/x86_64-linux-gnu/libnccl.so.2",
                tree.root / "usr/local/cuda-12.9/targets/x86_64-linux/lib/libcudart.so.12"):
        libs |= set(re.findall(r"=> (/\S+)", sh(["ldd", str(obj)]).stdout))
    for lib in sorted(libs):
        if str(tree.root) not in lib:
            tree.copy(Path(lib).resolve(), f"/lib/x86_64-linux-gnu/{Path(lib).name}" if "ld-linux" not in lib else lib)
    tree.copy(Path(shutil.which("busybox") or "/bin/busybox"), "/bin/busybox")
    tree.link("/bin/sh", "busybox")
    tree.text("/etc/debian_version", Path("/etc/debian_version").read_text())
    tree.text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
    tree.text("/etc/group", "root:x:0:\n")
    env = (tree.root / "etc/environment").read_text()
    tree.text("/etc/environment", env + "NVIDIA_VISIBLE_DEVICES=all\nNVIDIA_DRIVER_CAPABILITIES=compute,utility\n")
    sh(["ldconfig", "-r", str(tree.root)])  # the image's ld.so.cache (libcudart is found through ld.so.conf.d)
    dest.parent.mkdir(parents=True, exist_ok=True)
    return tree.squash(dest)


def prepare(out: Path) -> int:
    import tempfile

    import nvidia_build
    import nvidia_packages
    import runtime_build

    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("enroot", "nvidia-stage", "nvidia-repo", "node", "debs", "store"):
        shutil.rmtree(out / name, ignore_errors=True)
    shutil.copytree(runtime_build.build("gen4"), out / "enroot", symlinks=True)
    shutil.copytree(nvidia_build.build(), out / "nvidia-stage", symlinks=True)
    shutil.copytree(nvidia_packages.build_repo(), out / "nvidia-repo", symlinks=True)
    shutil.copytree(REPO / "clusterkit_node", out / "node/clusterkit_node",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (out / "debs").mkdir()
    proc = subprocess.run(["apt-get", "download", *DEBS], cwd=out / "debs", capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(f"apt-get download: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    with tempfile.TemporaryDirectory(prefix="gpu-path-") as work:
        sqsh = _image(out / IMAGE, Path(work))
    inspected = json.loads(sh([sys.executable, "-m", "clusterkit_node", "inspect", str(sqsh), "--format", "json"],
                              check=False, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout)
    manifest = {"prepared": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
                "enroot": "4.1.2", "pyxis": "0.24.0", "nvidia_container_cli": nvidia_packages.FULL_VERSION,
                "image": IMAGE, "image_versions_here": inspected.get("versions"), "prepare_s": 0.0}
    manifest["prepare_s"] = round(time.monotonic() - t0, 1)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"gpu_path: prepared {out} ({size / 2 ** 20:.0f} MiB, {manifest['prepare_s']} s); image versions "
          f"{manifest['image_versions_here']}; on the GPU machine, as root: python3 benchmarks/gpu_path.py --run {out}")
    return 0


# ------------------------------------------------------------------------------------------------ run

def _driver_check(d: Path) -> dict[str, str]:
    """`nvidia-container-cli info` from DIR (nothing installed yet): the driver's own answer."""
    cli = d / "nvidia-stage/deb/usr/bin/nvidia-container-cli"
    proc = subprocess.run([str(cli), "info"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        detail = "; ".join(proc.stderr.strip().splitlines()) or f"exit {proc.returncode}"
        if "error while loading shared libraries" in detail:  # a library of the Debian build is missing here
            raise LibsMissing(f"nvidia-container-cli cannot start here: {detail}")
        raise SystemExit(f"gpu_path: no usable NVIDIA GPU here: `nvidia-container-cli info` says: {detail}")
    info = {}
    for line in proc.stdout.splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return info


def _unpack_debs(d: Path) -> list[str]:
    """Unpack into DIR/prefix the bundled Debian packages whose libraries or programs this machine lacks, and
    make them findable last (ld.so.conf.d after the system's, /usr/local/bin links only for missing programs)."""
    have = sh(["ldconfig", "-p"], check=False).stdout
    prefix, used = d / "prefix", []
    if not shutil.which("dpkg-deb"):
        raise Failed("dpkg-deb is missing: cannot unpack the bundled Debian packages")
    for deb in sorted((d / "debs").glob("*.deb")):
        paths = [line.split()[5] for line in sh(["dpkg-deb", "-c", str(deb)]).stdout.splitlines()]
        names = [path.rsplit("/", 1)[-1] for path in paths]
        sonames = [n for n in names if re.search(r"\.so\.\d+$", n)]
        progs = [n for n in names if n in ("unsquashfs", "jq")]
        if any(f"\t{n} (" not in have for n in sonames) or any(shutil.which(p) is None for p in progs):
            sh(["dpkg-deb", "-x", str(deb), str(prefix)])
            used.append(deb.name.split("_")[0])
            for p in progs:
                if shutil.which(p) is None:
                    os.symlink(prefix / "usr/bin" / p, f"/usr/local/bin/{p}")
    if used:
        Path("/etc/ld.so.conf.d/zz-gpu-path.conf").write_text(
            f"{prefix}/lib/x86_64-linux-gnu\n{prefix}/usr/lib/x86_64-linux-gnu\n")
        sh(["ldconfig"])
    return used


def _install(d: Path) -> str:
    repo = d / "nvidia-repo"
    if shutil.which("dpkg"):
        sh(["dpkg", "-i", *sorted(map(str, (repo / "deb/amd64").glob("*.deb")))])
        how = "dpkg -i (deb stand-ins)"
    elif shutil.which("rpm"):
        sh(["rpm", "-U", "--nosignature", "--replacepkgs", *sorted(map(str, (repo / "rpm/x86_64").glob("*.rpm")))])
        how = "rpm -U (rpm stand-ins)"
    else:
        raise Failed("neither dpkg nor rpm here")
    sh(["cp", "-a", f"{d / 'enroot'}/.", "/"])  # enroot + pyxis as their packages lay them out (caps kept)
    sh(["ldconfig"])
    return how


def _node_setup(d: Path) -> tuple[int, int]:
    env = {**os.environ, "PYTHONPATH": str(d / "node")}
    tools = [sys.executable, "-m", "clusterkit_node"]
    done = sh([*tools, "enroot-files", "--role", "compute", "--script", "compute_node_configured.sh", "--",
               *NODE_ARGS], env=env).stdout
    for line in done.splitlines():  # what enroot.sh's ck_node_apply does with these markers
        if line.startswith("@sysctl "):
            sh(["sysctl", "-q", "-p", line.split(" ", 1)[1]], check=False)
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        sh(["useradd", "-m", "-s", "/bin/bash", USER])
        pw = pwd.getpwnam(USER)
    for uid, gid in ((0, 0), (pw.pw_uid, pw.pw_gid)):
        sh([*tools, "user-dirs", "--uid", str(uid), "--gid", str(gid), "--log-file", ""], env=env)
    return pw.pw_uid, pw.pw_gid


def _start(sqsh: Path, who: str, uid: int, gid: int) -> dict:
    home = pwd.getpwuid(uid).pw_dir
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": home, "USER": who}
    pre = [] if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups"]
    name = f"gpucheck-{who}"
    sh([*pre, "enroot", "remove", "-f", name], env=env, check=False)
    t0 = time.monotonic()
    sh([*pre, "enroot", "create", "-n", name, str(sqsh)], env=env)
    t1 = time.monotonic()
    proc = sh([*pre, "enroot", "start", name, PROGRAM], env=env, check=False)
    t2 = time.monotonic()
    sh([*pre, "enroot", "remove", "-f", name], env=env, check=False)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), "")
    if not line:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise Failed(f"enroot start as {who} exited {proc.returncode}: {err}")
    got = json.loads(line)
    got.update(user=who, create_s=round(t1 - t0, 2), start_and_run_s=round(t2 - t1, 2))
    return got


def _version(code: int, kind: str) -> str:
    if kind == "cuda":  # 12090 -> 12.9
        return f"{code // 1000}.{code % 1000 // 10}"
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"  # NCCL >= 2.9: 22105 -> 2.21.5


def _health(d: Path) -> dict:
    """The node health loop's quick check on the real GPU (fleet/health_checks.py): the real nvidia-smi query, ECC
    counters and /dev/kmsg, with a plan that expects what this machine has (it must pass, in its budget) and one that
    expects a GPU more (it must fail, naming the count). No drain (no Slurm here)."""
    import re

    from clusterkit_node.contract.health_plan import Deep, Expect, HealthPlan, QueueHealth, dumps

    names = sh(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], check=False).stdout.split("\n")
    names = [n.strip() for n in names if n.strip()]
    model = next((w for w in (names[0].split() if names else []) if re.fullmatch(r"[A-Z]+[0-9]+[A-Z]*", w)), "")
    store = Path("/var/tmp/gpu-path-store")
    store.mkdir(mode=0o755, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(d / "node")}
    found: dict = {"gpus": len(names), "model": model}
    for label, count in (("expects_this_machine", len(names)), ("expects_one_more", len(names) + 1)):
        plan = store / f"health-{label}.json"
        plan.write_text(dumps(HealthPlan("gpucheck", 300, {"gpu": QueueHealth(True, 10, {
            "gpu": Expect(count, model, 0)}, Deep())})))
        t = time.monotonic()
        r = sh([sys.executable, "-m", "clusterkit_node", "health", "check", "--tier", "quick", "--source", "boot",
                "--node", "gpu-st-gpu-1", "--store", str(store), "--plan", str(plan), "--no-drain", "--cursor",
                str(store / "health-cursor.json")], check=False, env=env)
        found[label] = {"exit": r.returncode, "s": round(time.monotonic() - t, 2),
                        "said": [ln for ln in (r.stdout + r.stderr).splitlines() if "health" in ln][-3:]}
    found["ok"] = found["expects_this_machine"]["exit"] == 0 and found["expects_one_more"]["exit"] == 1
    return found


def run(d: Path) -> int:
    if os.geteuid() != 0:
        raise Failed("run as root (it installs the CLI and enroot, and starts containers as a user)")
    if not (d / "manifest.json").is_file():
        raise Failed(f"{d} was not prepared (python3 benchmarks/gpu_path.py --prepare {d} on the build machine)")
    t0 = time.monotonic()
    early: list[str] = []
    try:
        info = _driver_check(d)
    except LibsMissing:
        early = _unpack_debs(d)  # the Debian build's libraries, where this machine lacks them
        info = _driver_check(d)
    unpacked = sorted({*early, *_unpack_debs(d)})  # then the programs enroot needs (unsquashfs, jq) where missing
    installed = _install(d)
    uid, gid = _node_setup(d)
    sqsh = Path("/var/tmp/gpu-path-store/gpu-check.sqsh")
    sqsh.parent.mkdir(mode=0o755, exist_ok=True)
    shutil.copy2(d / IMAGE, sqsh)
    sqsh.chmod(0o644)
    inspected = json.loads(sh([sys.executable, "-m", "clusterkit_node", "inspect", str(sqsh), "--format", "json"],
                              check=False, env={**os.environ, "PYTHONPATH": str(d / "node")}).stdout)
    runs = [_start(sqsh, "root", 0, 0), _start(sqsh, USER, uid, gid)]
    image = inspected.get("versions", {})
    rows = []
    for r in runs:
        seen = {"cuda": _version(r.get("cuda_runtime", 0), "cuda"), "nccl": _version(r.get("nccl", 0), "nccl")}
        r["versions_at_run_time"] = seen
        r["matches_inspect"] = all(image.get(k) == v for k, v in seen.items())
        rows.append(r)
    gpu = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], check=False).stdout.strip()
    health = _health(d)
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
              "gpu": gpu or info.get("Model", "?"), "driver": info.get("NVRM version", "?"),
              "cli_install": installed, "debs_unpacked": unpacked, "inspect_versions": image, "runs": rows,
              "start_path": "enroot create + enroot start (no Slurm on this machine)",
              "manifest": json.loads((d / "manifest.json").read_text()), "health_quick_check": health,
              "run_s": round(time.monotonic() - t0, 1)}
    ok = all(r.get("ok") and r["matches_inspect"] for r in rows) and health["ok"]
    result["ok"] = ok
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else d / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_path.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"Machine: {result['machine']}; GPU {result['gpu']}, driver {result['driver']}; {result['date']}",
             f"nvidia-container-cli {result['manifest']['nvidia_container_cli']} via {installed}; enroot 4.1.2; "
             f"inspect of the .sqsh: {image}",
             "| user | devices | CUDA runtime | NCCL | = inspect | NCCL init s | allreduce | create s | start+run s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v = r["versions_at_run_time"]
        lines.append(f"| {r['user']} | {r.get('devices', '?')} | {v['cuda']} | {v['nccl']} | {r['matches_inspect']} "
                     f"| {r.get('nccl_init_s', '?')} | {r.get('allreduce_ok', r.get('error'))} | {r['create_s']} "
                     f"| {r['start_and_run_s']} |")
    lines.append(f"health quick check: {health['gpus']} x {health['model'] or '?'}: passes in "
                 f"{health['expects_this_machine']['s']} s (exit {health['expects_this_machine']['exit']}), one GPU "
                 f"more expected: exit {health['expects_one_more']['exit']}")
    (out / "gpu_path.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--prepare", metavar="DIR", type=Path, help="build everything into DIR (here, no GPU)")
    g.add_argument("--run", metavar="DIR", type=Path, help="run the prepared check (GPU machine, root)")
    a = p.parse_args(argv)
    try:
        return prepare(a.prepare.resolve()) if a.prepare else run(a.run.resolve())
    except Failed as exc:
        print(f"gpu_path: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        raise
    except Exception as exc:  # noqa: BLE001 - the runtime builds raise their own errors: one line each
        print(f"gpu_path: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
