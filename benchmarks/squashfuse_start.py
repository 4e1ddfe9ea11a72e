#!/usr/bin/env python3
"""Container jobs from the image store: started by extraction (pyxis' default) or in place with squashfuse?
How long does a job take to start and to read part of its image, and how many bytes does it read from
the store? Measured with the REAL enroot 4.1.2 + pyxis 0.24.0 and Debian's Slurm.

For each image size (--sizes-mb, default 1 GB and 4 GB: the synthetic mix of squash_options.build_tree,
plus busybox-static and the job's file lists), the script builds one .sqsh per squash variant (--variants,
default all of VARIANTS: `-comp zstd -Xcompression-level 3` plus `-b 128K`, `-b 1M`, and each of those with
`-no-fragments`) with enroot's own mksquashfs invocation, into the store, /fsx/bench, of a
ParallelCluster-shaped node root (tests/real_runtime/node_root.py, real slurmctld/slurmd, enroot.conf as
ClusterKit's head node writes it, container_scope=job). Jobs name the .sqsh path, so ClusterKit's importer
(which resolves registry names to store files) is not involved and not written. Modes:

  * extraction: container_start.PYXIS_CONF, without use_squashfuse (pyxis' default; ClusterKit's line for
    pyxis < 0.24 or containers.pyxis.use_squashfuse false); per job `enroot create` (unsquashfs into
    /var/tmp), `enroot start`, `enroot remove`;
  * squashfuse: the same line + `use_squashfuse=1` (ClusterKit's default for pyxis >= 0.24); pyxis runs
    `enroot start <file>.sqsh`, which mounts the file with `squashfuse -f -o uid=U,gid=G` under a native
    overlayfs: nothing extracted;
  * squashfuse_ll: the same, with a node-local `squashfuse` wrapper earlier on slurmd's PATH (a tmpfs on
    /usr/local/sbin) that execs /usr/bin/squashfuse_ll. Debian's squashfuse_ll 0.1.105 rejects `-o uid=,gid=`
    (low-level FUSE has no such options), so the wrapper drops exactly `-o uid=0,gid=0`, a no-op for root
    jobs on an -all-root image, and passes anything else through: root jobs only (shown once).

Switching the pyxis line rewrites /opt/slurm/etc/plugstack.conf.d/pyxis.conf and restarts slurmd; the log
must show pyxis loaded again with no configuration error. Every job is checked to have run in its mode:
slurmd's log gains one "pyxis: starting container from squashfs: <file>" (squashfuse modes) or one
"pyxis: starting container: pyxis_..." (extraction), and the wrapper logs each call (squashfuse_ll only);
once per mode a `sleep` job shows the squashfuse process and its fuse mount (or their absence).

Jobs, for --rounds rounds, modes (--modes, default all) rotated each round and the images rotated within a mode:
  * start: `srun --container-image=/fsx/bench/<image>.sqsh true` (baseline: `srun true`, no container);
  * read 10 %, 25 %, 100 % (in the first --read-rounds rounds only: they take minutes, and what they read
    from the store is the same every time): the same with `sh -c 'xargs cat < /ck-bench/read-N.list | wc -c'`,
    busybox cat of a deterministic list of files: the tree's files shuffled with the seed, then taken
    greedily up to N % of the tree's bytes (spread over the tree, small and large files alike, read in that
    shuffled order). The job's output must equal the bytes selected.
squashfuse_ll runs the start and the 25 % job only; so does the unprivileged ckuser1, with squashfuse on the
first size's images (the node has a 0666 /dev/fuse like PC AMIs). Each job is preceded by
`sync; echo 3 > /proc/sys/vm/drop_caches` (cold: the first job of an image on a node) and by waiting for
the node to be idle. The store is an ext4 file system on a loop device, so its read counter
(/sys/block/loopN/stat, sectors read) gives the bytes each job reads from the store, read-ahead included.
That read-ahead decides much of what a partial read costs, so it is fixed: 128 KiB (Linux's default for a
disk; loop devices inherit their backing disk's, 2560 KiB on the machine this was written on), and a fourth
mode repeats squashfuse's start, 10 % and 25 % jobs at 2560 KiB. The node's /var/tmp, where extraction
writes, is a second ext4 on a loop device (see container_start.py for why). Reported: medians; MB read from
the store and as % of the .sqsh; a floor per partial read: the size of a .sqsh of only the files it reads
(same options), the least it could read; the mksquashfs time per variant (the CPU part of
`enroot import`; tree in /dev/shm).

What it does not measure: FSx for Lustre (network, its read-ahead and caching: the store is a local disk
here, so the bytes column counts far more than the seconds) or many nodes starting at once; warm-cache
starts; `enroot import` itself (pulling, layer unpacking); GPUs (none here). The image is synthetic
(see squash_options.build_tree); real jobs touch their image differently.

Run as root from the repo root (needs the real-runtime tier's Debian packages; builds enroot/pyxis via
tests/real_runtime/runtime_build.py, cached; free in --workdir: about 0.6x the sum of the sizes per variant
plus 1.5x the largest size). Two variants take about 25 minutes on 2 cores, the default four about 50.
--variants and --modes run a subset; --extraction-sizes-mb leaves extraction's slowest jobs out (it reads
the whole .sqsh whatever the variant):

    python3 benchmarks/squashfuse_start.py [--sizes-mb 1024 4096] [--rounds 3] [--read-rounds 1]
    python3 benchmarks/squashfuse_start.py --variants 128K "1M -no-fragments" --modes extraction squashfuse \
        --extraction-sizes-mb 1024
    python3 benchmarks/squashfuse_start.py --quick        # 64 MB and 256 MB images, 1 round
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import container_start as cs  # noqa: E402  (also puts tests/real_runtime on sys.path)
import runtime_build  # noqa: E402
import squash_options  # noqa: E402
from node_root import NodeRoot  # noqa: E402

GEN = "gen4"
SQUASH_BASE = "-comp zstd -Xcompression-level 3"  # enroot's zstd line, as ClusterKit's store writes it
# Squash variants: label -> the mksquashfs options after SQUASH_BASE.
VARIANTS: dict[str, str] = {
    "128K": "-b 128K",
    "1M": "-b 1M",
    "128K -no-fragments": "-b 128K -no-fragments",
    "1M -no-fragments": "-b 1M -no-fragments",
}
READ_PCTS = (10, 25, 100)
JOBS = ("start", *(f"read{p}" for p in READ_PCTS))
LIST_DIR = "ck-bench"  # in the image: the jobs' file lists
UNPRIVILEGED = "ckuser1"
PYXIS_CONF = cs.PYXIS_CONF
PYXIS_SQUASHFUSE = cs.PYXIS_CONF.rstrip("\n") + " use_squashfuse=1\n"
GOAL_START_S = 0.5
GOAL_READ_PCT, GOAL_READ_OF = 25, 35  # a job touching 25 % of the image reads <= 35 % of the .sqsh
SHORT_JOBS = ("start", f"read{GOAL_READ_PCT}")  # squashfuse_ll and the unprivileged user: the goals' jobs
# The store's read-ahead (read_ahead_kb of its loop device): Linux's default for a disk, in every mode; one
# squashfuse mode repeats the partial reads with a large one (what this machine's loop devices come with).
READAHEAD_KB, BIG_READAHEAD_KB = 128, 2560
SQUASHFUSE_LOG = "pyxis: starting container from squashfs: "
EXTRACTION_LOG = "pyxis: starting container: pyxis_"
# squashfuse_ll in place of squashfuse: earlier on slurmd's PATH (node_root.PATH) than /usr/bin.
WRAPPER_DIR = "/usr/local/sbin"
WRAPPER_CALLS = "/run/ck-squashfuse-ll.calls"
WRAPPER = f"""#!/bin/bash
# enroot runs `squashfuse -f -o uid=U,gid=G IMAGE DIR`. Debian's squashfuse_ll 0.1.105 has no uid=/gid=
# options; for root on an -all-root image they change nothing, so drop exactly those. Others pass through.
echo "$*" >> {WRAPPER_CALLS}
if [ "$1 $2 $3" = "-f -o uid=0,gid=0" ]; then shift 3; exec /usr/bin/squashfuse_ll -f "$@"; fi
exec /usr/bin/squashfuse_ll "$@"
"""


@dataclass(frozen=True)
class Mode:
    label: str
    squashfuse: bool
    ll: bool
    readahead_kb: int  # the store's
    jobs: tuple[str, ...]
    note: str

    @property
    def pyxis_conf(self) -> str:
        return PYXIS_SQUASHFUSE if self.squashfuse else PYXIS_CONF


MODES = (
    Mode("extraction", False, False, READAHEAD_KB, JOBS, "pyxis default: enroot create = unsquashfs per job"),
    Mode("squashfuse", True, False, READAHEAD_KB, JOBS, "use_squashfuse=1: enroot start <file>.sqsh"),
    Mode("squashfuse_ll", True, True, READAHEAD_KB, SHORT_JOBS, "use_squashfuse=1, squashfuse_ll via a wrapper"),
    Mode(f"squashfuse, RA {BIG_READAHEAD_KB}K", True, False, BIG_READAHEAD_KB, JOBS[:3],
         f"use_squashfuse=1, the store's read-ahead at {BIG_READAHEAD_KB} KiB"),
)


@dataclass(frozen=True)
class ReadSet:
    pct: int
    files: int
    bytes: int

    @property
    def list_path(self) -> str:
        return f"/{LIST_DIR}/read-{self.pct}.list"


@dataclass(frozen=True)
class Image:
    size_mb: int
    variant: str  # a VARIANTS label
    sqsh_bytes: int
    mksquashfs_s: float

    @property
    def path(self) -> str:
        return store_path(self.size_mb, self.variant)

    @property
    def options(self) -> str:
        return squash_opts(self.variant)


@dataclass(frozen=True)
class Tree:
    size_mb: int
    files: int
    bytes: int
    reads: dict[int, ReadSet]
    floors: dict[tuple[int, str], int]  # (pct, variant): the selected files alone, squashed (100 %: the image)


@dataclass
class Result:
    seconds: list[float] = field(default_factory=list)
    bytes_read: list[int] = field(default_factory=list)


def store_path(size_mb: int, variant: str) -> str:
    return f"{cs.STORE}/img-{size_mb}mb-{'-'.join(variant.replace('-', ' ').split())}.sqsh"


def squash_opts(variant: str) -> str:
    return f"{SQUASH_BASE} {VARIANTS[variant]}"


def job_cmd(job: str) -> list[str]:
    if job == "start":
        return ["true"]
    return ["sh", "-c", f"xargs cat < /{LIST_DIR}/read-{job[4:]}.list | wc -c"]


# ------------------------------------------------------------------------------------------- images

def choose_reads(tree: Path, seed: int) -> dict[int, ReadSet]:
    """Write /ck-bench/read-N.list into the tree: its files shuffled with the seed, taken greedily while
    they fit in N % of the tree's bytes (100 %: every file)."""
    files = sorted((str(p.relative_to(tree)), p.stat().st_size) for p in tree.rglob("*") if p.is_file())
    total = sum(size for _, size in files)
    random.Random(seed).shuffle(files)
    (tree / LIST_DIR).mkdir()
    reads = {}
    for pct in READ_PCTS:
        target, picked, used = total * pct // 100, [], 0
        for rel, size in files:
            if used + size <= target:
                picked.append(rel)
                used += size
        (tree / LIST_DIR / f"read-{pct}.list").write_text("".join(f"/{rel}\n" for rel in picked))
        reads[pct] = ReadSet(pct, len(picked), used)
    return reads


def selection_floor(root: Path, reads: ReadSet, variant: str) -> int:
    """What the selected files alone squash to (their own metadata and fragments): the least a job reading
    exactly them could read from the store."""
    sel = root.parent / "selection"
    for line in (root / reads.list_path[1:]).read_text().split():
        (sel / line[1:]).parent.mkdir(parents=True, exist_ok=True)
        os.link(root / line[1:], sel / line[1:])
    out = root.parent / "selection.sqsh"
    cs.mksquashfs(sel, out, squash_opts(variant))
    size = out.stat().st_size
    shutil.rmtree(sel)
    out.unlink()
    return size


def build_images(size_mb: int, variants: list[str], seed: int, bench: Path,
                 work: Path) -> tuple[Tree, list[Image]]:
    """The tree (in /dev/shm when it has room: only mksquashfs reads it), one .sqsh per variant, and
    the floor of each partial read."""
    shm_ok = os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free > 2 * size_mb * 1_000_000
    tree_dir = Path(tempfile.mkdtemp(prefix="ck-sqf-tree-", dir="/dev/shm" if shm_ok else work))
    try:
        root = tree_dir / "rootfs"
        started = time.perf_counter()
        info = squash_options.build_tree(root, size_mb, seed)
        reads = choose_reads(root, seed)
        cs.add_runtime_files(root)
        for applet in ("xargs", "wc"):
            (root / "bin" / applet).symlink_to("busybox")
        cs.log(f"{size_mb} MB tree: {info['files']} files, {info['bytes'] / 1e6:.1f} MB in "
               f"{time.perf_counter() - started:.1f} s; reads " +
               ", ".join(f"{r.pct} %: {r.files} files {r.bytes / 1e6:.1f} MB" for r in reads.values()))
        images, floors = [], {}
        for variant in variants:
            out = bench / Path(store_path(size_mb, variant)).name
            took = cs.mksquashfs(root, out, squash_opts(variant))
            images.append(Image(size_mb, variant, out.stat().st_size, took))
            cs.log(f"mksquashfs {squash_opts(variant)}: {out.stat().st_size / 1e6:.1f} MB in {took:.1f} s")
            for pct, selected in reads.items():
                floors[(pct, variant)] = (out.stat().st_size if pct == 100
                                          else selection_floor(root, selected, variant))
        return Tree(size_mb, info["files"], info["bytes"], reads, floors), images
    finally:
        shutil.rmtree(tree_dir, ignore_errors=True)


# --------------------------------------------------------------------------------------------- modes

def log_count(node: NodeRoot, path: str, needle: str) -> int:
    return int(node.run(["grep", "-c", "-F", "--", needle, path], check=False).stdout.strip() or 0)


def readahead(store: cs.LoopFs) -> Path:
    return Path("/sys/block") / Path(store.device).name / "queue" / "read_ahead_kb"


def set_mode(node: NodeRoot, store: cs.LoopFs, mode: Mode) -> None:
    """The pyxis line (slurmd restarted if it changes, and must load pyxis cleanly), the wrapper and the
    store's read-ahead (read when squashfuse or unsquashfs opens the .sqsh, so it applies to the next job)."""
    readahead(store).write_text(f"{mode.readahead_kb}\n")
    if node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf") != mode.pyxis_conf:
        cs.wait_idle(node)
        node.write("/opt/slurm/etc/plugstack.conf.d/pyxis.conf", mode.pyxis_conf)
        before = len(node.read("/var/log/slurmd.log"))
        node.restart_slurmd()
        fresh = node.read("/var/log/slurmd.log")[before:]
        bad = [line for line in fresh.splitlines() if "pyxis" in line and
               any(w in line for w in ("invalid", "unknown configuration", "failed to parse"))]
        if "pyxis: version v" not in fresh or bad:
            raise RuntimeError(f"slurmd did not load pyxis with {mode.pyxis_conf.strip()!r}:\n{fresh[-3000:]}")
    wrapped = node.run(["mountpoint", "-q", WRAPPER_DIR], check=False).returncode == 0
    if mode.ll and not wrapped:
        node.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "ck-squashfuse-ll", WRAPPER_DIR])
        node.write(f"{WRAPPER_DIR}/squashfuse", WRAPPER, 0o755)
    elif wrapped and not mode.ll:
        node.run(["umount", WRAPPER_DIR])


@dataclass(frozen=True)
class Marks:
    """What slurmd's log and the wrapper have recorded so far, to check each job's mode."""

    squashfs: int
    extracted: int
    ll_calls: int

    @classmethod
    def now(cls, node: NodeRoot, image: str) -> "Marks":
        return cls(log_count(node, "/var/log/slurmd.log", SQUASHFUSE_LOG + image),
                   log_count(node, "/var/log/slurmd.log", EXTRACTION_LOG),
                   log_count(node, WRAPPER_CALLS, image))


def check_mode(mode: Mode, before: Marks, after: Marks, image: str) -> None:
    got = (after.squashfs - before.squashfs, after.extracted - before.extracted, after.ll_calls - before.ll_calls)
    want = (1, 0, 1 if mode.ll else 0) if mode.squashfuse else (0, 1, 0)
    if got != want:
        raise RuntimeError(f"{mode.label} job on {image}: (squashfs starts, extractions, squashfuse_ll calls) "
                           f"= {got}, expected {want}")


def prove_mode(node: NodeRoot, mode: Mode, image: str) -> str:
    """A `sleep` job: the squashfuse process serving the image and its fuse mount, or none."""
    cs.wait_idle(node)
    job = subprocess.Popen(node.argv(["srun", "--quiet", f"--container-image={image}", "sleep", "4"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen, deadline = "", time.monotonic() + 3.5
    while "type fuse" not in seen and time.monotonic() < deadline:
        seen = node.run(["bash", "-c", f"""
            for p in $(pgrep squashfuse); do
                grep -qF -- {image} /proc/$p/cmdline 2>/dev/null || continue
                echo "process $(cat /proc/$p/comm): $(tr '\\0' ' ' < /proc/$p/cmdline)"
                awk '$3 ~ /^fuse/ {{print "mount", $2, "type", $3}}' /proc/$p/mounts
            done 2>/dev/null"""], check=False).stdout.strip()
        time.sleep(0.1)
    _, err = job.communicate(timeout=120)
    if job.returncode != 0:
        raise RuntimeError(f"{mode.label}: sleep job failed: {err}")
    if bool(seen) != mode.squashfuse or (seen and ("squashfuse_ll" in seen) != mode.ll):
        raise RuntimeError(f"{mode.label}: unexpected processes during a sleep job: {seen or 'no squashfuse'}")
    return "; ".join(seen.splitlines()) if seen else "no squashfuse process during a sleep job"


def ll_as_user(node: NodeRoot, image: str) -> str:
    """squashfuse_ll for an unprivileged job (expected to fail: no uid=/gid= options)."""
    cs.wait_idle(node)
    proc = node.run(["srun", "--quiet", f"--container-image={image}", "true"], user=UNPRIVILEGED, check=False,
                    timeout=300)
    if proc.returncode == 0:
        return f"as {UNPRIVILEGED}: starts"
    why = [line.strip() for line in proc.stderr.splitlines() if "fuse" in line or "Failed" in line]
    return f"as {UNPRIVILEGED}: fails ({' | '.join(why[:3]) or proc.stderr.strip()[-200:]})"


# ---------------------------------------------------------------------------------------------- jobs

def timed_job(node: NodeRoot, store: cs.LoopFs, user: str | None, image: str | None,
              job: str) -> tuple[float, int, str]:
    """One cold srun (caches dropped first): wall seconds, bytes read from the store, the job's stdout."""
    cs.wait_idle(node)
    cs.drop_caches()
    before = store.sectors_read()
    cmd = ["srun", "--quiet", *([f"--container-image={image}"] if image else []), *job_cmd(job)]
    started = time.perf_counter()
    out = node.run(cmd, user=user, timeout=1800).stdout
    elapsed = time.perf_counter() - started
    cs.wait_idle(node)
    return elapsed, (store.sectors_read() - before) * 512, out.strip()


def run_job(node: NodeRoot, store: cs.LoopFs, mode: Mode, image: Image, tree: Tree, job: str,
            user: str | None = None) -> tuple[float, int]:
    before = Marks.now(node, image.path)
    seconds, read, out = timed_job(node, store, user, image.path, job)
    check_mode(mode, before, Marks.now(node, image.path), image.path)
    if job != "start" and out != str(tree.reads[int(job[4:])].bytes):
        raise RuntimeError(f"{job} on {image.path} printed {out!r}, expected {tree.reads[int(job[4:])].bytes}")
    cs.log(f"  {mode.label} {image.size_mb} MB {image.variant} {job}{' as ' + user if user else ''}: "
           f"{seconds:.2f} s, {read / 1e6:.1f} MB read")
    return seconds, read


def jobs_in_round(mode: Mode, r: int, read_rounds: int) -> tuple[str, ...]:
    return mode.jobs if r < read_rounds else ("start",)


def rotate(items: tuple | list, r: int) -> list:
    items = list(items)
    return items[r % len(items):] + items[:r % len(items)]


# -------------------------------------------------------------------------------------------- report

def mb_pct(read: float, image: Image) -> str:
    return f"{read / 1e6:.1f} ({100 * read / image.sqsh_bytes:.1f} %)"


def cells(res: Result | None, image: Image) -> list[str]:
    if res is None:
        return ["–", "–"]
    return [f"{cs.med(res.seconds):.2f}", mb_pct(statistics.median(res.bytes_read), image)]


Results = dict[tuple[str, str, str], Result]  # (mode, image path, job)


def report(header: list[str], modes: list[Mode], trees: list[Tree], images: list[Image], results: Results,
           user_results: dict[tuple[Image, str], Result], plain: dict[str, list[float]]) -> None:
    print("\n\n".join(header))  # one paragraph each in markdown
    print()
    print("| image | mksquashfs options | files | tree MB | .sqsh MB | .sqsh / tree | mksquashfs s (import CPU) |")
    print("|---|---|---|---|---|---|---|")
    for img in images:
        tree = next(t for t in trees if t.size_mb == img.size_mb)
        print(f"| {img.size_mb} MB | `{img.options}` | {tree.files} | {tree.bytes / 1e6:.1f} "
              f"| {img.sqsh_bytes / 1e6:.1f} | {img.sqsh_bytes / tree.bytes:.3f} | {img.mksquashfs_s:.1f} |")
    print()
    print("Files each read job cats (the same list for every variant): " + "; ".join(
        f"{t.size_mb} MB image: " + ", ".join(f"{r.pct} % = {r.files} files, {r.bytes / 1e6:.1f} MB"
                                              for r in t.reads.values()) for t in trees) + ".")
    print()
    print("Baseline `srun true` (no container), median per mode: " +
          ", ".join(f"{m.label} {cs.med(plain[m.label]):.3f} s" for m in modes) + ".")
    for tree in trees:
        print()
        print(f"**{tree.size_mb} MB image** (as root; s = median job wall time; MB = median read from the store, "
              "% of the .sqsh; floor = the .sqsh of only the files the job reads)")
        print()
        print("| variant | mode | start s | start MB | 10 % job s | 10 % MB | 25 % job s | 25 % MB "
              "| 100 % job s | 100 % MB |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for img in (i for i in images if i.size_mb == tree.size_mb):
            for mode in modes:
                row = [c for job in JOBS for c in cells(results.get((mode.label, img.path, job)), img)]
                print(f"| {img.variant} | {mode.label} | " + " | ".join(row) + " |")
            floors = [mb_pct(tree.floors[(p, img.variant)], img) for p in READ_PCTS]
            print(f"| {img.variant} | floor: the files alone, squashed | – | – | – | "
                  + " | – | ".join(floors) + " |")
    print()
    parts = []
    for (img, job), res in user_results.items():
        seconds, mb = cells(res, img)
        parts.append(f"{img.size_mb} MB {img.variant} {job}: {seconds} s, MB read {mb}")
    if parts:
        print(f"As {UNPRIVILEGED} (unprivileged), squashfuse: {'; '.join(parts)}.")
        print()
    if any(m.label == "squashfuse" for m in modes):
        goals(trees, images, results)


def goals(trees: list[Tree], images: list[Image], results: Results) -> None:
    def share(img: Image, pct: int) -> float:
        """Median bytes a squashfuse job reading pct % read from the store, as % of the .sqsh."""
        return 100 * statistics.median(results[("squashfuse", img.path, f"read{pct}")].bytes_read) / img.sqsh_bytes

    starts = {img: cs.med(results[("squashfuse", img.path, "start")].seconds) for img in images}
    ok = all(s <= GOAL_START_S for s in starts.values())
    lines = [f"Goal: squashfuse start <= {GOAL_START_S} s at every size: {'MET' if ok else 'NOT MET'} ("
             + ", ".join(f"{i.size_mb} MB {i.variant} {s:.2f} s" for i, s in starts.items()) + ")."]
    for variant in dict.fromkeys(img.variant for img in images):
        parts, ok = [], True
        for img in (i for i in images if i.variant == variant):
            tree = next(t for t in trees if t.size_mb == img.size_mb)
            ok &= share(img, GOAL_READ_PCT) <= GOAL_READ_OF
            parts.append(f"{img.size_mb} MB: {share(img, GOAL_READ_PCT):.1f} % of the .sqsh for "
                         f"{100 * tree.reads[GOAL_READ_PCT].bytes / tree.bytes:.1f} % of the bytes, floor "
                         f"{100 * tree.floors[(GOAL_READ_PCT, variant)] / img.sqsh_bytes:.1f} %")
        lines.append(f"Goal: {GOAL_READ_PCT} % job reads <= {GOAL_READ_OF} % of the .sqsh with squashfuse, "
                     f"{variant}: {'MET' if ok else 'NOT MET'} ({'; '.join(parts)}).")
    lines.append("Bytes read from the store per job, as % of the .sqsh (medians): extraction always reads it all; "
                 "squashfuse reads " + "; ".join(f"{img.size_mb} MB {img.variant}: " + ", ".join(
                     f"{p} % -> {share(img, p):.1f} %" for p in READ_PCTS) for img in images) + ".")
    print("\n\n".join(lines))


# ---------------------------------------------------------------------------------------------- main

def runs_at(mode: Mode, size_mb: int, extraction_sizes_mb: list[int]) -> bool:
    """Whether mode's jobs run on the images of this size (--extraction-sizes-mb limits extraction)."""
    return mode.squashfuse or size_mb in extraction_sizes_mb


def run(args: argparse.Namespace, work: Path, cleanup: list) -> int:
    started_run = time.perf_counter()
    modes = [m for m in MODES if m.label in args.modes]
    gen = runtime_build.GENERATIONS[GEN]
    load_start = Path("/proc/loadavg").read_text().split()[0]
    cs.log(f"building/reusing real enroot + pyxis ({gen.key}) ...")
    stage = runtime_build.build(gen.key)

    node = NodeRoot(work / "node", stage)
    store = cs.LoopFs(work / "store.ext4", node.fsx)
    scratch = cs.LoopFs(work / "vartmp.ext4", node.scratch / "vartmp")
    cleanup += [store.detach, scratch.detach, node.stop, store.unmount, scratch.unmount]
    store.create(int(0.6 * len(args.variants) * sum(args.sizes_mb) * 1_000_000) + 1_000_000_000)
    came_with_kb = readahead(store).read_text().strip()
    scratch.create(int(1.5 * max(args.sizes_mb) * 1_000_000) + 1_000_000_000)
    bench = node.fsx / "bench"
    bench.mkdir(mode=0o755)
    trees, images = [], []
    for size in args.sizes_mb:
        tree, imgs = build_images(size, args.variants, args.seed, bench, work)
        trees.append(tree)
        images += imgs
    tiny_tree = work / "tiny"
    cs.add_runtime_files(tiny_tree)
    tiny = f"{cs.STORE}/tiny.sqsh"
    cs.mksquashfs(tiny_tree, bench / "tiny.sqsh", squash_opts(args.variants[0]))

    node.start()
    cs.configure_node(node)
    node.start_slurm()
    ver = cs.versions(node, gen)
    cs.log(ver)

    proofs: dict[str, str] = {}
    for mode in modes:  # the mode of every job is checked later too; this shows the processes once
        set_mode(node, store, mode)
        for user in (None,) if mode.ll else (None, UNPRIVILEGED):  # warm-up: first job of the mode, per user
            cs.wait_idle(node)
            node.run(["srun", "--quiet", f"--container-image={tiny}", "true"], user=user, timeout=300)
        proofs[mode.label] = prove_mode(node, mode, tiny)
        if mode.ll:
            proofs[mode.label] += "; " + ll_as_user(node, tiny)
        cs.log(f"{mode.label}: {proofs[mode.label]}")

    tree_of = {t.size_mb: t for t in trees}
    results: Results = {}
    user_results: dict[tuple[Image, str], Result] = {}
    plain: dict[str, list[float]] = {m.label: [] for m in modes}
    for r in range(args.rounds):
        for mode in rotate(modes, r):
            set_mode(node, store, mode)
            plain[mode.label].append(timed_job(node, store, None, None, "start")[0])
            cs.log(f"round {r + 1}/{args.rounds} {mode.label}: srun true {plain[mode.label][-1]:.3f} s")
            for img in (i for i in rotate(images, r) if runs_at(mode, i.size_mb, args.extraction_sizes_mb)):
                for job in jobs_in_round(mode, r, args.read_rounds):
                    res = results.setdefault((mode.label, img.path, job), Result())
                    seconds, read = run_job(node, store, mode, img, tree_of[img.size_mb], job)
                    res.seconds.append(seconds)
                    res.bytes_read.append(read)
            if mode.label != "squashfuse":
                continue
            for img in (i for i in images if i.size_mb == args.sizes_mb[0]):  # the unprivileged user, once
                for job in SHORT_JOBS if r < args.read_rounds else ("start",):
                    res = user_results.setdefault((img, job), Result())
                    seconds, read = run_job(node, store, mode, img, tree_of[img.size_mb], job, UNPRIVILEGED)
                    res.seconds.append(seconds)
                    res.bytes_read.append(read)

    disk = " ".join(cs.sh(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", str(work)]).split())
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        f"Container jobs from the store, extraction vs squashfuse, real enroot + pyxis ({ver}).",
        f"Machine: {cs.machine()}; {now}; 1-min load average {load_start} at start, "
        f"{Path('/proc/loadavg').read_text().split()[0]} at end; run took "
        f"{(time.perf_counter() - started_run) / 60:.0f} min.",
        f"Images: synthetic trees (squash_options.build_tree, seed {args.seed}) + busybox-static + file lists; "
        f"one node, container_scope=job; store (/fsx) and /var/tmp: ext4 on loop devices backed by files on "
        f"{disk}; page cache dropped before every job; starts: medians of {args.rounds} rounds, read jobs: "
        f"{min(args.read_rounds, args.rounds)} round(s); modes rotated each round, images within a mode; "
        f"extraction at {', '.join(f'{s} MB' for s in args.extraction_sizes_mb)}; "
        f"– = not run; the store's read-ahead {READAHEAD_KB} KiB"
        + (" except in the RA rows" if any(m.readahead_kb != READAHEAD_KB for m in modes) else "")
        + f" (its loop device came with {came_with_kb} KiB).",
        "Modes, proven: " + "; ".join(f"{m.label} ({m.note}): {proofs[m.label]}" for m in modes) + ".",
    ]
    report(header, modes, trees, images, results, user_results, plain)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[1024, 4096],
                    help="image tree sizes (default 1024 4096)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of start jobs, modes and images rotated each (default 3)")
    ap.add_argument("--read-rounds", type=int, default=1,
                    help="how many of those rounds also run the read jobs (default 1: they take minutes)")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS), metavar="LABEL",
                    help=f"squash variants, each `{SQUASH_BASE}` + its options: "
                         + "; ".join(f"{k!r} = {v}" for k, v in VARIANTS.items()) + " (default: all)")
    ap.add_argument("--modes", nargs="+", choices=[m.label for m in MODES], default=[m.label for m in MODES],
                    metavar="NAME", help="modes to run: " + ", ".join(repr(m.label) for m in MODES)
                                         + " (default: all)")
    ap.add_argument("--extraction-sizes-mb", type=int, nargs="+", metavar="MB",
                    help="sizes the extraction mode runs at (default: every --sizes-mb; it reads the whole .sqsh "
                         "whatever the variant, so its slowest jobs can be left out)")
    ap.add_argument("--quick", action="store_true", help="smoke check: 64 MB and 256 MB images, 1 round")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workdir", default="/tmp",
                    help="where the store's and /var/tmp's backing files and the node root go: a local disk "
                         "with about 0.6x the sum of the sizes per variant + 1.5x the largest free (default /tmp)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes_mb, args.rounds, args.read_rounds = [64, 256], 1, 1
    if args.extraction_sizes_mb is None:
        args.extraction_sizes_mb = args.sizes_mb
    return cs.run_as_root("squashfuse_start.py", ("mksquashfs", "unsquashfs", "squashfuse", "squashfuse_ll",
                          "mkfs.ext4", "losetup", "unshare", "nsenter", "busybox", "slurmd", "slurmctld", "munged",
                          "srun"), "ck-squashfuse-bench-", args, run)


if __name__ == "__main__":
    sys.exit(main())
