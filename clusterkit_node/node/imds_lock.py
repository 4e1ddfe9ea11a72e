"""Instance metadata (IMDS) for root only on a compute node: jobs get none of the compute role.

Why: any process can ask IMDS for the instance role's credentials, and ParallelCluster locks IMDS only on head and
login nodes (aws-parallelcluster-cookbook ``aws-parallelcluster-environment/recipes/config/imds.rb``), so on a
compute node every job user holds the compute role. The job-user guard's explicit Denies
(clusterkit/render/job_user_guard.py) narrow what PC grants, but IAM cannot tell one node's DynamoDB item from
another's, nor this cluster's log streams written by its agent from ones a job forges. With ``security.compute_imds:
root_only`` (the default; node setting CK_COMPUTE_IMDS) a compute node refuses IMDS to every user but root, as PC's
own ``imds-access.sh`` does on head nodes: an iptables chain on OUTPUT to 169.254.169.254 and fd00:ec2::254 that
accepts uid 0 and rejects the rest. PC's compute-node agents that use IMDS run as root (cinc-client, cloud-init, the
CloudWatch agent, the update checker); computemgtd (pcluster-admin) makes no AWS call. Login nodes are PC's to lock
(root, pcluster-admin and the OS default user): this leaves them alone.

``imds-lock --mode root_only|all_users --role compute|login`` (OnNodeStart, before PC's config phase starts
slurmd; idempotent): the chain is filled in one ``iptables-restore --noflush`` commit (never empty or half-filled
while a job could ask), then hooked into OUTPUT once; and a oneshot unit (``clusterkit-imds-lock.service``,
required by slurmd) applies it again at every boot, since a rebooted node keeps no rules. ``all_users`` removes
the hook, the chain and the unit. No iptables on a node that must lock: one ERROR line, the boot fails (a node
that would silently hand the role to every job does not join).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from typing import Callable, List, Sequence, Tuple

from clusterkit_node.contract.bundle_files import LIVE_ZIPAPP
from clusterkit_node.node.file_set import Changes, NodeProblem, remove_file, report, root, write_file

CHAIN = "CLUSTERKIT_IMDS"
# (tool, IMDS address): the IPv4 endpoint and the IPv6 one of Nitro instances (EC2 User Guide, "Access instance
# metadata": http://[fd00:ec2::254]).
FAMILIES: Tuple[Tuple[str, str], ...] = (("iptables", "169.254.169.254/32"), ("ip6tables", "fd00:ec2::254/128"))
ALLOWED_UIDS = ("0",)
UNIT = "clusterkit-imds-lock.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
SLURM_UNIT = "slurmd.service"
ZIPAPP = LIVE_ZIPAPP
MODES = ("root_only", "all_users")
SBIN_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"  # where iptables is looked for (not the job's or the caller's PATH)
# What `systemctl enable` makes of the unit's [Install] section, made here so that removing the unit can never
# leave slurmd requiring a unit that is gone (a dangling .requires link stops slurmd from starting).
ENABLE_LINKS = (f"/etc/systemd/system/multi-user.target.wants/{UNIT}",
                f"/etc/systemd/system/{SLURM_UNIT}.requires/{UNIT}")

Runner = Callable[[Sequence[str], str], "subprocess.CompletedProcess[str]"]


def run(argv: Sequence[str], stdin: str = "") -> "subprocess.CompletedProcess[str]":
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)


def chain_rules() -> str:
    """The chain as one iptables-restore commit: declaring it flushes it, then its rules, atomically."""
    lines = ["*filter", f":{CHAIN} - [0:0]", f"-F {CHAIN}"]
    lines += [f"-A {CHAIN} -m owner --uid-owner {uid} -j ACCEPT" for uid in ALLOWED_UIDS]
    lines += [f"-A {CHAIN} -j REJECT", "COMMIT"]
    return "\n".join(lines) + "\n"


def hook(address: str) -> List[str]:
    return ["OUTPUT", "-d", address, "-j", CHAIN]


def unit_text() -> str:
    return "\n".join((
        "# Managed by ClusterKit (clusterkit_node imds-lock, security.compute_imds: root_only); re-run it instead "
        "of editing this file.",
        "[Unit]",
        "Description=ClusterKit: instance metadata (IMDS) for root only, before slurmd runs any job",
        "After=network-pre.target remote-fs.target",
        f"Before={SLURM_UNIT}",
        "RequiresMountsFor=/opt/parallelcluster/shared",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        f"ExecStart=/usr/bin/env python3 {ZIPAPP} imds-lock --mode root_only --role compute --no-unit",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        f"RequiredBy={SLURM_UNIT}",
    )) + "\n"


def _tool(name: str) -> str:
    found = shutil.which(name, path=SBIN_PATH)
    if found is None:
        raise NodeProblem(f"imds-lock: {name} not found: this node cannot keep IMDS (and the compute role) from "
                          "jobs; install iptables in the AMI, or set security.compute_imds: all_users with a reason")
    return found


def _last_line(done: "subprocess.CompletedProcess[str]") -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}, no output"


def lock(ch: Changes, runner: Runner = run) -> None:
    """Fill the chain (one commit) and hook it into OUTPUT once, for each family."""
    for name, address in FAMILIES:
        tool = _tool(name)
        restore = _tool(f"{name}-restore")
        done = runner([restore, "--noflush"], chain_rules())
        if done.returncode != 0:
            raise NodeProblem(f"imds-lock: {name}-restore refused the {CHAIN} chain: "
                              f"{_last_line(done)}")
        if runner([tool, "-C", *hook(address)], "").returncode != 0:
            added = runner([tool, "-I", "OUTPUT", "1", *hook(address)[1:]], "")
            if added.returncode != 0:
                raise NodeProblem(f"imds-lock: {name} could not hook {CHAIN} into OUTPUT for {address}: "
                                  f"{_last_line(added)}")
            ch.log("INFO", f"IMDS ({address}) for root only: {name} OUTPUT -> {CHAIN}")
            ch.mark("changed")


def unlock(ch: Changes, runner: Runner = run) -> None:
    """Remove every hook and the chain (nothing to do where iptables or the chain is absent)."""
    for name, address in FAMILIES:
        tool = shutil.which(name, path=SBIN_PATH)
        if tool is None:
            continue
        removed = False
        while runner([tool, "-C", *hook(address)], "").returncode == 0:
            runner([tool, "-D", *hook(address)], "")
            removed = True
        if runner([tool, "-n", "-L", CHAIN], "").returncode == 0:
            runner([tool, "-F", CHAIN], "")
            runner([tool, "-X", CHAIN], "")
            removed = True
        if removed:
            ch.log("INFO", f"IMDS ({address}) open to every user again ({name} {CHAIN} removed)")
            ch.mark("changed")


def _enable(ch: Changes) -> bool:
    changed = False
    for link in ENABLE_LINKS:
        full = root() + link
        if os.path.islink(full) and os.readlink(full) == UNIT_PATH:
            continue
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if os.path.lexists(full):
            os.unlink(full)
        os.symlink(UNIT_PATH, full)
        ch.log("INFO", f"enabled {UNIT}: {link}")
        changed = True
    return changed


def _disable(ch: Changes) -> bool:
    """The enable links first, so no moment has slurmd requiring a missing unit."""
    return any([remove_file(ch, link) for link in ENABLE_LINKS])


def apply(ch: Changes, mode: str, role: str, with_unit: bool, runner: Runner = run) -> None:
    if role != "compute":
        ch.log("INFO", "IMDS: left to ParallelCluster on login nodes (root, pcluster-admin and the OS default user)")
        return
    if mode == "root_only":
        lock(ch, runner)
        if with_unit:
            os.makedirs(root() + os.path.dirname(UNIT_PATH), exist_ok=True)
            if write_file(ch, UNIT_PATH, "0644", unit_text().encode()) | _enable(ch):
                ch.mark("systemd-dirty")
        ch.log("INFO", "IMDS: root only on this compute node; jobs get no instance credentials "
                       "(security.compute_imds: root_only)")
    else:
        unlock(ch, runner)
        if with_unit and (_disable(ch) | remove_file(ch, UNIT_PATH)):
            ch.mark("systemd-dirty")
        ch.log("WARN", "IMDS: every job user on this compute node holds the compute role (security.compute_imds: "
                       "all_users)")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("imds-lock", help="compute nodes: instance metadata for root only (or open it again), "
                                         "idempotently, and the boot unit that keeps it so")
    p.add_argument("--mode", choices=MODES, required=True, help="the spec's security.compute_imds (CK_COMPUTE_IMDS)")
    p.add_argument("--role", choices=("compute", "login"), required=True, help="CK_NODE_ROLE")
    p.add_argument("--no-unit", action="store_true", help="the rules only (what the boot unit runs)")


def cmd_imds_lock(a: argparse.Namespace) -> int:
    return report(lambda ch: apply(ch, a.mode, a.role, not a.no_unit))
