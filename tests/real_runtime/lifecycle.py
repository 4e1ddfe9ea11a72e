"""ParallelCluster 3.16.1's node lifecycle, played on a node root (node_root.py) with ClusterKit's scripts.

What it mirrors:
  - the phase order of aws-parallelcluster 3.16.1 (wheel): compute nodes in
    `pcluster/resources/compute_node/user_data.sh`, the head node in the cfn-init configSets of
    `pcluster/templates/cluster_stack.py` ("default": chefPrepEnv, shellRunPreInstall, chefConfig,
    shellRunPostInstall, chefFinalize; "update": chefUpdate, which ends in `fetch_and_run -postupdate`):
    cinc `init` -> `fetch_and_run -preinstall` (OnNodeStart) -> cinc `config` -> `fetch_and_run
    -postinstall` (OnNodeConfigured) -> cinc `finalize`. test_node_lifecycle.py pins PHASES against the
    installed wheel's files;
  - what the cookbook's phases mount or start (../shared/reference/domain.md, "Node lifecycle"): init
    mounts /opt/parallelcluster/shared (NFS from the head node); config mounts the instance-store NVMe at
    the queue's EphemeralVolume.MountDir (setup-ephemeral-drives.sh), FSx, /opt/slurm, and on the head
    node starts slurmctld; finalize starts slurmd on compute nodes. Static compute nodes launch once the
    head node is done, possibly before its first image import ends. OnNodeUpdated (head node only) runs
    on EVERY cluster update.
What it does not mirror: separate machines. One node root plays the head node and then each compute
boot in turn (same Slurm, same /opt/parallelcluster/shared); FSx stays mounted from the head node's
config phase on, so a compute node's "FSx not mounted yet at OnNodeStart" is shown by the sandbox tests
(tests/node), which hide it; /opt/slurm IS hidden here during a compute node's OnNodeStart.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from cluster_flow import SHARED, run_launcher, run_stage0
from node_root import NodeRoot

PHASES = ("init", "OnNodeStart", "config", "OnNodeConfigured", "finalize")
_FETCH_AND_RUN = {"preinstall": "OnNodeStart", "postinstall": "OnNodeConfigured", "postupdate": "OnNodeUpdated"}


def pc_phase_order(text: str) -> list[str]:
    """The phases a ParallelCluster bootstrap text runs, in order, named as PHASES names them: cinc
    entrypoints and fetch_and_run calls (``/opt/parallelcluster/scripts/fetch_and_run -preinstall`` in
    the head node's cfn-init metadata, ``${!FR_CMD} -preinstall`` in the compute user data)."""
    order = []
    for m in re.finditer(r"aws-parallelcluster-entrypoints::(\w+)|(?:fetch_and_run|FR_CMD\})\s+-(\w+)", text):
        order.append(m.group(1) or _FETCH_AND_RUN.get(m.group(2), m.group(2)))
    return order


@dataclass
class Boot:
    """What happened during one node's boot: (phase, what ran or changed) in order, and the outputs."""

    role: str
    steps: list[tuple[str, str]] = field(default_factory=list)
    output: str = ""


@dataclass
class Lifecycle:
    node: NodeRoot
    compute_args: list[str]
    instance_store: str = "/scratch"

    def head_boot(self) -> Boot:
        boot = Boot("head")
        for phase in PHASES:
            if phase == "init":
                self.node.run(["test", "-d", "/opt/parallelcluster/shared"])
                boot.steps.append((phase, "/opt/parallelcluster/shared present"))
            elif phase == "config":
                self.node.mount_fsx()
                self.node.start_controller()
                boot.steps.append((phase, "FSx mounted at /fsx; slurmctld started"))
            elif phase == "OnNodeConfigured":
                boot.output += run_stage0(self.node)
                boot.steps.append((phase, "head_node_stage0.sh -> the bundle's head_node_launcher.sh"))
        return boot

    def compute_boot(self, *, first: bool, until: str = "finalize") -> Boot:
        """One static compute node's boot; first: its slurmd has never run (else it is restarted); until: the
        last phase to run (a node Slurm does not know stops before finalize)."""
        boot = Boot("compute")
        for phase in PHASES[:PHASES.index(until) + 1]:
            if phase == "init":
                self.node.run(["test", "-f", f"{SHARED}/enroot.sh"])
                boot.steps.append((phase, "the head node's bundle is in the shared dir"))
            elif phase == "OnNodeStart":
                self.node.hide("/opt/slurm")
                try:
                    boot.output += self.node.run(["bash", f"{SHARED}/compute_node_start.sh",
                                                  *self.compute_args]).stdout
                finally:
                    self.node.unhide("/opt/slurm")
                boot.steps.append((phase, "compute_node_start.sh, /opt/slurm not mounted"))
            elif phase == "config":
                if self.node.run(["mountpoint", "-q", self.instance_store], check=False).returncode != 0:
                    self.node.mount_instance_store(self.instance_store)
                if self.node.run(["mountpoint", "-q", "/fsx"], check=False).returncode != 0:
                    self.node.mount_fsx()  # a node of its own (tests/multinode); one node root had it already
                self.node.start_munge()
                boot.steps.append((phase, f"instance store at {self.instance_store}; FSx and /opt/slurm mounted; "
                                          "munged started"))
            elif phase == "OnNodeConfigured":
                boot.output += self.node.run(["bash", f"{SHARED}/compute_node_configured.sh",
                                              *self.compute_args]).stdout
                boot.steps.append((phase, "compute_node_configured.sh"))
            elif phase == "finalize":
                if first:
                    self.node.start_slurmd()
                else:
                    self.node.restart_slurmd()
                boot.steps.append((phase, "slurmd started"))
        return boot

    def update(self) -> str:
        """OnNodeUpdated on the head node (every cluster update runs it)."""
        return run_launcher(self.node)
