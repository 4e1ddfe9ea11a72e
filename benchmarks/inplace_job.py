#!/usr/bin/env python3
"""The whole container job, extracted vs in place: does starting in place (pyxis' use_squashfuse=1) make the
job itself slower? Measured as a user sees it, with the REAL enroot 4.1.2 + pyxis 0.24.0 and Debian's Slurm.

The image is the multi-node tier's training image (tests/multinode/training_image.py: Debian bookworm with
python3-torch 1.13 and its dependencies, 1.3 GB, about 19,700 files, built once by mmdebstrap and cached) plus
/data: --size-mb MiB of --file-kib KiB files of incompressible bytes (like JPEG or tokenized shards; seeded),
plus /ck-bench (the job program and the shuffled file list). It is squashed with enroot's mksquashfs call and
ClusterKit's store default (`-comp zstd -Xcompression-level 3 -b 128K -no-fragments`) into the store of a
ParallelCluster-shaped node root (tests/real_runtime/node_root.py: real slurmctld/slurmd, ClusterKit's
enroot.conf and pyxis line, container_scope=job). A second image, the same without /data, gives the start at
a second size. Jobs run as ckuser1 (--user) and name the .sqsh path; the page cache is dropped before each one.

Jobs, per store, per mode, per round (modes and stores rotated each round):
  * start at two sizes: `srun --container-image=<image>.sqsh true`, the image without and with /data;
  * the whole job: `srun --container-image=<image>.sqsh python3 /ck-bench/job.py N torch`, wall time from
    srun's launch to its end (start, the job, the container's teardown). The job, with the image's own python:
    (a) `import torch` (875 modules: numpy, sympy, libtorch_cpu 120 MB, ...), timed inside; (b) N readers
    (--readers, default 8; forked after the import, as a DataLoader's workers are) reading the shuffled file
    list of /data round-robin, whole files, timed from the fork to the last reader's end: MB/s. The job also
    reports when its python started (the start inside the job) and the bytes it read, checked against /data.

Modes (each job's mode is checked in slurmd's log: "starting container from squashfs: <image>" for in place,
"starting container: pyxis_..." for extraction; once per mode a `sleep` job as the user shows the squashfuse
process serving the image, its binary and its threads):
  * extracted: pyxis without use_squashfuse (ClusterKit's line for pyxis < 0.24, or where the node has no
    multi-threaded reader): `enroot create` (unsquashfs of the whole image into /var/tmp), start, remove;
  * squashfuse 0.1.104: use_squashfuse=1, enroot runs `squashfuse -f -o uid=U,gid=G` = Debian 12's
    /usr/bin/squashfuse (the high-level one: one thread);
  * squashfuse_ll 0.6.2: use_squashfuse=1 with /usr/local/bin/squashfuse = the wrapper a node's squashfuse-reader
    writes (squashfuse_reader.wrapper_text: exec the multi-threaded squashfuse_ll 0.6.2, built by
    tests/real_runtime/squashfuse_build.py from ../shared/vendor, with glibc.malloc.arena_max=1), which is what
    ClusterKit ships: earlier on PATH than /usr/bin, taking enroot's options unchanged.

Stores (the .sqsh files are the same; --stores picks):
  * local: an ext4 on a loop device at /fsx (read-ahead 128 KiB, Linux's default for a disk), as
    container_start.py and squashfuse_start.py have it; its read counter gives the MB each job read;
  * net: the same directory through delayfs (benchmarks/inplace_job/delayfs.c, a FUSE pass-through built here),
    which waits --net-latency-us (default 500 µs) before answering each read, open, lookup and readdir: a
    network file system's round trip per request that misses the page cache. FSx for Lustre's SSD deployment
    types are designed for sub-millisecond P50 latency per file operation, data and metadata (AWS, FSx for Lustre
    user guide, "Performance characteristics of SSD and HDD storage classes"; HDD: single-digit ms for data).
    Requests in flight at once are delayed at once (the kernel's read-ahead and squashfuse_ll's threads overlap
    them, as a Lustre client pipelines RPCs); bandwidth is not limited. On this machine's kernel dm-delay, netem
    and NFS are not built in, so a FUSE layer is the stand-in that works.

Reported: medians over --rounds; per store and mode the whole job's seconds and its ratio to extracted, the
readers' MB/s and extracted's MB/s over it (how many times slower), import seconds and ratio, the start inside
the job, MB read from the store, and the start (`true`) at both sizes. Compare ratios within one run.

Then, once per round, the readers alone with both sides cold (cold_reads: /data of the big image read by the same
number of parallel `cat`s from the tree extracted onto the node-local ext4, and through each squashfuse reading the
store's .sqsh on each store, page cache dropped after the extraction or the mount): the reader's own throughput,
which the whole job's reads hide (extraction has just filled the page cache). The read goal uses these.

What it does not show: more cores (the readers and squashfuse_ll's threads share 2 cores here; see
../shared/reference/domain.md "Reading through squashfuse" for 16 cores); a GPU or a real training step; real
FSx (its bandwidth, its own read-ahead and caches, many nodes at once); warm caches (a second job on the node).

Run as root from the repo root (the real-runtime tier's Debian packages, libfuse3-dev, the cached training image
or mmdebstrap and a Debian mirror; free in --workdir about 3x the image, /dev/shm about 2.5 GB). A default run
took 5 minutes on 2 cores (plus about 4 minutes once to build the training image):

    python3 benchmarks/inplace_job.py [--size-mb 640] [--readers 8] [--rounds 3] [--stores local net]
    python3 benchmarks/inplace_job.py --quick          # 128 MiB of /data, 1 round
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # clusterkit, which node_root imports

import container_start as cs  # noqa: E402  (also puts tests/real_runtime on sys.path)
import squashfuse_start as sfs  # noqa: E402

from clusterkit_node.node.squashfuse_reader import wrapper_text  # noqa: E402

REPO = cs.REPO
sys.path.insert(0, str(REPO / "tests" / "multinode"))

GEN = "gen4"
STORE_OPTIONS = "-comp zstd -Xcompression-level 3 -b 128K -no-fragments"  # ClusterKit's store default
USER = "ckuser1"
READAHEAD_KB = 128
LL_IN_NODE = "/usr/local/libexec/clusterkit/squashfuse_ll"  # where the node holds the multi-threaded binary
LL_LINK = "/usr/local/bin/squashfuse"  # what ClusterKit ships: a wrapper earlier on PATH than /usr/bin/squashfuse
DELAYFS_SRC = Path(__file__).resolve().parent / "inplace_job" / "delayfs.c"
# FSx for Lustre SSD: "Disk latencies per file operation (milliseconds, P50): Metadata: sub-ms, Data: sub-ms"
# (FSx for Lustre user guide, Performance characteristics of SSD and HDD storage classes).
NET_LATENCY_US = 500
GOAL_READ_RATIO, GOAL_JOB_RATIO, GOAL_START_SPREAD_S = 1.6, 1.0, 0.1  # issue #38's done-when
SHIPPED = "squashfuse_ll 0.6.2"


@dataclass(frozen=True)
class Mode:
    label: str
    in_place: bool
    ll: bool
    note: str

    @property
    def pyxis_conf(self) -> str:
        return sfs.PYXIS_SQUASHFUSE if self.in_place else cs.PYXIS_CONF


MODES = (
    Mode("extracted", False, False, "pyxis default: enroot create = unsquashfs per job"),
    Mode("squashfuse 0.1.104", True, False, "use_squashfuse=1, Debian 12's /usr/bin/squashfuse"),
    Mode(SHIPPED, True, True, f"use_squashfuse=1, {LL_LINK} runs squashfuse_ll 0.6.2 (one malloc arena)"),
)
STORES = {"local": "ext4 on a loop device", "net": "the same through delayfs"}

JOB_PY = '''\
"""The benchmark's job: (a) import a package tree, (b) N forked readers over /ck-bench/files.list."""
import json, os, sys, time
started = time.time()
readers, module = int(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
__import__(module)
imported = time.perf_counter() - t0
files = open("/ck-bench/files.list").read().split()
pipes, t1 = [], time.perf_counter()
for i in range(readers):
    r, w = os.pipe()
    if os.fork() == 0:
        total = 0
        for name in files[i::readers]:
            with open(name, "rb", buffering=0) as fh:
                while chunk := fh.read(1 << 20):
                    total += len(chunk)
        os.write(w, str(total).encode())
        os._exit(0)
    os.close(w)
    pipes.append(r)
total = sum(int(os.read(r, 64)) for r in pipes)
for _ in range(readers):
    os.wait()
read_s = time.perf_counter() - t1
print(json.dumps({"started": started, "import_s": imported, "modules": len(sys.modules), "read_s": read_s,
                  "bytes": total, "files": len(files)}))
'''


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)
    to_python: list[float] = field(default_factory=list)
    import_s: list[float] = field(default_factory=list)
    read_s: list[float] = field(default_factory=list)
    mb_read: list[float] = field(default_factory=list)  # from the store (loop counter)
    start_small: list[float] = field(default_factory=list)
    start_big: list[float] = field(default_factory=list)
    jobs: int = 0
    hung: int = 0  # jobs that hung (a blocked squashfuse kept the step alive) and ran again
    stuck: set[int] = field(default_factory=set)  # squashfuse processes left blocked after this mode's jobs

    def mbps(self, data_bytes: int) -> float:
        return data_bytes / 1e6 / med(self.read_s)


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass(frozen=True)
class Images:
    small: str  # without /data (node path of the local store; the net store's path is derived)
    big: str    # with /data: the job's image
    small_bytes: int
    big_bytes: int
    tree_bytes: int
    tree_files: int
    data_bytes: int
    data_files: int
    squash_s: float


# ------------------------------------------------------------------------------------------- images

def write_data(root: Path, size_mb: int, file_kib: int, seed: int) -> tuple[int, int, list[str]]:
    """/data/dNNN/fNNNNN.bin: incompressible files of file_kib KiB adding up to size_mb MiB (seeded), 256 per
    directory; returns (files, bytes, the shuffled list of their paths in the image)."""
    rng = random.Random(seed)
    count = max(1, size_mb * 1024 // file_kib)
    names = []
    for i in range(count):
        d = root / "data" / f"d{i // 256:03d}"
        if i % 256 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:05d}.bin").write_bytes(rng.randbytes(file_kib * 1024))
        names.append(f"/data/d{i // 256:03d}/f{i:05d}.bin")
    rng.shuffle(names)
    return count, count * file_kib * 1024, names


def tree_size(root: Path) -> tuple[int, int]:
    files = total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            files += 1
            total += st.st_size
    return files, total


def build_images(args: argparse.Namespace, bench: Path, work: Path) -> Images:
    import training_image
    layer = training_image.build()
    need = 3 * 1024 ** 3 + args.size_mb * 1024 ** 2
    shm_ok = os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free > need
    tree_dir = Path(tempfile.mkdtemp(prefix="ck-inplace-tree-", dir="/dev/shm" if shm_ok else work))
    try:
        root = tree_dir / "rootfs"
        root.mkdir()
        started = time.perf_counter()
        subprocess.run(["tar", "-xzf", str(layer.path), "-C", str(root), "--exclude=./dev/*"], check=True)
        (root / "ck-bench").mkdir()
        (root / "ck-bench" / "job.py").write_text(JOB_PY)
        (root / "ck-bench" / "files.list").write_text("")
        files, size = tree_size(root)
        cs.log(f"training image tree: {files} files, {size / 1e6:.1f} MB in {time.perf_counter() - started:.1f} s")
        small = bench / "job-base.sqsh"
        took_small = cs.mksquashfs(root, small, STORE_OPTIONS)
        data_files, data_bytes, names = write_data(root, args.size_mb, args.file_kib, args.seed)
        (root / "ck-bench" / "files.list").write_text("".join(f"{n}\n" for n in names))
        big = bench / "job-data.sqsh"
        took = cs.mksquashfs(root, big, STORE_OPTIONS)
        cs.log(f"mksquashfs {STORE_OPTIONS}: {small.stat().st_size / 1e6:.1f} MB ({took_small:.1f} s), with /data "
               f"({data_files} files, {data_bytes / 1e6:.1f} MB) {big.stat().st_size / 1e6:.1f} MB ({took:.1f} s)")
        return Images(f"{cs.STORE}/{small.name}", f"{cs.STORE}/{big.name}", small.stat().st_size,
                      big.stat().st_size, size + data_bytes, files + data_files, data_bytes, data_files, took)
    finally:
        shutil.rmtree(tree_dir, ignore_errors=True)


# ----------------------------------------------------------------------------------------- net store

@dataclass
class DelayFs:
    """delayfs (built from DELAYFS_SRC) serving source at mountpoint, allow_other, read-only."""

    source: Path
    mountpoint: Path
    latency_us: int
    proc: subprocess.Popen | None = None
    log: Path | None = None

    def start(self, work: Path) -> None:
        binary = work / "delayfs"
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True, capture_output=True,
                               text=True).stdout.split()
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(binary), str(DELAYFS_SRC), *flags], check=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.log = work / "delayfs.log"
        self.proc = subprocess.Popen([str(binary), str(self.source), str(self.latency_us), str(self.mountpoint),
                                      "-f", "-o", "ro,allow_other,max_threads=32,fsname=delayfs"],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.monotonic() + 10
        while subprocess.run(["mountpoint", "-q", str(self.mountpoint)]).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"delayfs did not mount: {self.log.read_text()}")
            time.sleep(0.05)

    def readahead_kb(self) -> str:
        dev = os.stat(self.mountpoint).st_dev
        path = Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb")
        return path.read_text().strip() if path.exists() else "?"

    def stop(self) -> None:
        if self.proc is None:
            return
        subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)
            self.proc.kill()
            self.proc.wait(timeout=5)
        counts = self.log.read_text().strip().splitlines() if self.log and self.log.exists() else []
        cs.log(f"delayfs at exit: {counts[-1] if counts else 'no counts'}")
        self.proc = None


# --------------------------------------------------------------------------------------------- modes

def set_mode(node, store: cs.LoopFs, mode: Mode) -> None:
    """The pyxis line (slurmd restarted when it changes; it must load pyxis cleanly) and the reader link."""
    sfs.readahead(store).write_text(f"{READAHEAD_KB}\n")
    if node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf") != mode.pyxis_conf:
        cs.wait_idle(node)
        node.write("/opt/slurm/etc/plugstack.conf.d/pyxis.conf", mode.pyxis_conf)
        before = len(node.read("/var/log/slurmd.log"))
        node.restart_slurmd()
        fresh = node.read("/var/log/slurmd.log")[before:]
        if "pyxis: version v" not in fresh:
            raise RuntimeError(f"slurmd did not load pyxis with {mode.pyxis_conf.strip()!r}:\n{fresh[-3000:]}")
    if mode.ll:  # exactly the wrapper a node's squashfuse-reader writes (clusterkit_node/node/squashfuse_reader.py)
        node.write(LL_LINK, wrapper_text(LL_IN_NODE), 0o755)
    else:
        node.run(["rm", "-f", LL_LINK])


def prove_reader(node, mode: Mode, image: str) -> str:
    """A `sleep` job as the user: which squashfuse binary serves the image, with how many threads (or none)."""
    cs.wait_idle(node)
    job = subprocess.Popen(node.argv(["srun", "--quiet", f"--container-image={image}", "sh", "-c",
                                      "cat /ck-bench/job.py > /dev/null; sleep 4"], user=USER),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen, deadline = "", time.monotonic() + 3.5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.3)
        seen = node.run(["bash", "-c", f"""
            for p in $(pgrep squashfuse); do
                grep -qF -- {image} /proc/$p/cmdline 2>/dev/null || continue
                echo "$(readlink /proc/$p/exe) ($(ls /proc/$p/task | wc -l) threads):" \\
                     "$(tr '\\0' ' ' < /proc/$p/cmdline)"
            done 2>/dev/null"""], check=False).stdout.strip()
    _, err = job.communicate(timeout=120)
    if job.returncode != 0:
        raise RuntimeError(f"{mode.label}: sleep job failed: {err}")
    # The exe link reads from the reader's root, which the container's pivot_root may already have moved (it
    # runs in the container's mount namespace): "/local/libexec/..." or "/bin/squashfuse" happen; match the tail.
    want = LL_IN_NODE.split("/usr")[1] if mode.ll else "bin/squashfuse"
    if mode.in_place != bool(seen) or (seen and not seen.split(" ")[0].endswith(want)):
        raise RuntimeError(f"{mode.label}: expected {want if mode.in_place else 'no squashfuse'}, saw {seen!r}")
    return seen or "no squashfuse process"


# ---------------------------------------------------------------------------------------------- jobs

def stuck_readers() -> set[int]:
    """squashfuse processes with a thread blocked on a FUSE answer (request_wait_answer). enroot starts the
    reader inside the container's mount namespace, so its pivot_root makes the container's overlay the reader's
    own root: a path the reader itself opens (glibc reads /proc/sys/vm/overcommit_memory when a thread's malloc
    arena first shrinks) is looked up through its own mount, and when no other thread answers (at unmount) the
    process cannot exit. Counted after every job so that the report shows it."""
    out = subprocess.run(["ps", "-eLo", "pid=,stat=,wchan:32=,comm="], capture_output=True, text=True).stdout
    return {int(f[0]) for f in (line.split() for line in out.splitlines())
            if len(f) == 4 and f[3].startswith("squashfuse") and f[1].startswith("D") and "fuse" in f[2]}

def release_stuck(pids: set[int]) -> int:
    """Abort the FUSE connections of these blocked squashfuse processes (fusectl), so they and their job end."""
    conns = set()
    for pid in pids:
        mounts = []
        for task in Path(f"/proc/{pid}/task").glob("*"):  # the exited main thread's namespaces are gone
            try:
                mounts = (task / "mountinfo").read_text().splitlines()
                break
            except OSError:
                continue
        for line in mounts:
            fields = line.split(" - ")
            if len(fields) == 2 and fields[1].startswith("fuse.squashfuse"):
                major, minor = line.split()[2].split(":")
                conns.add(os.makedev(int(major), int(minor)))
    if not conns:
        return 0
    ctl = Path(tempfile.mkdtemp(prefix="ck-fusectl-"))
    try:
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(ctl)], check=True)
        for conn in conns:
            if (ctl / str(conn) / "abort").exists():
                (ctl / str(conn) / "abort").write_text("1\n")
    finally:
        subprocess.run(["umount", str(ctl)], capture_output=True)
        ctl.rmdir()
    return len(conns)


def timed(node, store: cs.LoopFs, mode: Mode, image: str, cmd: list[str],
          timeout: float = 900) -> tuple[float, float, int, str]:
    """One cold srun as the user: (epoch at launch, wall s, bytes read from the store, stdout); its mode checked."""
    cs.wait_idle(node)
    cs.drop_caches()
    marks = (sfs.log_count(node, "/var/log/slurmd.log", sfs.SQUASHFUSE_LOG + image),
             sfs.log_count(node, "/var/log/slurmd.log", sfs.EXTRACTION_LOG))
    before = store.sectors_read()
    launched, started = time.time(), time.perf_counter()
    proc = node.run(["srun", "--quiet", f"--container-image={image}", *cmd], user=USER, timeout=timeout,
                    check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode.label}: srun on {image} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}\n"
                           f"slurmd.log:\n{node.run(['tail', '-n', '30', '/var/log/slurmd.log']).stdout}")
    out = proc.stdout
    wall = time.perf_counter() - started
    cs.wait_idle(node)
    got = (sfs.log_count(node, "/var/log/slurmd.log", sfs.SQUASHFUSE_LOG + image) - marks[0],
           sfs.log_count(node, "/var/log/slurmd.log", sfs.EXTRACTION_LOG) - marks[1])
    if got != ((1, 0) if mode.in_place else (0, 1)):
        raise RuntimeError(f"{mode.label} job on {image}: (in-place starts, extractions) = {got}")
    return launched, wall, (store.sectors_read() - before) * 512, out.strip()


def run_round(node, store: cs.LoopFs, mode: Mode, prefix: str, images: Images, readers: int,
              module: str, s: Samples, tag: str) -> None:
    small, big = prefix + images.small[len(cs.STORE):], prefix + images.big[len(cs.STORE):]

    def job(image: str, cmd: list[str]) -> tuple[float, float, int, str]:
        """A job; one whose squashfuse blocked on its own mount and hung the job is released, counted and
        run again (a start gets 120 s, the whole job 900 s)."""
        for _ in range(3):
            before = stuck_readers()
            try:
                res = timed(node, store, mode, image, cmd, 120 if cmd == ["true"] else 900)
            except subprocess.TimeoutExpired:
                s.hung += 1
                cs.log(f"  {tag}: {shlex.join(cmd)} hung; released {release_stuck(stuck_readers() - before)} "
                       "blocked squashfuse mount(s); again")
                cs.wait_idle(node, timeout=600)
                continue
            s.jobs += 1
            s.stuck |= stuck_readers() - before
            return res
        raise RuntimeError(f"{tag}: {shlex.join(cmd)} hung three times")

    s.start_small.append(job(small, ["true"])[1])
    s.start_big.append(job(big, ["true"])[1])
    launched, wall, read, out = job(big, ["python3", "/ck-bench/job.py", str(readers), module])
    res = json.loads(out.splitlines()[-1])
    if res["bytes"] != images.data_bytes or res["files"] != images.data_files:
        raise RuntimeError(f"{tag}: the readers read {res['bytes']} bytes in {res['files']} files, expected "
                           f"{images.data_bytes} in {images.data_files}")
    s.wall.append(wall)
    s.to_python.append(res["started"] - launched)
    s.import_s.append(res["import_s"])
    s.read_s.append(res["read_s"])
    s.mb_read.append(read / 1e6)
    cs.log(f"  {tag}: start {s.start_small[-1]:.2f} / {s.start_big[-1]:.2f} s; job {wall:.2f} s (python at "
           f"{s.to_python[-1]:.2f} s, import {res['import_s']:.2f} s of {res['modules']} modules, read "
           f"{images.data_bytes / 1e6 / res['read_s']:.0f} MB/s), {read / 1e6:.0f} MB from the store")


# ---------------------------------------------------------------------------------------- cold reads

def _drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def _read_all(root: Path, readers: int, seed: int) -> tuple[float, int]:
    """``readers`` parallel `cat`s over /data's files under ``root`` (shuffled), cold: (seconds, bytes)."""
    files = sorted(str(p) for p in (root / "data").rglob("*") if p.is_file())
    random.Random(seed).shuffle(files)
    size = sum(os.path.getsize(f) for f in files)
    _drop_caches()
    start = time.perf_counter()
    subprocess.run(["xargs", "-0", "-P", str(readers), "-n", "64", "cat"], input="\0".join(files).encode(),
                   stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start, size


def cold_reads(images: Images, host_store: dict[str, Path], extracted_on: Path, ll: Path, readers: int,
               rounds: int, work: Path) -> dict[tuple[str, str], list[float]]:
    """The readers alone, both sides cold (page cache dropped after the mount or the extraction): /data of the big
    image read by ``readers`` parallel `cat`s from the tree extracted onto the node-local ext4 (what an extracted
    job reads), and through each squashfuse reading the store's .sqsh (on each store), run as enroot runs them
    (squashfuse_ll with ClusterKit's one malloc arena). Root, on the host: no enroot, no job around it.
    Returns MB/s per (store, reader)."""
    name = images.big[len(cs.STORE):].lstrip("/")
    extracted = extracted_on / "cold-extracted"
    cs.sh(["unsquashfs", "-f", "-q", "-no-progress", "-d", str(extracted), str(host_store["local"] / name)])
    mnt = work / "cold-mnt"
    mnt.mkdir(exist_ok=True)
    tuned = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
    readers_of = [("squashfuse 0.1.104", ["/usr/bin/squashfuse"], dict(os.environ)),
                  (SHIPPED, [str(ll)], tuned)]
    out: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        secs, size = _read_all(extracted, readers, r)
        out.setdefault(("node-local disk", "extracted"), []).append(size / 1e6 / secs)
        for store, directory in host_store.items():
            for label, argv, env in readers_of:
                proc = subprocess.Popen([*argv, "-f", str(directory / name), str(mnt)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                try:
                    deadline = time.monotonic() + 20
                    while subprocess.run(["mountpoint", "-q", str(mnt)]).returncode != 0:
                        if proc.poll() is not None or time.monotonic() > deadline:
                            said = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
                            raise RuntimeError(f"cold reads: {label} did not mount: {said}")
                        time.sleep(0.05)
                    secs, size = _read_all(mnt, readers, r)
                finally:
                    subprocess.run(["umount", str(mnt)], check=False)
                    proc.wait(timeout=30)
                out.setdefault((store, label), []).append(size / 1e6 / secs)
                cs.log(f"  cold read {r + 1}/{rounds} {store} {label}: {out[(store, label)][-1]:.0f} MB/s")
    shutil.rmtree(extracted, ignore_errors=True)
    return out


def cold_table(cold: dict[tuple[str, str], list[float]], readers: int) -> list[str]:
    base = med(cold[("node-local disk", "extracted")])
    lines = [f"Cold parallel reads, the reader alone ({readers} parallel `cat`s over /data, page cache dropped after "
             "the mount or the extraction; medians):", "",
             "| store | reader | read MB/s | extracted / reader |", "|---|---|---|---|"]
    for (store, label), values in cold.items():
        lines.append(f"| {store} | {label} | {med(values):.0f} | {ratio(base, med(values))} |")
    return lines


# -------------------------------------------------------------------------------------------- report

def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def table(results: dict[tuple[str, str], Samples], stores: list[str], modes: list[Mode], images: Images,
          readers: int) -> list[str]:
    lines = [
        "| store | mode | whole job s | job / extracted | read MB/s | extracted / read | import s "
        "| import / extracted | python started at s | MB read from store | start s, small | start s, big |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for store in stores:
        base = results.get((store, "extracted"))
        for mode in modes:
            s = results[(store, mode.label)]
            mbps = s.mbps(images.data_bytes)
            cols = [f"{med(s.wall):.2f}", ratio(med(s.wall), med(base.wall)) if base else "–", f"{mbps:.0f}",
                    ratio(base.mbps(images.data_bytes), mbps) if base else "–", f"{med(s.import_s):.2f}",
                    ratio(med(s.import_s), med(base.import_s)) if base else "–", f"{med(s.to_python):.2f}",
                    f"{med(s.mb_read):.0f}", f"{med(s.start_small):.2f}", f"{med(s.start_big):.2f}"]
            lines.append(f"| {store} | {mode.label} | " + " | ".join(cols) + " |")
    return lines


def goals(results: dict[tuple[str, str], Samples], stores: list[str], images: Images,
          cold: dict[tuple[str, str], list[float]]) -> list[str]:
    """The issue's goals for the shipped reader. The read goal compares the readers cold on both sides (the cold
    table): in the whole job an extracted image's reads come from the page cache its extraction just filled."""
    out = []
    for store in stores:
        base, ours = results.get((store, "extracted")), results.get((store, SHIPPED))
        if base is None or ours is None or (store, SHIPPED) not in cold:
            continue
        read = med(cold[("node-local disk", "extracted")]) / med(cold[(store, SHIPPED)])
        warm = base.mbps(images.data_bytes) / ours.mbps(images.data_bytes)
        job = med(ours.wall) / med(base.wall)
        spread = med(ours.start_big) - med(ours.start_small)
        out.append(f"Goal ({store} store, {SHIPPED}, the shipped default): parallel reads within {GOAL_READ_RATIO}x "
                   f"of extracted, both cold: {'MET' if read <= GOAL_READ_RATIO else 'NOT MET'} ({read:.2f}x; "
                   f"{warm:.2f}x against the whole job's page-cache reads after extraction); whole job <= "
                   f"{GOAL_JOB_RATIO}x: {'MET' if job <= GOAL_JOB_RATIO else 'NOT MET'} ({job:.2f}x); start "
                   f"constant in size (big - small <= {GOAL_START_SPREAD_S} s): "
                   f"{'MET' if spread <= GOAL_START_SPREAD_S else 'NOT MET'} ({spread:+.2f} s; extracted "
                   f"{med(base.start_big) - med(base.start_small):+.2f} s).")
    return out


def report(header: list[str], results: dict[tuple[str, str], Samples], stores: list[str], modes: list[Mode],
           images: Images, readers: int, cold: dict[tuple[str, str], list[float]]) -> None:
    print("\n\n".join([*header, "\n".join(table(results, stores, modes, images, readers)),
                       "\n".join(cold_table(cold, readers)), *goals(results, stores, images, cold)]))


# ---------------------------------------------------------------------------------------------- main

def squashfuse_ll_binary(given: str | None) -> Path:
    """The multi-threaded squashfuse_ll 0.6.2: --squashfuse-ll, else tests/real_runtime/squashfuse_build.py's
    (built now if needed), else its cache."""
    if given:
        return Path(given)
    build = REPO / "tests" / "real_runtime" / "squashfuse_build.py"
    if build.exists():
        proc = subprocess.run([sys.executable, str(build)], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return Path(proc.stdout.strip().splitlines()[-1])
        raise RuntimeError(f"squashfuse_build.py failed: {proc.stderr.strip()[-500:]}")
    cached = REPO / ".cache" / "real-runtime" / "squashfuse" / "squashfuse_ll"
    if cached.exists():
        return cached
    raise RuntimeError("no squashfuse_ll 0.6.2: pass --squashfuse-ll PATH")


def run(args: argparse.Namespace, work: Path, cleanup: list) -> int:
    import runtime_build
    from node_root import NodeRoot

    started_run = time.perf_counter()
    modes = [m for m in MODES if m.label in args.modes]
    load_start = Path("/proc/loadavg").read_text().split()[0]
    ll = squashfuse_ll_binary(args.squashfuse_ll)
    said = subprocess.run([str(ll), "--version"], capture_output=True, text=True)
    ll_version = next((line.split(" (c)")[0] for line in (said.stdout + said.stderr).splitlines()
                       if line.startswith("squashfuse ")), "version unknown")
    gen = runtime_build.GENERATIONS[GEN]
    cs.log(f"building/reusing real enroot + pyxis ({gen.key}); squashfuse_ll: {ll} ({ll_version})")
    stage = runtime_build.build(gen.key)
    stuck_before = stuck_readers()

    node = NodeRoot(work / "node", stage)
    store = cs.LoopFs(work / "store.ext4", node.fsx)
    scratch = cs.LoopFs(work / "vartmp.ext4", node.scratch / "vartmp")
    net = DelayFs(node.fsx / "bench", work / "netfs", args.net_latency_us)
    # Cleanup runs last-in first-out: unmount both file systems, stop the node (its namespace holds the net
    # store's mount too), then delayfs, then detach.
    cleanup += [store.detach, scratch.detach, net.stop, node.stop, store.unmount, scratch.unmount]
    tree_mb = 1400 + args.size_mb
    store.create(int(1.2 * tree_mb * 1_000_000) + 1_000_000_000)
    scratch.create(int(2.0 * tree_mb * 1_000_000) + 1_000_000_000)
    bench = node.fsx / "bench"
    bench.mkdir(mode=0o755)
    images = build_images(args, bench, work)
    tiny_tree = work / "tiny"
    cs.add_runtime_files(tiny_tree)
    cs.mksquashfs(tiny_tree, bench / "tiny.sqsh", STORE_OPTIONS)
    shutil.rmtree(tiny_tree)
    prefixes = {"local": cs.STORE}
    if "net" in args.stores:
        work.chmod(0o711)  # the user's jobs reach the mount through it (mkdtemp makes it 0700)
        net.start(work)  # before the node starts: its /tmp (the host's, bound in) then holds the mount
        prefixes["net"] = str(net.mountpoint)

    node.start()
    cs.configure_node(node)
    node.run(["install", "-D", "-m", "0755", str(ll), LL_IN_NODE])
    node.start_slurm()
    ver = cs.versions(node, gen)
    cs.log(ver)

    proofs, warm_hung = {}, 0
    for mode in modes:
        set_mode(node, store, mode)
        cs.wait_idle(node)
        before = stuck_readers()
        try:
            node.run(["srun", "--quiet", f"--container-image={cs.STORE}/tiny.sqsh", "true"], user=USER, timeout=120)
        except subprocess.TimeoutExpired:
            warm_hung += 1
            cs.log(f"{mode.label}: warm-up hung; released {release_stuck(stuck_readers() - before)} blocked mount(s)")
            cs.wait_idle(node, timeout=600)
        proofs[mode.label] = prove_reader(node, mode, images.big)
        cs.log(f"{mode.label}: {proofs[mode.label]}")

    results = {(st, m.label): Samples() for st in args.stores for m in modes}
    combos = [(st, m) for st in args.stores for m in modes]
    for r in range(args.rounds):
        for store_name, mode in sfs.rotate(combos, r):
            set_mode(node, store, mode)
            run_round(node, store, mode, prefixes[store_name], images, args.readers, args.module,
                      results[(store_name, mode.label)], f"round {r + 1}/{args.rounds} {store_name} {mode.label}")

    host_store = {"local": bench}
    if "net" in args.stores:
        host_store["net"] = Path(prefixes["net"])
    cold = cold_reads(images, host_store, node.scratch / "vartmp", ll, args.readers, args.rounds, work)
    net_ra = net.readahead_kb() if net.proc else "-"
    disk = " ".join(cs.sh(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", str(work)]).split())
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        f"The whole container job, extracted vs in place, real enroot + pyxis ({ver}); squashfuse_ll: {ll_version}.",
        f"Machine: {cs.machine()}; {now}; 1-min load average {load_start} at start, "
        f"{Path('/proc/loadavg').read_text().split()[0]} at end; run took "
        f"{(time.perf_counter() - started_run) / 60:.0f} min.",
        f"Images (`{STORE_OPTIONS}`): small = the training image (Debian bookworm, python3-torch 1.13; "
        f"{images.small_bytes / 1e6:.0f} MB .sqsh), big = the same + /data ({images.data_files} files of "
        f"{args.file_kib} KiB, incompressible, {images.data_bytes / 1e6:.0f} MB; {images.tree_files} files, "
        f"{images.tree_bytes / 1e6:.0f} MB in all; {images.big_bytes / 1e6:.0f} MB .sqsh). Jobs as {USER}, one "
        f"node, container_scope=job, page cache dropped before every job; medians of {args.rounds} round(s), "
        f"stores and modes rotated each round. Whole job = `srun --container-image=big.sqsh python3 job.py "
        f"{args.readers} {args.module}`: `import {args.module}`, then {args.readers} forked readers over the "
        f"shuffled /data; read MB/s = /data's bytes / the readers' time. Start = `srun --container-image=... true`.",
        f"Stores: local = ext4 on a loop device backed by {disk}, read-ahead {READAHEAD_KB} KiB; net = the same "
        f"files through delayfs, {args.net_latency_us} µs per read, open, lookup and readdir (FSx for Lustre SSD: "
        f"sub-millisecond P50 per file operation), FUSE read-ahead {net_ra} KiB.",
        "Readers, proven by a sleep job as the user: " + "; ".join(f"{m.label}: {proofs[m.label]}" for m in modes)
        + ".",
    ]
    stuck = [f"{st} {m}: {len(r.stuck)} left blocked after {r.jobs} finished jobs, {r.hung} jobs hung"
             for (st, m), r in results.items() if r.stuck or r.hung]
    header.append("squashfuse processes blocked on their own mount (they never exit; a hung job is released by "
                  "aborting its FUSE connection, then run again): " + ("; ".join(stuck) if stuck else "none")
                  + f"; warm-ups and proofs: {warm_hung} hung, "
                  f"{len(stuck_readers() - stuck_before - set().union(*(r.stuck for r in results.values())))} "
                  "left blocked.")
    report(header, results, args.stores, modes, images, args.readers, cold)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=640, help="MiB of /data in the job's image (default 640)")
    ap.add_argument("--file-kib", type=int, default=64, help="size of each /data file in KiB (default 64)")
    ap.add_argument("--readers", type=int, default=8, help="parallel readers in the job (default 8)")
    ap.add_argument("--module", default="torch", help="what the job imports first (default torch)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, stores and modes rotated each (default 3)")
    ap.add_argument("--stores", nargs="+", choices=list(STORES), default=list(STORES),
                    help="local: ext4 on a loop device; net: the same through delayfs (default: both)")
    ap.add_argument("--modes", nargs="+", choices=[m.label for m in MODES], default=[m.label for m in MODES],
                    metavar="NAME", help="modes: " + ", ".join(repr(m.label) for m in MODES) + " (default: all)")
    ap.add_argument("--net-latency-us", type=int, default=NET_LATENCY_US,
                    help=f"the net store's wait per request in µs (default {NET_LATENCY_US}: FSx for Lustre "
                         "SSD is sub-millisecond per file operation)")
    ap.add_argument("--squashfuse-ll", metavar="PATH",
                    help="the multi-threaded squashfuse_ll (default: tests/real_runtime/squashfuse_build.py's)")
    ap.add_argument("--quick", action="store_true", help="smoke check: 128 MiB of /data, 1 round")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workdir", default="/tmp",
                    help="where the store's and /var/tmp's backing files and the node root go (default /tmp; "
                         "must be under /tmp for the net store, which the node sees through the host's /tmp)")
    args = ap.parse_args(argv)
    if args.quick:
        args.size_mb, args.rounds = 128, 1
    if "extracted" not in args.modes:
        ap.error("the ratios need the extracted mode")
    if args.readers < 1 or args.size_mb < 1 or args.file_kib < 1 or args.rounds < 1:
        ap.error("--readers, --size-mb, --file-kib and --rounds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return cs.run_as_root("inplace_job.py", ("mksquashfs", "unsquashfs", "squashfuse", "mkfs.ext4", "losetup",
                          "unshare", "nsenter", "busybox", "slurmd", "slurmctld", "munged", "srun", "cc",
                          "pkg-config", "fusermount3", "tar"), "ck-inplace-job-", args, run)


if __name__ == "__main__":
    sys.exit(main())
