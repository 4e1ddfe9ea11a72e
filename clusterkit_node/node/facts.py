"""What software this node runs: NVIDIA driver, EFA, libfabric, pyxis, tool versions, IMDS facts.

Each fact is read the cheapest reliable way and is None when unknown (a CPU node of a GPU AMI has no
driver to ask; that is never an error here). Host files are read under CK_ROOT when set, the node
scripts' test-root convention.
"""
from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from clusterkit_node.image.nvidia_hook import Driver

# ParallelCluster names compute nodes <queue>-<st|dy>-<compute resource>-<n> and, unless UseEc2Hostnames
# is set, uses that name as the hostname. Greedy like PC's own parser: the last -st-/-dy- splits it.
NODE_NAME_RE = re.compile(r"^(?P<queue>[a-z][a-z0-9-]*)-(?:st|dy)-(?P<cr>[A-Za-z][A-Za-z0-9-]*)-\d+$")
PYXIS_SO = "/usr/local/lib/slurm/spank_pyxis.so"
EFA_PACKAGES = "/opt/amazon/efa_installed_packages"
IMDS_DEFAULT = "http://169.254.169.254"
# CK_IMDS_ENDPOINT may point only at IMDS itself or at loopback (tests), so the session token never
# leaves the instance.
IMDS_HOSTS = ("169.254.169.254", "fd00:ec2::254", "127.0.0.1", "::1", "localhost")
IMDS_TIMEOUT = 1.0
# pyxis runs enroot, and enroot its helpers, with a PATH like this one (real-runtime.md: pyxis' epilog
# uses exactly /usr/local/bin:/usr/bin:/bin); sbin is added for distributions that put fuse tools there.
NODE_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


def host_path(env: Dict[str, str], path: str) -> str:
    """A host file, under CK_ROOT when set (the node scripts' test root convention)."""
    return env.get("CK_ROOT", "") + path


def read_host_text(env: Dict[str, str], path: str) -> str:
    try:
        with open(host_path(env, path), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def find_tool(name: str, env: Dict[str, str], *known: str) -> Optional[str]:
    """The tool at its usual place on PC AMIs (under CK_ROOT), else on PATH."""
    for path in known:
        full = host_path(env, path)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    return shutil.which(name, path=env.get("PATH"))


def run_tool(cmd: List[str], env: Dict[str, str], timeout: float = 20) -> Tuple[int, str]:
    """(exit code, stdout+stderr); 127 when it cannot run at all."""
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


@dataclass(frozen=True)
class GpuFacts:
    """What nvidia-smi says about this node's GPUs; driver None: no driver answers (``why``)."""

    driver: Optional[str]
    cuda: Optional[str]                            # the driver's CUDA version (nvidia-smi's "CUDA Version")
    gpus: Tuple[Tuple[str, Optional[str]], ...]    # (name, compute capability or None), one per GPU
    why: str = ""                                  # why the driver, or the GPUs' compute capability, is unknown

    def kinds(self) -> List[Tuple[str, Optional[str]]]:
        """The distinct (name, compute capability) pairs, sorted."""
        return sorted(set(self.gpus), key=lambda g: (g[0], g[1] or ""))

    def hook_drivers(self) -> List[Driver]:
        """What nvidia-container-cli compares an image's requirements with, one per distinct GPU (the brand: unknown,
        nvidia-smi's query does not give NVML's brand)."""
        return [Driver(self.driver, self.cuda, None, arch) for _name, arch in self.kinds()]


def gpu_facts(env: Dict[str, str]) -> GpuFacts:
    """The driver, its CUDA version and each GPU's name and compute capability (``nvidia-smi --query-gpu=
    name,compute_cap,driver_version``; a driver too old for ``compute_cap`` answers the driver alone, the
    capability is then unknown). CPU instances of a GPU AMI have nvidia-smi but no device: unknown, never an error."""
    exe = find_tool("nvidia-smi", env, "/usr/bin/nvidia-smi")
    if not exe:
        return GpuFacts(None, None, (), "nvidia-smi not found")
    why = ""
    rc, out = run_tool([exe, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"], env)
    rows = [ln.rsplit(",", 2) for ln in out.splitlines() if ln.count(",") >= 2] if rc == 0 else []
    gpus = [(name.strip(), cap.strip(), drv.strip()) for name, cap, drv in rows
            if re.fullmatch(r"\d+(\.\d+)+", drv.strip())]
    if not gpus:  # an older driver does not know compute_cap: the driver version alone
        why = f"compute capability unknown (nvidia-smi: {first_line(out) or f'exit {rc}'})"
        rc, out = run_tool([exe, "--query-gpu=driver_version", "--format=csv,noheader"], env)
        gpus = [("", "", ln.strip()) for ln in out.splitlines() if re.fullmatch(r"\d+(\.\d+)+", ln.strip())]
        if rc != 0 or not gpus:
            return GpuFacts(None, None, (), f"nvidia-smi: {first_line(out) or f'exit {rc}'}")
    _rc, header = run_tool([exe], env)
    m = re.search(r"CUDA Version:\s*(\d+(?:\.\d+)*)", header)
    drivers = sorted({drv for _n, _c, drv in gpus})
    return GpuFacts(drivers[0], m.group(1) if m else None,
                    tuple((name or "unknown GPU", cap if re.fullmatch(r"\d+\.\d+", cap) else None)
                          for name, cap, _d in gpus), why)


def nvidia_facts(env: Dict[str, str]) -> Tuple[Optional[str], Optional[str], str]:
    """(driver version, CUDA driver API version, why unknown): gpu_facts' driver part."""
    facts = gpu_facts(env)
    return facts.driver, facts.cuda, facts.why if facts.driver is None else ""


def imds_facts(env: Dict[str, str]) -> Tuple[Dict[str, Optional[str]], str]:
    """instance type, AMI id and instance id from IMDSv2 (token PUT, then GETs; 1 s timeouts)."""
    paths = {"instance_type": "instance-type", "ami_id": "ami-id", "instance_id": "instance-id"}
    facts: Dict[str, Optional[str]] = dict.fromkeys(paths)
    if env.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return facts, "IMDS disabled by AWS_EC2_METADATA_DISABLED"
    base = env.get("CK_IMDS_ENDPOINT", IMDS_DEFAULT).rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme != "http" or parts.hostname not in IMDS_HOSTS:
        return facts, f"CK_IMDS_ENDPOINT {base} is neither IMDS nor loopback; not queried"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # IMDS never via a proxy
    failures = (OSError, ValueError, http.client.HTTPException)
    try:
        req = urllib.request.Request(f"{base}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with opener.open(req, timeout=IMDS_TIMEOUT) as resp:
            token = resp.read().decode("ascii", "replace").strip()
    except failures as exc:
        return facts, f"no IMDSv2 token from {base} ({exc})"
    for key, path in paths.items():
        req = urllib.request.Request(f"{base}/latest/meta-data/{path}",
                                     headers={"X-aws-ec2-metadata-token": token})
        try:
            with opener.open(req, timeout=IMDS_TIMEOUT) as resp:
                facts[key] = resp.read().decode("utf-8", "replace").strip() or None
        except failures:
            pass
    return facts, ""


def libfabric_version(env: Dict[str, str], packaged: Optional[str]) -> Optional[str]:
    """`fi_info --version` ("libfabric: X": the library actually loaded), else the EFA package record."""
    exe = find_tool("fi_info", env, "/opt/amazon/efa/bin/fi_info")
    if exe:
        rc, out = run_tool([exe, "--version"], env)
        m = re.search(r"^libfabric:\s*(\S+)", out, re.M)
        if rc == 0 and m:
            return m.group(1)
    return packaged


def version_in_file(path: str, pattern: bytes, limit: int) -> Tuple[bool, Optional[str]]:
    """(readable, the first group of ``pattern`` in the file's first ``limit`` bytes or None)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit)
    except OSError:
        return False, None
    m = re.search(pattern, data)
    return True, (m.group(1).decode() if m else None)


def pyxis_plugin_version(path: str) -> Tuple[bool, Optional[str]]:
    """(readable, version) of the pyxis plugin at ``path``: pyxis >= 0.11 compiles "pyxis: version vX.Y.Z" into
    it (NVIDIA/pyxis pyxis_slurmd.c), the string slurmd logs."""
    return version_in_file(path, rb"pyxis: version v(\d+\.\d+(?:\.\d+)?)", 64 << 20)


def pyxis_version(env: Dict[str, str]) -> Optional[str]:
    """The node's pyxis version; an older plugin is recorded as "present"."""
    readable, version = pyxis_plugin_version(host_path(env, PYXIS_SO))
    return (version or "present") if readable else None


def enroot_version(env: Dict[str, str]) -> Optional[str]:
    """The version the enroot script states (``ENROOT_VERSION="X"``), read without running it (any enroot
    command creates its runtime/cache dirs as the caller)."""
    exe = find_tool("enroot", env, "/usr/bin/enroot")
    return version_in_file(exe, rb'ENROOT_VERSION="(\d+(?:\.\d+)+)', 1 << 20)[1] if exe else None


def tool_version(env: Dict[str, str], cmd: List[str], pattern: str) -> Optional[str]:
    rc, out = run_tool(cmd, env)
    m = re.search(pattern, out, re.M)
    return m.group(1) if rc == 0 and m else None


def node_identity(name: str) -> Tuple[Optional[str], Optional[str]]:
    m = NODE_NAME_RE.match(name)
    return (m.group("queue"), m.group("cr")) if m else (None, None)
