#!/usr/bin/env python3
"""Which ENROOT_SQUASH_OPTIONS should the image store use? Measure, on this machine.

Builds a deterministic synthetic root filesystem (seeded PRNG; text-like files, library-like binaries,
already-compressed blobs, many small files, some duplicates), then for several rounds, rotating the order
of the option sets each round, times `mksquashfs` (with enroot's `-all-root`) and the read-back that
`enroot create` does (`unsquashfs -d`), and prints a markdown table of medians.

What it does not measure: storage throughput. By default everything lives in /dev/shm, so the times
are the CPU cost of compressing and of decompressing + copying the tree; on FSx the smaller image also
means proportionally fewer bytes read per node, which this does not show. Nor does it use real container
layers: the tree is synthetic, its mix chosen to resemble a CUDA/PyTorch image (about 2x with zstd).

    python3 benchmarks/squash_options.py [--size-mb 300] [--rounds 3] [--workdir DIR] [--seed 7]
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPTION_SETS = [
    ("-comp lzo -noD", "enroot default"),
    ("-noI -noD -noF -noX -no-duplicates", "no compression (pyxis wiki / PC sample)"),
    ("-comp zstd -Xcompression-level 3 -b 1M", "ClusterKit default until 2026-12-01"),
    ("-comp zstd -Xcompression-level 3 -b 128K -no-fragments", "ClusterKit default (squashfuse_start.py)"),
    ("-comp lz4", ""),
]

WORDS = ("the of tensor cuda kernel stream device float int void return const struct static inline "
         "nccl comm rank size buffer error status init free malloc launch grid block thread sync "
         "import def class self torch numpy module forward backward grad optimizer param data "
         "license copyright permission software warranty without including limitation").split()


def corpus(rng: random.Random, size: int) -> bytes:
    """Text with source-code-like statistics (compresses ~3-4x, like headers, .py and docs)."""
    out, total = [], 0
    while total < size:
        line = " ".join(rng.choices(WORDS, k=rng.randint(3, 14)))
        line = ("    " * rng.randint(0, 3)) + line + rng.choice([";", ":", "", " {", "}", ","]) + "\n"
        out.append(line)
        total += len(line)
    return "".join(out).encode()[:size]


def library_like(rng: random.Random, size: int, text: bytes) -> bytes:
    """Bytes resembling a shared library: incompressible code-ish runs, zero padding, symbol tables."""
    parts, total = [], 0
    while total < size:
        kind = rng.random()
        n = rng.randint(2_000, 40_000)
        if kind < 0.55:
            chunk = rng.randbytes(n)
        elif kind < 0.75:
            chunk = b"\0" * n
        elif kind < 0.9:  # relocation/symbol records: small varying ints in a fixed layout
            chunk = b"".join(rng.randint(0, 4096).to_bytes(4, "little") + b"\x00\x00\x12\x00" +
                             rng.randint(0, 1 << 20).to_bytes(8, "little") for _ in range(n // 16))
        else:  # mangled names / strings
            start = rng.randrange(0, len(text) - n)
            chunk = b"_ZN" + text[start:start + n].replace(b" ", b"_")
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)[:size]


def build_tree(root: Path, size_mb: int, seed: int) -> dict:
    """Deterministic tree of about size_mb MB; returns counts and a content fingerprint."""
    rng = random.Random(seed)
    target = size_mb * 1_000_000
    text = corpus(rng, 8_000_000)
    budget = {"text": 0.30, "lib": 0.45, "blob": 0.10, "small": 0.10, "dup": 0.05}
    files: list[tuple[str, bytes]] = []

    def add(rel: str, data: bytes) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files.append((rel, data))

    used = 0
    i = 0
    while used < budget["text"] * target:
        n = max(64, min(int(rng.lognormvariate(10.5, 1.2)), 4_000_000,
                        int(budget["text"] * target) - used))
        start = rng.randrange(0, len(text) - n)
        add(f"usr/include/pkg{i % 40}/file{i}.h", text[start:start + n])
        used, i = used + n, i + 1
    used = 0
    while used < budget["lib"] * target:
        n = max(64, min(int(rng.lognormvariate(14.0, 1.0)), 40_000_000,
                        int(budget["lib"] * target) - used))
        add(f"usr/lib/x86_64-linux-gnu/lib{i}.so.{rng.randint(1, 12)}", library_like(rng, n, text))
        used, i = used + n, i + 1
    used = 0
    while used < budget["blob"] * target:  # wheels, images, .gz: already compressed
        n = max(64, min(rng.randint(200_000, 8_000_000), int(budget["blob"] * target) - used))
        add(f"opt/conda/pkgs/blob{i}.tar.gz", rng.randbytes(n))
        used, i = used + n, i + 1
    used = 0
    while used < budget["small"] * target:
        n = rng.randint(80, 6_000)
        start = rng.randrange(0, len(text) - n)
        add(f"usr/lib/python3/dist-packages/mod{i % 300}/f{i}.py", text[start:start + n])
        used, i = used + n, i + 1
    used = 0
    originals = [f for f in files if len(f[1]) < 2_000_000]
    while used < budget["dup"] * target and originals:  # licences, vendored copies
        rel, data = rng.choice(originals)
        add(f"usr/share/doc/dup{i}/{Path(rel).name}", data)
        used, i = used + len(data), i + 1
    h = hashlib.sha256()
    for rel, data in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return {"files": len(files), "bytes": sum(len(d) for _, d in files), "sha256": h.hexdigest()}


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def machine() -> str:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ver = subprocess.run(["mksquashfs", "-version"], capture_output=True, text=True).stdout.splitlines()
    return f"nproc {os.cpu_count()}, CPU {model}, {ver[0] if ver else 'mksquashfs ?'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=300, help="size of the synthetic tree (default 300)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per option set (default 3)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workdir", default=None,
                    help="where the tree, images and extractions go (needs ~3x --size-mb free); "
                         "default /dev/shm when it has room (keeps disk write-back noise out of the "
                         "timings), else $TMPDIR or /var/tmp")
    args = ap.parse_args(argv)
    if args.workdir is None:
        shm_ok = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) and \
            shutil.disk_usage("/dev/shm").free > 4 * args.size_mb * 1_000_000
        args.workdir = "/dev/shm" if shm_ok else os.environ.get("TMPDIR", "/var/tmp")
    for tool in ("mksquashfs", "unsquashfs"):
        if shutil.which(tool) is None:
            print(f"squash_options.py: {tool} not found (install squashfs-tools)", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="ck-squash-bench-", dir=args.workdir))
    try:
        src = work / "rootfs"
        t0 = time.perf_counter()
        tree = build_tree(src, args.size_mb, args.seed)
        print(f"built tree: {tree['files']} files, {tree['bytes'] / 1e6:.1f} MB in "
              f"{time.perf_counter() - t0:.1f} s (seed {args.seed}, sha256 {tree['sha256'][:16]})",
              file=sys.stderr)
        create = {o: [] for o, _ in OPTION_SETS}
        extract = {o: [] for o, _ in OPTION_SETS}
        sizes = {}
        for r in range(args.rounds):
            order = OPTION_SETS[r % len(OPTION_SETS):] + OPTION_SETS[:r % len(OPTION_SETS)]
            for opts, _ in order:
                out = work / "image.sqsh"
                create[opts].append(timed(["mksquashfs", str(src), str(out), "-all-root", "-noappend",
                                           "-no-progress", "-quiet", *opts.split()]))
                sizes[opts] = out.stat().st_size
                dest = work / "extract"
                extract[opts].append(timed(["unsquashfs", "-n", "-q", "-d", str(dest), str(out)]))
                shutil.rmtree(dest)
                out.unlink()
                print(f"round {r + 1}: {opts}: create {create[opts][-1]:.2f} s, "
                      f"extract {extract[opts][-1]:.2f} s", file=sys.stderr)
        print(f"Synthetic tree: {tree['files']} files, {tree['bytes'] / 1e6:.1f} MB (seed {args.seed}); "
              f"{args.rounds} rounds, order rotated each round; medians; work dir {args.workdir}.")
        print(f"Machine: {machine()}; {dt.date.today().isoformat()}")
        print()
        print("| options | note | create (median s) | size MB | size / tree | extract (median s) |")
        print("|---|---|---|---|---|---|")
        for opts, note in OPTION_SETS:
            print(f"| `{opts}` | {note} | {statistics.median(create[opts]):.2f} | "
                  f"{sizes[opts] / 1e6:.1f} | {sizes[opts] / tree['bytes']:.2f} | "
                  f"{statistics.median(extract[opts]):.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
