"""A ParallelCluster-shaped cluster of several node roots: one head node, N compute nodes, one network,
one image store, real Slurm across them.

Each node is a node root (tests/real_runtime/node_root.py) with its own mount, network and UTS namespaces:
its own hostname, address on the fabric (fabric.py), /run, /etc, /var, enroot dirs and daemons. What
ParallelCluster shares from the head node over NFS is one host directory bind-mounted on every node:
``/home``, ``/opt/slurm/etc`` and ``/opt/parallelcluster/shared``. FSx for Lustre is one host directory
mounted at ``/fsx`` on every node: a stand-in with none of Lustre's client locking, striping or read-ahead,
so concurrency here is the local file system's. The head node runs munged + slurmctld, each compute node
munged (the head node's key) + slurmd; the nodes boot in ParallelCluster's phase order (lifecycle.py), the
compute nodes concurrently while the head node's first image import runs.
"""
from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import gpu_standin
from fabric import Fabric
from lifecycle import Boot, Lifecycle
from node_root import GROUP, PC_PROLOG_EPILOG, SLURM_DAEMONS, USERS, NodeRoot

from clusterkit_node.contract.health_plan import HealthPlan, custom_slurm_settings

HEAD = "ckhead"
# Slurm's HealthCheckInterval on the fleet (fleet_flow.spec_text sets the spec's scheduling.health_check_interval_s
# to it, and test_multinode_health.py checks the rendered plan agrees): short, so the idle check is seen in a test.
HEALTH_INTERVAL_S = 15


QUEUE, RESOURCE = "gpu", "p5"


def compute_names(count: int, first: int = 1) -> list[str]:
    """ParallelCluster's names for static nodes, ``<queue>-st-<compute resource>-<n>``: Slurm's node names and
    the hostnames, from which the fingerprints tell each node's queue."""
    return [f"{QUEUE}-st-{RESOURCE}-{i}" for i in range(first, first + count)]


def slurm_conf(addresses: dict[str, str], cpus: int = 2) -> str:
    """The cluster's slurm.conf: the head node's slurmctld, one NodeName per compute node at its address.
    ``config_overrides``: the nodes run on a 2-core machine, so slurmd takes the configured CPUs as given."""
    computes = [n for n in addresses if n != HEAD]
    return "\n".join([
        "# Multi-node Slurm for the multi-node tier (Debian's Slurm 22.05): one head node, compute nodes on a bridge.",
        "ClusterName=ckfleet",
        f"SlurmctldHost={HEAD}({addresses[HEAD]})",
        "SlurmctldPort=6817", "SlurmdPort=6818",
        *SLURM_DAEMONS,
        *PC_PROLOG_EPILOG,
        *(f"{k}={v}" for setting in custom_slurm_settings(HealthPlan("ckfleet", HEALTH_INTERVAL_S))
          for k, v in setting.items()),
        "SlurmdParameters=config_overrides",
        "SlurmdTimeout=10",  # a lost node is DOWN within seconds (the default 300 s would stall the fault test)
        *[f"NodeName={n} NodeHostname={n} NodeAddr={addresses[n]} CPUs={cpus} RealMemory=1000 State=UNKNOWN"
          for n in computes],
        f"PartitionName={QUEUE} Nodes={','.join(computes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
    ]) + "\n"


@dataclass
class Fleet:
    scratch: Path
    stage: Path
    profile: str
    count: int = 3
    fsx_dir: Path | None = None  # the FSx directory (default: one of its own); may outlive the fleet
    fabric: Fabric = field(default_factory=Fabric)
    head: NodeRoot | None = None
    computes: list[NodeRoot] = field(default_factory=list)

    # ----------------------------------------------------------------------------------------- shared dirs
    @property
    def shared(self) -> Path:
        return self.scratch / "shared"

    @property
    def fsx(self) -> Path:
        return self.fsx_dir or self.shared / "fsx"

    def _shared_dirs(self) -> dict[str, Path]:
        return {"/home": self.shared / "home", "/opt/slurm/etc": self.shared / "slurm-etc",
                "/opt/parallelcluster/shared": self.shared / "pc-shared"}

    @property
    def nodes(self) -> list[NodeRoot]:
        return [n for n in (self.head, *self.computes) if n is not None]

    # ----------------------------------------------------------------------------------------------- start
    def start(self) -> "Fleet":
        """Every node root up, on the fabric, sharing what ParallelCluster shares; no daemon runs yet."""
        self.fabric.start()
        for directory in (self.fsx, *self._shared_dirs().values()):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)  # as the file systems' roots are (pytest's temporary directories are 0700)
        for user, (uid, gid) in USERS.items():
            home = self.shared / "home" / user
            home.mkdir(exist_ok=True)
            os.chown(home, uid, gid)
            home.chmod(0o750)
        key = self.scratch / "munge.key"
        key.write_bytes(os.urandom(1024))
        for name in [HEAD, *compute_names(self.count)]:
            node = self._add_node(name, self.stage)
            if name == HEAD:
                self.head = node
            else:
                self.computes.append(node)
        assert self.head is not None
        self.head.cluster_conf = slurm_conf(self.fabric.attached)
        for node in self.nodes:
            self._join(node)
        self.head.pc_slurm_scripts()  # into the /opt/slurm/etc every node now shares, as PC's head node does
        return self

    def _add_node(self, name: str, stage: Path, fuse_mode: str | None = None) -> NodeRoot:
        node = NodeRoot(self.scratch / name, stage, fsx_at_start=False, profile=self.profile, fuse_mode=fuse_mode,
                        node_name=name, fsx_dir=self.fsx)
        node.start()
        assert node.holder is not None
        self.fabric.attach(name, node.holder.pid, len(self.fabric.attached) + 1)
        if name != HEAD:
            gpu_standin.install(node)  # a p5's GPUs and EFA devices as the health checks see them
        return node

    def _join(self, node: NodeRoot) -> None:
        """What ParallelCluster shares with the node, the cluster's host names and the munge key."""
        for path, source in self._shared_dirs().items():
            node.run(["mount", "--bind", str(source), path])
        hosts = "".join(f"{a} {n}\n" for n, a in self.fabric.attached.items())
        node.sh(f"printf '%s' '{hosts}' >> /etc/hosts")
        node.run(["install", "-m", "0400", str(self.scratch / "munge.key"), "/etc/munge/munge.key"])

    def extra_node(self, name: str, stage: Path, fuse_mode: str | None = None) -> NodeRoot:
        """One more node on the fabric, sharing what the others share, that Slurm does not know: for a boot
        that must fail, or a node of another software generation (the caller stops it)."""
        node = self._add_node(name, stage, fuse_mode)
        self._join(node)
        return node

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        self.fabric.stop()
        shutil.rmtree(self.shared, ignore_errors=True)

    # ----------------------------------------------------------------------------------------------- boot
    def boot_computes(self, compute_args: list[str]) -> list[Boot | BaseException]:
        """Every compute node through ParallelCluster's phases at once (threads: each is a set of processes);
        a node's exception is its result, so one failed boot does not hide the others'."""
        results: list[Boot | BaseException] = [RuntimeError("not booted")] * len(self.computes)

        def boot(i: int, node: NodeRoot) -> None:
            try:
                results[i] = Lifecycle(node, compute_args).compute_boot(first=True)
            except BaseException as exc:  # noqa: BLE001 - reported per node by the caller
                results[i] = exc

        threads = [threading.Thread(target=boot, args=(i, n)) for i, n in enumerate(self.computes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        return results

    def logs(self) -> str:
        """The tail of every node's Slurm log, for a failed job's assertion message."""
        out = []
        for node in self.nodes:
            path = "/var/log/slurmctld.log" if node is self.head else "/var/log/slurmd.log"
            out.append(f"--- {node.slurm_node if node is not self.head else HEAD}:{path}\n"
                       + node.run(["tail", "-n", "25", path], check=False).stdout)
        return "\n".join(out)

    def wait_idle(self, timeout: float = 60) -> None:
        """Until slurmctld shows every compute node idle."""
        assert self.head is not None
        names = [n.slurm_node for n in self.computes]

        def all_idle() -> bool:
            out = self.head.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout.split()
            states = dict(zip(out[::2], out[1::2]))
            return all(states.get(n, "").rstrip("*~#!%$@^-").upper() == "IDLE" for n in names)

        self.head.wait(all_idle, "every compute node idle", timeout)


def group() -> str:
    return GROUP[0]
