"""Every file the node scripts write, byte for byte, against committed golden files.

Why: the node logic (Args parsing, enroot.conf, pyxis.conf, hooks, node.env) may move between bash and the
node zipapp; a node must not notice. For every shipped spec (cluster_configs/*.yaml: the Args its head node
and compute nodes get) and a few variants that reach the other branches (old or unknown pyxis, ECR
registries, no NVMe, extraction, a site's own plugstack.conf), head_node.sh, then compute_node_start.sh and
compute_node_configured.sh run in the recording sandbox (node_sandbox.py) and every path each run creates or
changes is compared with tests/node/golden/<case>/<step>/: kind, mode and bytes of each file (files/),
directories and links (manifest.txt), exit code, stdout and stderr (result.txt). Bad Args cases record the
one-line error and exit code. Normalized: timestamps (<TS>), the sandbox root (<ROOT>), and the bundle's
content hash (<BUNDLE>): the bundle's files are the bundle's bytes (checked against the zip), not node output.

Regenerate (only when a node's output is meant to change): CK_UPDATE_GOLDEN=1 pytest tests/node/test_node_golden.py
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from node_sandbox import BUNDLE_URI, PYXIS_SO, Result, Sandbox

from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from tests import shipped

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("CK_UPDATE_GOLDEN") == "1"
REGEN = "CK_UPDATE_GOLDEN=1 pytest tests/node/test_node_golden.py"
SPECS = sorted(shipped.SPECS)
SHARED = "opt/parallelcluster/shared"
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
ECR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com 210987654321.dkr.ecr-fips.us-gov-west-1.amazonaws.com"


def pyxis_so(version: str | None) -> str:
    found = f" pyxis: version v{version} " if version else " "
    return f"ELF placeholder for spank_pyxis.so{found}\n"


@dataclass(frozen=True)
class Case:
    name: str
    spec: str = "demo"
    head_extra: tuple[str, ...] = ()      # Args appended (or replacing the same key) for every node
    pyxis: str | None = "0.24.0"          # head node's pyxis version (None: unreadable)
    compute_pyxis: str | None = "same"
    nvme: bool = True
    start_path: str = "squashfuse"
    site_plugstack: str | None = None     # a plugstack.conf the site had before ClusterKit
    compute: bool = True
    bad_head: tuple[str, ...] = ()        # an Args error case: these instead of the spec's
    bad_compute: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


CASES = [Case(spec, spec=spec) for spec in SPECS] + [
    Case("variant-unknown-pyxis", pyxis=None),
    Case("variant-old-pyxis-ecr-no-nvme", pyxis="0.21.0", nvme=False, start_path="extract",
         head_extra=("PYXIS_USE_ENROOT_LOAD=1", f"CK_ECR_REGISTRIES={ECR}", "ENROOT_MAX_PROCESSORS=8",
                     "CK_OS=ubuntu2404", "CK_STORE=/fsx/images", "ENROOT_MOUNT_HOME=no")),
    Case("variant-oldest-pyxis", pyxis="0.20.0", head_extra=("PYXIS_USE_ENROOT_LOAD=1",)),
    Case("variant-extract-site-plugstack", start_path="extract",
         site_plugstack="# site\noptional /usr/lib/slurm/other.so", head_extra=("PYXIS_EXECUTE_ENTRYPOINT=1",)),
    Case("variant-squashfuse-off-enroot-load", spec="p5-capacity-block",
         head_extra=("PYXIS_USE_SQUASHFUSE=0", "PYXIS_USE_ENROOT_LOAD=1", "PYXIS_SBATCH_SUPPORT=0",
                     "ENROOT_TRANSFER_TIMEOUT=0", "CK_UNLOCKED_IMAGES=import")),
    Case("error-compute-pyxis-older-than-head", compute_pyxis="0.21.0"),
    # The image gc timer is the head node's alone (its settings are head-only Args).
    Case("variant-store-gc-timer", compute=False,
         head_extra=("CK_STORE_GC_TIMER=1", "CK_STORE_GC_GRACE_HOURS=24", "CK_STORE_GC_STALE_DAYS=3")),
    # Bad Args: the one line a user sees, and the exit code.
    Case("error-head-did-you-mean-case", compute=False, bad_head=("ck_store=/fsx/x",)),
    Case("error-head-did-you-mean-prefix", compute=False, bad_head=("MOUNT_HOME=no",)),
    Case("error-head-did-you-mean-tail", compute=False, bad_head=("ENROOT_TRANSFER_RETRIE=5",)),
    Case("error-head-unknown-key", compute=False, bad_head=("CK_FOO=1",)),
    Case("error-head-bad-value", compute=False, bad_head=("PYXIS_CONTAINER_SCOPE=node",)),
    Case("error-head-bad-store", compute=False, bad_head=("CK_STORE=/fsx/../etc",)),
    Case("error-head-bad-unicode", compute=False, bad_head=("CK_CLUSTER=d\u00e9mo",)),
    Case("error-head-given-twice", compute=False, bad_head=("+CK_OS=rhel9",)),
    Case("error-head-not-key-value", compute=False, bad_head=("novalue",)),
    Case("error-head-missing-required", compute=False, bad_head=("-CK_CLUSTER",)),
    Case("error-compute-head-only-key", bad_compute=(f"CK_BUNDLE={BUNDLE_URI}",)),
    Case("error-compute-did-you-mean", bad_compute=("ENROOT_MOUNT_HOMES=yes",)),
    Case("error-compute-missing-required", bad_compute=("-CK_OS",)),
    Case("error-compute-empty-required", bad_compute=("CK_CLUSTER=",)),
    Case("error-compute-unknown-no-suggestion", bad_compute=("FOO=bar",)),
    Case("error-compute-bad-squash", bad_compute=("ENROOT_SQUASH_OPTIONS=-comp $(reboot)",)),
]


def spec_args(spec: str) -> tuple[list[str], list[str]]:
    node = expand(load(spec)).node
    return [*node.head, f"CK_BUNDLE={BUNDLE_URI}"], list(node.compute)


def edit(args: list[str], changes: tuple[str, ...]) -> list[str]:
    """'-KEY' drops KEY, '+KEY=VALUE' appends (a key given twice), 'KEY=VALUE' replaces KEY in place or appends."""
    out = list(args)
    for change in changes:
        if change.startswith("-"):
            out = [a for a in out if not a.startswith(change[1:] + "=")]
            continue
        if change.startswith("+"):
            out.append(change[1:])
            continue
        key = change.split("=", 1)[0]
        hits = [i for i, a in enumerate(out) if "=" in change and a.split("=", 1)[0] == key]
        if hits:
            out[hits[0]] = change
        else:
            out.append(change)
    return out


def node(base: Path, case: Case, *, compute: bool) -> Sandbox:
    mounts = {"/fsx", "/scratch"} if case.nvme else {"/fsx"}
    sb = Sandbox(base, mounts=mounts, start_path=case.start_path).provide_ami()
    version = case.pyxis if not compute or case.compute_pyxis == "same" else case.compute_pyxis
    sb.write(PYXIS_SO, pyxis_so(version))
    return sb


def normalize(text: str, sb: Sandbox, bundle: str) -> str:
    return TS.sub("<TS>", text).replace(str(sb.root), "<ROOT>").replace(bundle, "<BUNDLE>")


def capture(sb: Sandbox, before: dict[str, os.stat_result], r: Result, bundle: str) -> dict[str, bytes]:
    """What the step wrote: path -> bytes of the golden files (manifest, result, and each file's bytes)."""
    out: dict[str, bytes] = {}
    manifest = []
    members = zipfile.ZipFile(sb.bundle_path()).namelist()
    with zipfile.ZipFile(sb.bundle_path()) as zf:
        bundle_bytes = {n: zf.read(n) for n in members}
    for path, st in sorted(walk(sb.root).items()):
        old = before.get(path)
        full = sb.root / path
        if stat.S_ISREG(st.st_mode):
            data = full.read_bytes()
            if old is not None and stat.S_ISREG(old.st_mode) and old.st_mode == st.st_mode and \
                    old.st_mtime_ns == st.st_mtime_ns and old.st_size == st.st_size:
                continue
            shown = normalize(path, sb, bundle)
            mode = f"{stat.S_IMODE(st.st_mode):04o}"
            if shown.startswith(f"{SHARED}/.clusterkit-<BUNDLE>/"):
                # the bundle's own bytes (they change with every script change): equal to the zip member
                name = shown.rsplit("/", 1)[1]
                assert data == bundle_bytes[name], f"{path} differs from the bundle's {name}"
                manifest.append(f"b {mode} {shown}")
                continue
            manifest.append(f"f {mode} {shown}")
            if path == "var/log/clusterkit/bootstrap.log":
                data = normalize(data.decode(), sb, bundle).encode()
            out[f"files/{shown}"] = data
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(full)
            if old is not None and stat.S_ISLNK(old.st_mode) and old.st_mtime_ns == st.st_mtime_ns:
                continue
            manifest.append(f"l - {normalize(path, sb, bundle)} -> {normalize(target, sb, bundle)}")
        elif stat.S_ISDIR(st.st_mode):
            if old is not None and stat.S_ISDIR(old.st_mode) and old.st_mode == st.st_mode:
                continue  # (a dir's mtime moves with its entries: only new dirs and mode changes count)
            manifest.append(f"d {stat.S_IMODE(st.st_mode):04o} {normalize(path, sb, bundle)}")
    for path in sorted(set(before) - set(walk(sb.root))):
        manifest.append(f"removed {normalize(path, sb, bundle)}")
    out["manifest.txt"] = ("\n".join(manifest) + "\n").encode()
    out["result.txt"] = (f"exit {r.returncode}\n--- stdout\n{normalize(r.stdout, sb, bundle)}"
                         f"--- stderr\n{normalize(r.stderr, sb, bundle)}").encode()
    return out


def walk(root: Path) -> dict[str, os.stat_result]:
    found: dict[str, os.stat_result] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            found[str(p.relative_to(root))] = p.lstat()
    return found


def run_case(case: Case, tmp_path: Path) -> dict[str, bytes]:
    head_args, compute_args = spec_args(case.spec)
    head_args, compute_args = edit(head_args, case.head_extra), edit(compute_args, case.head_extra)
    out: dict[str, bytes] = {"args.txt": ("\n".join(["head:", *head_args, "compute:", *compute_args]) + "\n").encode()}
    head = node(tmp_path / "head", case, compute=False)
    bundle = hashlib.sha256(head.bundle_path().read_bytes()).hexdigest()[:16]
    if case.site_plugstack is not None:
        head.write("opt/slurm/etc/plugstack.conf", case.site_plugstack)
    if case.bad_head:
        head_args = edit(head_args, case.bad_head)
    before = walk(head.root)
    r = head.run("head_node.sh", *head_args, env=case.env)
    out.update({f"head/{k}": v for k, v in capture(head, before, r, bundle).items()})
    if not case.compute or r.returncode != 0:
        return out
    compute = node(tmp_path / "compute", case, compute=True)
    compute.bundle = head.bundle_path()
    shared = compute.install_bundle_as_shared()
    (shared / "clusterkit_node.pyz").chmod(0o755)
    for rel in ("opt/slurm/etc/plugstack.conf", "opt/slurm/etc/plugstack.conf.d/pyxis.conf"):
        compute.write(rel, head.read(rel))  # /opt/slurm is NFS-shared from the head node
    store = next(a.split("=", 1)[1] for a in compute_args if a.startswith("CK_STORE="))
    (compute.root / store.lstrip("/")).mkdir(parents=True, exist_ok=True)
    if case.bad_compute:
        compute_args = edit(compute_args, case.bad_compute)
    for step in ("compute_node_start.sh", "compute_node_configured.sh"):
        before = walk(compute.root)
        r = compute.run(step, *compute_args, env=case.env)
        out.update({f"{step.removesuffix('.sh')}/{k}": v for k, v in capture(compute, before, r, bundle).items()})
        if r.returncode != 0:
            break
    return out


def read_golden(case: str) -> dict[str, bytes]:
    base = GOLDEN / case
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_output_matches_golden(case: Case, tmp_path: Path) -> None:
    got = run_case(case, tmp_path)
    if UPDATE:
        shutil.rmtree(GOLDEN / case.name, ignore_errors=True)
        for rel, data in got.items():
            p = GOLDEN / case.name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    want = read_golden(case.name)
    assert sorted(got) == sorted(want), f"files differ from tests/node/golden/{case.name} (regenerate: {REGEN})"
    for rel in sorted(got):
        assert got[rel].decode(errors="replace") == want[rel].decode(errors="replace"), \
            f"tests/node/golden/{case.name}/{rel} differs (if intended, regenerate: {REGEN})"
        assert got[rel] == want[rel], f"tests/node/golden/{case.name}/{rel}: bytes differ (regenerate: {REGEN})"


def test_every_golden_case_is_a_case() -> None:
    """A stale golden directory (a renamed or dropped case) is an error, not dead weight."""
    names = {c.name for c in CASES}
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and p.name not in names) == []
    assert set(SPECS) <= names
