#!/usr/bin/env python3
"""How long does a container job take to start from the image store, per squash option, and how many
bytes does each start read from the store? Measured with the REAL enroot + pyxis and Debian's Slurm.

For a generated image of about --size-mb MB (the realistic synthetic mix of squash_options.py, plus
busybox-static so `true` runs), the script builds one .sqsh per squash option with enroot's own
mksquashfs invocation (`-all-root -noappend -no-progress <options>`) into the store, /fsx/bench, of a
ParallelCluster-shaped node root (tests/real_runtime/node_root.py) whose slurmd has loaded pyxis with
the plugstack line and enroot.conf ClusterKit's head node writes (container_scope=job, per-user paths).
Then, for --rounds rounds, rotating the order of the options each round, for each option:

  * `srun true` (no container),
  * `srun --container-image=/fsx/bench/<label>.sqsh true` (pyxis: `enroot create` = unsquashfs into
    ENROOT_DATA_PATH on /var/tmp, `enroot start`, then `enroot remove` before the step ends),
  * the floor: a plain `unsquashfs -f -d <dir on /var/tmp> <same file>` (what `enroot create` does),
    timed inside the node; the extracted tree is removed afterwards, untimed,

each one preceded by `sync; echo 3 > /proc/sys/vm/drop_caches` (every start is a cold start, as the
first job of an image on a node) and by waiting for the node to be idle again. The store is an ext4
file system on a loop device, so the block device's read counter (/sys/block/loopN/stat, sectors read)
gives the bytes each start reads from the store, read-ahead included. The node's /var/tmp, where
enroot extracts, is a second fresh ext4 on a loop device (a compute node's local disk): on the machine
this was written on, creating files on the host's root file system took ~0.4 ms each and drifted
upwards run after run, which made extraction 8x slower than on a plain ext4 and buried the
comparison in noise. Reported: medians over rounds;
overhead = container start - `srun true`; overhead / floor; MB read from the store per start. Compare
the ratios within one run, not absolute times across machines.

The node runs ClusterKit's Slurm prolog as a real cluster does: ParallelCluster's ``Prolog=.../prolog.d/*`` and
ClusterKit's ``PrologFlags=Alloc`` (node_root.PC_PROLOG_EPILOG), the prolog script the head node writes
(node/slurm_prolog.py) running this checkout's zipapp, and enroot's per-user parents root's, 0755 (enroot.sh).
Each round also starts --prolog-option's image and `srun true` with ClusterKit's prolog moved out of prolog.d
(PC's own stand-in stays), so the prolog's share of a start is measured, not inferred. --use-squashfuse adds
``use_squashfuse=1`` to the pyxis line (ClusterKit's line for pyxis >= 0.24): the store file is started in place,
nothing extracted (the floor is then only a reference). --options runs a subset of the squash options.

What it does not measure: FSx for Lustre network throughput or many nodes reading at once (the store is
a local disk here, so reading fewer bytes matters far less than on FSx, where it is the bottleneck);
import time (`enroot import`, see squash_options.py for mksquashfs cost); starting in place with squashfuse
(pyxis' use_squashfuse: squashfuse_start.py); warm-cache starts of the same image on the same node; GPUs
(none here: the nvidia hook does nothing). The image is synthetic (see squash_options.build_tree).

Run as root from the repo root (needs the real-runtime tier's Debian packages; builds enroot/pyxis via
tests/real_runtime/runtime_build.py, cached):

    python3 benchmarks/container_start.py [--size-mb 1024] [--rounds 5] [--gen gen4|gen3] [--user ckuser1]
    python3 benchmarks/container_start.py --size-mb 64 --rounds 2      # quick check
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "real_runtime"))
sys.path.insert(0, str(REPO / "benchmarks"))

import runtime_build  # noqa: E402
import squash_options  # noqa: E402
from node_root import NODE, USERS, NodeRoot  # noqa: E402

sys.path.insert(0, str(REPO))
from clusterkit.artifacts.bundle import build_zipapp  # noqa: E402
from clusterkit_node.node.slurm_prolog import PROLOG, PROLOG_DIR, PROLOG_NAME  # noqa: E402


@dataclass(frozen=True)
class SquashOption:
    label: str
    options: str
    note: str


OPTIONS = (
    SquashOption("lzo", "-comp lzo -noD", "enroot default"),
    SquashOption("uncompressed", "-noI -noD -noF -noX -no-duplicates", "no compression (pyxis wiki / PC sample)"),
    SquashOption("zstd", "-comp zstd -Xcompression-level 3 -b 1M",
                 "1 MiB blocks (ClusterKit default until 2026-12-01)"),
    SquashOption("zstd-128k-nf", "-comp zstd -Xcompression-level 3 -b 128K -no-fragments", "ClusterKit default"),
)
OURS = "zstd-128k-nf"
GOAL_RATIO = 1.3
STORE = "/fsx/bench"
# Top-level host dirs the node root does not share (node_root._SETUP): a scratch dir there breaks start().
APPLETS = ("sh", "true", "false", "cat", "ls", "echo", "id", "env", "sleep", "test")

# Exactly what ClusterKit's head node writes (plugstack.conf + plugstack.conf.d/pyxis.conf, enroot.conf).
PLUGSTACK = "include /opt/slurm/etc/plugstack.conf.d/*\n"
PYXIS_CONF = ("required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis container_scope=job "
              "sbatch_support=1 execute_entrypoint=0\n")
ENROOT_CONF = """\
ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)
ENROOT_DATA_PATH /var/tmp/enroot/data/user-$(id -u)
ENROOT_CACHE_PATH /var/tmp/enroot/cache/user-$(id -u)
ENROOT_TEMP_PATH /var/tmp/enroot/tmp
ENROOT_ROOTFS_WRITABLE yes
ENROOT_MOUNT_HOME yes
"""


@dataclass
class Samples:
    plain: list[float] = field(default_factory=list)
    container: list[float] = field(default_factory=list)
    plain_no_prolog: list[float] = field(default_factory=list)
    container_no_prolog: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    floor_rm: list[float] = field(default_factory=list)
    container_bytes: list[int] = field(default_factory=list)
    floor_bytes: list[int] = field(default_factory=list)


@dataclass
class Fixed:
    """`srun true` next to a container start of a tiny image (busybox only): the per-start cost of
    pyxis + enroot that does not depend on the image's size."""

    plain: list[float] = field(default_factory=list)
    tiny: list[float] = field(default_factory=list)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sh(cmd: list[str], timeout: float = 600) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout).stdout


# ------------------------------------------------------------------------------------------ machine

def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    return f"{model}, {os.cpu_count()} cores, {mem_kb / 1024 ** 2:.1f} GiB RAM, kernel {platform.release()}"


# ------------------------------------------------------------------------------------------- image

def add_runtime_files(tree: Path) -> None:
    """busybox-static as /bin/busybox with applet links, and a root-only passwd/group for enroot's hooks."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    (tree / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(busybox, tree / "bin" / "busybox")
    (tree / "bin" / "busybox").chmod(0o755)
    for applet in APPLETS:
        (tree / "bin" / applet).symlink_to("busybox")
    (tree / "etc").mkdir(exist_ok=True)
    (tree / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (tree / "etc" / "group").write_text("root:x:0:\n")
    for d in ("root", "tmp", "proc", "sys", "dev", "run", "var/tmp", "home"):
        (tree / d).mkdir(parents=True, exist_ok=True)


def mksquashfs(tree: Path, out: Path, options: str) -> float:
    """enroot's own invocation (runtime.sh: mksquashfs ... -all-root -noappend -no-progress $OPTIONS)."""
    started = time.perf_counter()
    subprocess.run(["mksquashfs", str(tree), str(out), "-all-root", "-noappend", "-no-progress", "-quiet",
                    *options.split()], check=True, stdout=subprocess.DEVNULL)
    out.chmod(0o644)
    return time.perf_counter() - started


# ------------------------------------------------------------------------------------- file systems

@dataclass
class LoopFs:
    """An ext4 file system on a loop device (backed by a sparse file), mounted at mountpoint."""

    backing: Path
    mountpoint: Path
    device: str = ""
    mounted: bool = False

    def create(self, size_bytes: int) -> None:
        with open(self.backing, "wb") as fh:
            fh.truncate(size_bytes)
        # No lazy init: ext4lazyinit would otherwise write in the background during the measurements.
        sh(["mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(self.backing)])
        self.device = sh(["losetup", "--find", "--show", str(self.backing)]).strip()
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        sh(["mount", "-t", "ext4", "-o", "noatime", self.device, str(self.mountpoint)])
        self.mounted = True

    def sectors_read(self) -> int:
        """Field 3 of /sys/block/loopN/stat: 512-byte sectors read from the device since attach."""
        return int((Path("/sys/block") / Path(self.device).name / "stat").read_text().split()[2])

    def unmount(self) -> None:
        if self.mounted:
            if subprocess.run(["umount", str(self.mountpoint)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)
            self.mounted = False

    def detach(self) -> None:
        # A device still mounted in a dying namespace is only marked autoclear by the kernel: fine.
        if self.device:
            subprocess.run(["losetup", "-d", self.device], capture_output=True)
            self.device = ""
        self.backing.unlink(missing_ok=True)


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


# -------------------------------------------------------------------------------------------- node

ZIPAPP = "/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz"  # what the prolog runs (slurm_prolog.PROLOG)
PROLOG_PATH = f"{PROLOG_DIR}/{PROLOG_NAME}"
PROLOG_ASIDE = f"/opt/slurm/etc/scripts/{PROLOG_NAME}.aside"  # outside the Prolog= glob


def configure_node(node: NodeRoot, squashfuse: bool = False) -> None:
    """The files ClusterKit's head node writes for pyxis and enroot (before slurmd starts), its Slurm prolog and the
    zipapp that prolog runs, the in-place reader's wrapper; enroot's per-user parents root's, 0755, the shared temp
    dir 1777 (enroot.sh)."""
    node.sh("install -d -m 0755 /run/enroot /var/tmp/enroot /var/tmp/enroot/data /var/tmp/enroot/cache && "
            "install -d -m 1777 /var/tmp/enroot/tmp && install -d -m 0755 /opt/parallelcluster/shared/clusterkit")
    node.write("/etc/enroot/enroot.conf", ENROOT_CONF)
    node.write("/opt/slurm/etc/plugstack.conf", PLUGSTACK)
    node.write("/opt/slurm/etc/plugstack.conf.d/pyxis.conf",
               PYXIS_CONF.replace("\n", " use_squashfuse=1\n") if squashfuse else PYXIS_CONF)
    with tempfile.NamedTemporaryFile(dir="/tmp", suffix=".pyz") as pyz:  # /tmp: shared with the node root
        pyz.write(build_zipapp())
        pyz.flush()
        node.run(["install", "-m", "0755", pyz.name, ZIPAPP])
    node.write(PROLOG_PATH, PROLOG, 0o755)
    # the squashfuse enroot runs, as every node's boot sets it (squashfuse_reader.py: the node's multi-threaded
    # squashfuse_ll behind /usr/local/bin/squashfuse where it has one, ubuntu2404's node root does)
    node.run(["python3", ZIPAPP, "squashfuse-reader"])


def prolog(node: NodeRoot, on: bool) -> None:
    """ClusterKit's prolog in prolog.d (on) or moved aside (off; PC's own stand-in still runs)."""
    src, dst = (PROLOG_ASIDE, PROLOG_PATH) if on else (PROLOG_PATH, PROLOG_ASIDE)
    node.run(["mv", "-f", src, dst])


def wait_idle(node: NodeRoot, timeout: float = 300) -> None:
    """Until slurmd has finished the last job's epilog (pyxis' `enroot list`), so starts don't overlap."""
    node.wait(lambda: node.node_state() == "IDLE" and
              not node.run(["squeue", "-h"], check=False).stdout.strip(), "node idle", timeout)


def versions(node: NodeRoot, gen: runtime_build.Generation) -> str:
    enroot = node.run(["enroot", "version"]).stdout.strip()
    found = re.findall(r"pyxis: version v(\S+)", node.read("/var/log/slurmd.log"))
    pyxis = found[-1] if found else f"{gen.pyxis_version} (not logged)"
    slurm = node.run(["srun", "--version"]).stdout.strip()
    squash = (subprocess.run(["unsquashfs", "-version"], capture_output=True, text=True).stdout.splitlines()
              or ["unsquashfs ?"])[0]  # exits 1 after printing its version
    return f"{gen.key}: enroot {enroot}, pyxis {pyxis}; {slurm}; {squash}"


def timed_srun(node: NodeRoot, store: LoopFs, user: str | None, image: str | None) -> tuple[float, int]:
    """One cold srun (caches dropped first): wall seconds and bytes read from the store."""
    wait_idle(node)
    drop_caches()
    before = store.sectors_read()
    cmd = ["srun", "--quiet", *([f"--container-image={image}"] if image else []), "true"]
    started = time.perf_counter()
    node.run(cmd, user=user, timeout=900)
    elapsed = time.perf_counter() - started
    wait_idle(node)
    return elapsed, (store.sectors_read() - before) * 512


FLOOR = r"""
d=$(mktemp -d /var/tmp/ck-floor.XXXXXX)
s=$EPOCHREALTIME
unsquashfs -n -f -d "$d" "$1" > /dev/null
e=$EPOCHREALTIME
rm -rf "$d"
r=$EPOCHREALTIME
echo "$s $e $r"
"""


def timed_floor(node: NodeRoot, store: LoopFs, user: str | None, image: str) -> tuple[float, float, int]:
    """Plain unsquashfs of the same file, cold, timed inside the node: (seconds, rm seconds, bytes)."""
    wait_idle(node)
    drop_caches()
    before = store.sectors_read()
    out = node.run(["bash", "-c", FLOOR, "floor", image], user=user, timeout=900).stdout.split()
    after = store.sectors_read()
    s, e, r = (float(x) for x in out[-3:])
    return e - s, r - e, (after - before) * 512


# ------------------------------------------------------------------------------------------ report

def med(values: list[float]) -> float:
    return statistics.median(values)


def report(header: list[str], sizes: dict[str, int], samples: dict[str, Samples], fixed: Fixed) -> bool:
    for line in header:
        print(line)
    print()
    print("| option | .sqsh size MB | median `srun true` s | median container start s | overhead s "
          "| unsquashfs floor s | overhead / floor | MB read from store per start | MB read by floor "
          "| without ClusterKit's prolog: `srun true` s, container start s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios: dict[str, float] = {}
    read_mb: dict[str, float] = {}
    for opt in OPTIONS:
        s = samples[opt.label]
        if not s.container:
            continue
        plain, cont, floor = med(s.plain), med(s.container), med(s.floor)
        without = (f"{med(s.plain_no_prolog):.3f}, {med(s.container_no_prolog):.3f}" if s.container_no_prolog
                   else "-")
        overhead = cont - plain
        ratios[opt.label] = overhead / floor
        read_mb[opt.label] = med([b / 1e6 for b in s.container_bytes])
        print(f"| `{opt.options}` ({opt.note}) | {sizes[opt.label] / 1e6:.1f} | {plain:.3f} | {cont:.3f} "
              f"| {overhead:.3f} | {floor:.2f} | {ratios[opt.label]:.2f} | {read_mb[opt.label]:.1f} "
              f"| {med([b / 1e6 for b in s.floor_bytes]):.1f} | {without} |")
        log(f"{opt.label}: container starts with the prolog {sorted(round(x, 3) for x in s.container)}"
            + (f", without {sorted(round(x, 3) for x in s.container_no_prolog)}" if s.container_no_prolog else ""))
    print()
    rm = ", ".join(f"{o.label} {med(samples[o.label].floor_rm):.2f} s" for o in OPTIONS if samples[o.label].floor_rm)
    tiny = med(fixed.tiny) - med(fixed.plain)
    print(f"Size-independent part of the overhead: a tiny image (busybox only, {sizes['tiny'] / 1e3:.0f} kB) "
          f"starts in {med(fixed.tiny):.2f} s against `srun true` {med(fixed.plain):.3f} s, i.e. "
          f"{tiny:.2f} s of pyxis + enroot per start whatever the image.")
    print(f"Not in the floor: removing the extracted tree (median {rm}), which pyxis does inside the step "
          "(`enroot remove`), so it is part of the overhead.")
    if OURS not in ratios or len(ratios) < 2:
        return True
    ratio_ok = ratios[OURS] <= GOAL_RATIO
    fewest = min(read_mb.values())
    bytes_ok = read_mb[OURS] <= fewest
    verdict = "HOLDS" if ratio_ok and bytes_ok else "DOES NOT HOLD"
    print(f"Goal ({OURS} overhead <= {GOAL_RATIO}x floor and fewest bytes read) {verdict} in this run: "
          f"overhead / floor {ratios[OURS]:.2f} ({'<=' if ratio_ok else '>'} {GOAL_RATIO}); "
          f"{read_mb[OURS]:.1f} MB read per start vs fewest of the others "
          f"{min(v for k, v in read_mb.items() if k != OURS):.1f} MB.")
    return ratio_ok and bytes_ok


# -------------------------------------------------------------------------------------------- main

def run(args: argparse.Namespace, work: Path, cleanup: list) -> int:
    gen = runtime_build.GENERATIONS[args.gen]
    load_start = Path("/proc/loadavg").read_text().split()[0]
    log(f"building/reusing real enroot + pyxis ({gen.key}) ...")
    stage = runtime_build.build(gen.key)

    # The image tree (in /dev/shm when it has room: only mksquashfs reads it).
    shm_ok = os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free > 3 * args.size_mb * 1_000_000
    tree_dir = Path(tempfile.mkdtemp(prefix="ck-container-tree-", dir="/dev/shm" if shm_ok else work))
    cleanup.append(lambda: shutil.rmtree(tree_dir, ignore_errors=True))
    tree = tree_dir / "rootfs"
    started = time.perf_counter()
    info = squash_options.build_tree(tree, args.size_mb, args.seed)
    add_runtime_files(tree)
    log(f"tree: {info['files']} files, {info['bytes'] / 1e6:.1f} MB in {time.perf_counter() - started:.1f} s")
    tiny = tree_dir / "tiny"
    add_runtime_files(tiny)

    # Two ext4 file systems on loop devices, mounted where the node root binds /fsx and /var/tmp from
    # (so before it starts): the store, whose device counts the bytes read, and the node's local scratch
    # that enroot extracts into. Cleanup runs last-in first-out: unmount both, stop the node (which
    # also kills job steps left in its namespace), detach.
    node = NodeRoot(work / "node", stage)
    store = LoopFs(work / "store.ext4", node.fsx)
    scratch = LoopFs(work / "vartmp.ext4", node.scratch / "vartmp")
    cleanup += [store.detach, scratch.detach, node.stop, store.unmount, scratch.unmount]
    store.create(int(3.2 * args.size_mb * 1_000_000) + 512_000_000)
    scratch.create(int(2.5 * args.size_mb * 1_000_000) + 1_000_000_000)
    bench = node.fsx / "bench"
    bench.mkdir(mode=0o755)
    sizes: dict[str, int] = {}
    options = [o for o in OPTIONS if not args.options or o.label in args.options]
    for opt in options:
        out = bench / f"{opt.label}.sqsh"
        took = mksquashfs(tree, out, opt.options)
        sizes[opt.label] = out.stat().st_size
        log(f"mksquashfs {opt.options}: {sizes[opt.label] / 1e6:.1f} MB in {took:.1f} s")
    mksquashfs(tiny, bench / "tiny.sqsh", OPTIONS[0].options)
    sizes["tiny"] = (bench / "tiny.sqsh").stat().st_size
    shutil.rmtree(tree_dir, ignore_errors=True)

    node.start()
    configure_node(node, args.use_squashfuse)
    node.start_slurm()
    ver = versions(node, gen)
    log(ver)
    user = None if args.user == "root" else args.user

    # Warm-up (unmeasured): first job on the node, first enroot run for the user.
    timed_srun(node, store, user, None)
    timed_srun(node, store, user, f"{STORE}/tiny.sqsh")

    samples = {o.label: Samples() for o in OPTIONS}
    fixed = Fixed()
    for r in range(args.rounds):
        fixed.plain.append(timed_srun(node, store, user, None)[0])
        fixed.tiny.append(timed_srun(node, store, user, f"{STORE}/tiny.sqsh")[0])
        log(f"round {r + 1}/{args.rounds} tiny image: srun true {fixed.plain[-1]:.3f} s, "
            f"container {fixed.tiny[-1]:.2f} s")
        order = options[r % len(options):] + options[:r % len(options)]
        for opt in order:
            s = samples[opt.label]
            image = f"{STORE}/{opt.label}.sqsh"
            plain, _ = timed_srun(node, store, user, None)
            cont, cont_bytes = timed_srun(node, store, user, image)
            floor, floor_rm, floor_bytes = timed_floor(node, store, user, image)
            s.plain.append(plain)
            s.container.append(cont)
            s.container_bytes.append(cont_bytes)
            s.floor.append(floor)
            s.floor_rm.append(floor_rm)
            s.floor_bytes.append(floor_bytes)
            log(f"round {r + 1}/{args.rounds} {opt.label}: srun true {plain:.3f} s, container {cont:.2f} s "
                f"({cont_bytes / 1e6:.1f} MB read), floor {floor:.2f} s ({floor_bytes / 1e6:.1f} MB read)")
            if opt.label == args.prolog_option:
                prolog(node, on=False)
                s.plain_no_prolog.append(timed_srun(node, store, user, None)[0])
                s.container_no_prolog.append(timed_srun(node, store, user, image)[0])
                prolog(node, on=True)
                log(f"round {r + 1}/{args.rounds} {opt.label} without ClusterKit's prolog: srun true "
                    f"{s.plain_no_prolog[-1]:.3f} s, container {s.container_no_prolog[-1]:.3f} s")

    disk = " ".join(sh(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", str(work)]).split())
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        f"Container start from the store, real enroot + pyxis ({ver}).",
        f"Machine: {machine()}; {now}; 1-min load average {load_start} at start, "
        f"{Path('/proc/loadavg').read_text().split()[0]} at end.",
        f"Image: synthetic tree (squash_options.build_tree, seed {args.seed}) of {info['files']} files, "
        f"{info['bytes'] / 1e6:.1f} MB, + busybox-static; jobs as {args.user}, one node ({NODE}), "
        f"container_scope=job{', use_squashfuse=1 (in place)' if args.use_squashfuse else ''}; ClusterKit's "
        f"prolog (Prolog=prolog.d/*, PrologFlags=Alloc); store (/fsx) and the node's /var/tmp (where enroot "
        f"extracts): two ext4 file systems on loop devices backed by files on {disk}; page cache dropped before "
        f"every start; "
        f"medians of {args.rounds} "
        f"rounds, option order rotated each round.",
    ]
    report(header, sizes, samples, fixed)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the synthetic image tree (default 1024)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, option order rotated each (default 5)")
    ap.add_argument("--gen", choices=sorted(runtime_build.GENERATIONS), default="gen4",
                    help="enroot/pyxis generation (default gen4: enroot 4.1.2 + pyxis 0.24.0)")
    ap.add_argument("--user", choices=["root", *USERS], default="ckuser1",
                    help="who submits the jobs (default ckuser1, an unprivileged user)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--options", nargs="+", choices=[o.label for o in OPTIONS],
                    help="only these squash options (default all)")
    ap.add_argument("--use-squashfuse", action="store_true",
                    help="use_squashfuse=1 on the pyxis line (ClusterKit's line for pyxis >= 0.24: start in place)")
    ap.add_argument("--prolog-option", default=OURS, choices=[o.label for o in OPTIONS],
                    help="the option whose starts are also timed without ClusterKit's prolog (default %(default)s)")
    ap.add_argument("--workdir", default="/tmp",
                    help="where the store's backing file and the node root (whose /var/tmp receives the "
                         "extractions) go: a local disk with about 3.5x --size-mb free (default /tmp)")
    args = ap.parse_args(argv)
    return run_as_root("container_start.py", ("mksquashfs", "unsquashfs", "mkfs.ext4", "losetup", "unshare",
                       "nsenter", "busybox", "slurmd", "slurmctld", "munged", "srun"),
                       "ck-container-bench-", args, run)


def run_as_root(script: str, tools: tuple[str, ...], prefix: str, args: argparse.Namespace,
                body: Callable[[argparse.Namespace, Path, list], int]) -> int:
    """Check root and tools, then ``body(args, work, cleanup)`` in a fresh work dir; the cleanup steps run
    in reverse (also on SIGTERM/Ctrl-C) and the work dir is removed. Shared by the start benchmarks."""
    if os.geteuid() != 0:
        print(f"{script}: run as root (mount namespaces, loop devices, slurmd)", file=sys.stderr)
        return 2
    missing = [t for t in tools if shutil.which(t, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]
    if missing:
        print(f"{script}: missing {' '.join(missing)} (apt-get install {' '.join(runtime_build.DEB_PACKAGES)})",
              file=sys.stderr)
        return 2

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=args.workdir))
    cleanup: list = []
    try:
        return body(args, work, cleanup)
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for step in reversed(cleanup):
            try:
                step()
            except Exception as exc:  # keep cleaning up
                log(f"cleanup: {exc}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
