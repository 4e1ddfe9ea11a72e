"""The quick node checks: seconds, read-only, each one line of what it saw.

What a node must show before a job lands on it (the quick tier; the boot tier is the self-test plus these):
the NVIDIA driver answers, with the GPU count and model the instance type has (``nvidia-smi --query-gpu``), no GPU
with uncorrected volatile ECC errors, no fatal Xid in the kernel log since the last check, the EFA devices the
instance type has (libfabric's ``fi_info -p efa``, one domain per device), and the image store answering. Each tool
runs under what is left of the tier's budget: a GPU that fell off the bus makes nvidia-smi hang, and a hung check
is a failed check.

Xid classes: awsome-distributed-training ``4.validation_and_observability/2.gpu-cluster-healthcheck/checks/
0-nvidia-smi-check.sh`` (aligned with NVIDIA's Xid catalog r590): the codes it isolates, reboots or resets for fail
the node; the ones it only monitors (13, 31, 43: an application's own faults; 63, 94: remapped or contained errors)
do not. The kernel log is read from ``/dev/kmsg`` (one record per read, ``prio,seq,usec,flags;text``), from the
sequence number the previous check stopped at, so an Xid fails the node once, not at every check after.

Stdlib only, Python 3.9. Host files are read under CK_ROOT when set (the node scripts' test-root convention).
"""
from __future__ import annotations

import errno
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from clusterkit_node.contract.health_plan import Expect
from clusterkit_node.node.facts import find_tool, host_path

# The Xids the toolkit isolates, reboots or resets for (RESET includes 74, its NVLINK_DEFAULT); 154 by its text.
FATAL_XIDS = frozenset({48, 54, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 151, 155, 156, 158, 168})
XID_154_FATAL = re.compile(r"reboot required|gpu reset required|drain and reset|drain p2p", re.IGNORECASE)
XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)")
GPU_QUERY = "--query-gpu=index,name,ecc.errors.uncorrected.volatile.total"
EFA_TOOL_PATHS = ("/opt/amazon/efa/bin/fi_info",)  # where the EFA installer puts libfabric's tools


@dataclass(frozen=True)
class Result:
    check: str  # driver, gpus, ecc, xid, efa, store
    ok: bool
    detail: str
    seconds: float = 0.0


@dataclass(frozen=True)
class Cursor:
    """Where the previous check stopped reading the kernel log (kmsg sequence numbers restart at each boot)."""

    boot_id: str
    seq: int


class Budget:
    """What is left of one tier's seconds; every tool gets the rest, never more."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.deadline = clock() + seconds
        self.seconds = seconds

    def left(self) -> float:
        return max(0.0, self.deadline - self.clock())


def run_bounded(cmd: List[str], env: Dict[str, str], timeout: float) -> Tuple[Optional[int], str]:
    """(exit code, output); None when it did not finish in ``timeout`` (killed with its process group: every
    health tier's tools run through this)."""
    if timeout <= 0:
        return None, ""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                                errors="replace", start_new_session=True)
    except OSError as exc:
        return 127, exc.strerror or str(exc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.communicate()
        return None, ""
    return proc.returncode, out


def _first(text: str) -> str:
    lines = [" ".join(ln.split()) for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else "no output"


def check_gpus(env: Dict[str, str], expect: Expect, budget: Budget) -> List[Result]:
    """driver, then gpus (count and model), then ecc: one nvidia-smi query answers all three."""
    started = budget.clock()
    exe = find_tool("nvidia-smi", env, "/usr/bin/nvidia-smi")
    if exe is None:
        return [Result("driver", False, f"no nvidia-smi on a node that should have {expect.gpus} GPUs")]
    rc, out = run_bounded([exe, GPU_QUERY, "--format=csv,noheader,nounits"], env, budget.left())
    took = budget.clock() - started
    if rc is None:
        return [Result("driver", False, f"nvidia-smi did not answer within {budget.seconds:g} s (a GPU off the bus?)",
                       took)]
    if rc != 0:
        return [Result("driver", False, f"nvidia-smi exited {rc}: {_first(out)}", took)]
    rows = [[c.strip() for c in ln.split(",")] for ln in out.splitlines() if ln.count(",") >= 2]
    results = [Result("driver", True, "nvidia-smi answered", took)]
    names = sorted({r[1] for r in rows})
    if len(rows) != expect.gpus:
        results.append(Result("gpus", False, f"{len(rows)} GPUs, expected {expect.gpus}", took))
    elif expect.gpu_model and any(not re.search(rf"\b{re.escape(expect.gpu_model)}\b", r[1]) for r in rows):
        results.append(Result("gpus", False, f"GPU model {', '.join(names)}, expected {expect.gpu_model}", took))
    else:
        results.append(Result("gpus", True, f"{len(rows)} x {', '.join(names) or '-'}", took))
    bad = [f"GPU {r[0]}: {r[2]}" for r in rows if r[2].isdigit() and int(r[2]) > 0]
    results.append(Result("ecc", not bad, ("uncorrected ECC errors since the driver loaded: " + ", ".join(bad))
                          if bad else "no uncorrected ECC errors", took))
    return results


def read_kmsg(path: str) -> List[Tuple[int, str]]:
    """(sequence number, text) of every kernel log record ``path`` holds now, oldest first. /dev/kmsg gives one
    record per read and EAGAIN at the end (opened non-blocking); EPIPE means records were overwritten before we
    read them: reading goes on from the oldest kept. A plain file (tests) is read whole."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: List[bytes] = []
    try:
        while True:
            try:
                data = os.read(fd, 16384)
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                if exc.errno == errno.EAGAIN:
                    break
                raise
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(fd)
    records = []
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        head, sep, text = line.partition(";")
        fields = head.split(",")
        if sep and len(fields) >= 3 and fields[1].isdigit():  # continuation lines start with a space: no ';' head
            records.append((int(fields[1]), text))
    return records


def boot_id(env: Dict[str, str]) -> str:
    try:
        with open(host_path(env, "/proc/sys/kernel/random/boot_id"), encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def check_xid(env: Dict[str, str], cursor: Optional[Cursor]) -> Tuple[Result, Cursor]:
    """Fatal Xids logged after ``cursor`` (this boot's); the cursor to give the next check."""
    started = time.monotonic()
    this_boot = boot_id(env)
    after = cursor.seq if cursor is not None and cursor.boot_id == this_boot else -1
    try:
        records = read_kmsg(host_path(env, "/dev/kmsg"))
    except OSError as exc:
        return (Result("xid", False, f"cannot read the kernel log (/dev/kmsg): {exc.strerror or exc}"),
                Cursor(this_boot, after))
    fatal: List[str] = []
    last = after
    for seq, text in records:
        last = max(last, seq)
        m = XID.search(text)
        if seq <= after or not m:
            continue
        code = int(m.group("code"))
        if code in FATAL_XIDS or (code == 154 and XID_154_FATAL.search(text)):
            fatal.append(f"Xid {code} ({m.group('pci')})")
    took = time.monotonic() - started
    if fatal:
        return Result("xid", False, "fatal GPU errors in the kernel log: " + ", ".join(sorted(set(fatal))),
                      took), Cursor(this_boot, last)
    return Result("xid", True, "no fatal Xid since the last check", took), Cursor(this_boot, last)


def check_efa(env: Dict[str, str], expect: Expect, budget: Budget) -> Result:
    """EFA devices: ``fi_info -p efa -t FI_EP_RDM`` lists one ``domain: <device>-rdm`` per device."""
    started = budget.clock()
    exe = find_tool("fi_info", env, *EFA_TOOL_PATHS)
    if exe is None:
        return Result("efa", False, f"no fi_info (EFA installer) on a node that should have {expect.efa} EFA devices")
    rc, out = run_bounded([exe, "-p", "efa", "-t", "FI_EP_RDM"], env, budget.left())
    took = budget.clock() - started
    if rc is None:
        return Result("efa", False, f"fi_info did not answer within {budget.seconds:g} s", took)
    domains = set(re.findall(r"^\s*domain:\s*(\S+)", out, re.MULTILINE)) if rc == 0 else set()
    if len(domains) != expect.efa:
        seen = f"{len(domains)} EFA devices" if rc == 0 else f"fi_info exited {rc}: {_first(out)}"
        return Result("efa", False, f"{seen}, expected {expect.efa}", took)
    return Result("efa", True, f"{len(domains)} EFA devices", took)


def check_store(store: str, budget: Budget) -> Result:
    """The image store answers: it can be listed within the budget (a hung Lustre mount blocks in the kernel, so the
    listing runs in a thread the check stops waiting for). A store the head node has not made yet (its first sync
    runs while compute nodes boot) passes while its parent is a mount point; on an unmounted /fsx it fails."""
    started = budget.clock()
    box: Dict[str, object] = {}

    def probe() -> None:
        try:
            box["entries"] = len(os.listdir(store))
        except FileNotFoundError:
            box["missing"] = os.path.ismount(os.path.dirname(store.rstrip("/")))
        except OSError as exc:
            box["error"] = exc

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(budget.left())
    took = budget.clock() - started
    if worker.is_alive():
        return Result("store", False, f"{store} did not answer within {budget.seconds:g} s (FSx hung?)", took)
    if "error" in box:
        exc = box["error"]
        assert isinstance(exc, OSError)
        return Result("store", False, f"{store}: {exc.strerror or exc} (is FSx mounted?)", took)
    if "missing" in box:
        if box["missing"]:
            return Result("store", True, f"{store} not made yet (the head node's first sync); its file system answers",
                          took)
        return Result("store", False, f"{store} missing and {os.path.dirname(store)} is not a mount point "
                      "(is FSx mounted?)", took)
    return Result("store", True, f"{store} answers", took)


def quick(env: Dict[str, str], expect: Expect, store: str, budget: Budget,
          cursor: Optional[Cursor]) -> Tuple[List[Result], Cursor]:
    """Every quick check the node's expectations call for, in the order a failure is cheapest to see."""
    results = [check_store(store, budget)]
    xid_cursor = cursor or Cursor(boot_id(env), -1)
    if expect.gpus:
        results += check_gpus(env, expect, budget)
        xid, xid_cursor = check_xid(env, cursor)
        results.append(xid)
    if expect.efa:
        results.append(check_efa(env, expect, budget))
    return results, xid_cursor
