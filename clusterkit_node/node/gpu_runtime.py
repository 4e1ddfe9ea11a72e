"""``gpu-runtime``: make sure this GPU node has nvidia-container-cli before it takes jobs.

Why: enroot's 98-nvidia.sh hook runs ``nvidia-container-cli --user configure`` for every image whose environment
sets NVIDIA_VISIBLE_DEVICES (every nvidia/cuda and NGC image); without the CLI those images fail with "Command not
found: nvidia-container-cli", and ParallelCluster's AMIs do not ship it (node_profiles.json "nvidia_container_cli").
So a GPU node (CK_GPU=1):
  - that already has it (a DLAMI-style or baked AMI) is left alone: its version is logged, a known-bad one warned;
  - else installs NVIDIA's packages the head node fetched once into the store (store/package_set.py): each file
    is checked against the set's size and sha256 first, then handed to the OS's package manager (rpm or dpkg, the
    profile's package_format), and the installed CLI must then report the pinned version;
  - with CK_NVIDIA_CLI=off installs nothing (the spec gave a reason); the GPU self-test then shows what that means.
It never downloads and never compiles: a node without the CLI and without a verified set fails with one line.
"""
from __future__ import annotations

import argparse
import os
import re
from typing import Dict, Optional

from clusterkit_node.contract import profiles as node_profiles
from clusterkit_node.contract.layout import PACKAGE_SET_NAME
from clusterkit_node.node.facts import NODE_PATH, find_tool, run_tool
from clusterkit_node.node.file_set import Changes, NodeProblem, report
from clusterkit_node.store import package_set
from clusterkit_node.store.package_index import COMPONENT

CLI_PATH = "/usr/bin/nvidia-container-cli"  # where NVIDIA's libnvidia-container-tools package puts it
INSTALL_TIMEOUT = 300.0
_VERSION_RE = re.compile(r"^cli-version:\s*([0-9][0-9.]*)\s*$", re.M)


def installed_version(env: Dict[str, str]) -> Optional[str]:
    """The version the node's nvidia-container-cli reports (its ``cli-version:`` line), or None when absent.
    A CLI that is there but cannot run (a missing library) reports as ``broken``."""
    exe = find_tool(COMPONENT, env, CLI_PATH)
    if exe is None:
        return None
    rc, out = run_tool([exe, "--version"], env)
    found = _VERSION_RE.search(out)
    return found.group(1) if rc == 0 and found else "broken"


# How each format installs a set of local files: (the package manager, its arguments before the files).
# rpm -U --replacepkgs: the files were checked against the store's record, and a re-run is idempotent.
INSTALL = {"deb": ("dpkg", ("--install", "--force-confold")), "rpm": ("rpm", ("--upgrade", "--replacepkgs"))}


def ensure(ch: Changes, store: str, os_name: str, wanted: str, arch: str, env: Dict[str, str]) -> None:
    profiles = node_profiles.load()
    profile = profiles.get(os_name)
    if profile is None:
        raise NodeProblem(f"gpu-runtime: no node profile for {os_name!r} (node_profiles.json)")
    cli = profiles.container_cli
    have = installed_version(env)
    if have == "broken":
        raise NodeProblem(f"gpu-runtime: {COMPONENT} is on this node but does not run (`{COMPONENT} --version` "
                          "failed): reinstall libnvidia-container1 and libnvidia-container-tools, or use an AMI "
                          "without a broken copy")
    if have is not None:
        ch.log("INFO", f"gpu-runtime: {COMPONENT} {have} is already on this node (the AMI's, or an earlier boot's "
                       "install): left alone")
        if cli.refused(have):
            ch.log("WARN", f"gpu-runtime: {cli.refused(have)}")
        return
    version = wanted or str(cli.version.value)
    if version == "off":
        ch.log("WARN", f"gpu-runtime: {COMPONENT} is not on this node and containers.nvidia_container_cli.install "
                       "is false: images that set NVIDIA_VISIBLE_DEVICES will not start here")
        return
    if cli.refused(version):
        raise NodeProblem(f"gpu-runtime: {cli.refused(version)}")
    arch = package_set.normalize_arch(arch)
    try:
        pset = package_set.read(store, COMPONENT, version, os_name, arch)
        if pset is None:
            where = package_set.record_path(store, COMPONENT, version, os_name, arch)
            raise NodeProblem(f"gpu-runtime: {COMPONENT} is not on this node and the store has no verified "
                              f"packages for it ({where} missing): the head node's image sync fetches them from "
                              f"{cli.repository.value} (its log says why not), or set "
                              "containers.nvidia_container_cli.install: false with a reason on an AMI that has it")
        if pset.format != profile.package_format.value:
            raise NodeProblem(f"gpu-runtime: the store's set is {pset.format} packages, {os_name} installs "
                              f"{profile.package_format.value}")
        directory = os.path.dirname(package_set.record_path(store, COMPONENT, version, os_name, arch))
        paths = package_set.verified_paths(directory, pset)
    except package_set.PackageSetError as exc:
        raise NodeProblem(f"gpu-runtime: {exc}") from None
    manager, options = INSTALL[pset.format]
    tool = find_tool(manager, env)
    if tool is None:
        raise NodeProblem(f"gpu-runtime: cannot install {pset.format} packages here (no {manager} on PATH)")
    rc, out = run_tool([tool, *options, *paths], env, timeout=INSTALL_TIMEOUT)
    if rc != 0:
        tail = " | ".join(ln.strip() for ln in out.strip().splitlines()[-3:] if ln.strip())
        raise NodeProblem(f"gpu-runtime: installing {', '.join(f.file for f in pset.files)} failed "
                          f"(exit {rc}): {tail or 'no output'}")
    ldconfig = find_tool("ldconfig", env, "/sbin/ldconfig", "/usr/sbin/ldconfig")
    if ldconfig is not None:  # the packages' own scripts do it too; a node must not depend on that
        run_tool([ldconfig], env, timeout=60)
    now = installed_version(env)
    if now != version:
        raise NodeProblem(f"gpu-runtime: after installing, `{COMPONENT} --version` says {now or 'nothing'}, "
                          f"not {version}")
    ch.log("INFO", f"gpu-runtime: installed {COMPONENT} {version} from the store ({pset.format}, "
                   f"{len(pset.files)} packages, sha256 checked against {PACKAGE_SET_NAME}, fetched "
                   f"against {pset.verified_against})")
    ch.mark("changed")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("gpu-runtime", help="GPU nodes: keep the AMI's nvidia-container-cli, or install the verified "
                                           "packages the head node fetched into the store")
    p.add_argument("--store", required=True, help="the image store (CK_STORE, under CK_ROOT)")
    p.add_argument("--os", required=True, help="the node profile (CK_OS)")
    p.add_argument("--version", default="", help="CK_NVIDIA_CLI: a version, off, or empty for the pin")
    p.add_argument("--arch", default=os.uname().machine, help="the node's architecture (default: this machine's)")


def cmd_gpu_runtime(a: argparse.Namespace) -> int:
    env = dict(os.environ)
    env["PATH"] = NODE_PATH if not env.get("CK_ROOT") else env.get("PATH", NODE_PATH)
    return report(lambda ch: ensure(ch, a.store, a.os, a.version, a.arch, env))
