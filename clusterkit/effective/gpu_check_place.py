"""Where the deep GPU check runs on a queue's nodes, per instance family, and its budget at boot.

ParallelCluster's ``HealthChecks.Gpu.Enabled`` runs ``dcgmi diag -r 2`` (cookbook
``files/default/config_slurm/scripts/health_checks/gpu_health_check.sh``) from the prolog at every job start, under
its health check manager's 600 s timeout, while PC's slurm.conf gives a batch job 180 s to start
(``BatchStartTimeout=180``). Where level 2 outlasts that, the check runs at node boot instead (OnNodeConfigured:
``clusterkit_node/node/gpu_health.py``; no job waits on it) and the queue renders ``HealthChecks.Gpu.Enabled: false``.
docs/troubleshooting.md "GPU health checks and the job start" has the reasoning; the spec chooses per queue
(``queues[].health_checks.gpu``).
"""
from __future__ import annotations

from clusterkit.catalog import lookup as catalog

# Families whose level-2 diagnostic outlasts a job start, each with why it is on the list. Measured: p5 2.5-10.5 min
# (awsome-distributed-ai 4.validation_and_observability/2.gpu-cluster-healthcheck README); reported:
# aws-parallelcluster#6777 ("Prolog hangs due to long GPU health check times", p4d and p5). The others are GUESSES
# by likeness (eight NVLink/NVSwitch GPUs with at least p4d's memory each; level 2's memory and stress tests grow
# with both), not measured.
SLOW_FAMILIES: dict[str, str] = {
    "p5": "measured 2.5-10.5 min (ADT gpu-cluster-healthcheck); aws-parallelcluster#6777",
    "p4d": "aws-parallelcluster#6777",
    "p4de": "guess: p4d with 80 GB A100s",
    "p5e": "guess: p5 with 141 GB H200s",
    "p5en": "guess: p5 with 141 GB H200s",
    "p6-b200": "guess: 8 B200 GPUs, more memory than p5",
    "p6-b300": "guess: 8 B300 GPUs, more memory than p5",
    "p3dn": "guess: 8 NVLink V100s",
}
# Any other type with this many GPUs is treated the same (a guess: dcgmi diag tests every GPU of the node).
SLOW_GPU_COUNT = 4
# Seconds the boot check may take: p5's measured worst case (10.5 min) with room, well inside ParallelCluster's
# default ComputeNodeBootstrapTimeout (1800 s) and Slurm's ResumeTimeout in PC's slurm.conf (1800 s), which also
# cover the rest of the boot.
BOOT_BUDGET_S = 900


def slow(instance_type: str) -> bool:
    """The deep check on this type outlasts a job start (SLOW_FAMILIES, or SLOW_GPU_COUNT GPUs or more)."""
    facts = catalog.instance_type(instance_type)
    family = instance_type.split(".")[0]
    return family in SLOW_FAMILIES or (facts is not None and facts.gpus >= SLOW_GPU_COUNT)


def why_slow(instance_type: str) -> str:
    family = instance_type.split(".")[0]
    return SLOW_FAMILIES.get(family, f"guess: {SLOW_GPU_COUNT} or more GPUs")


def default(instance_types: list[str]) -> str:
    """boot where any type of the queue is slow, else prolog (ParallelCluster's own place)."""
    return "boot" if any(slow(t) for t in instance_types) else "prolog"


def node_args(check: str) -> tuple[str, ...]:
    """The queue's Args beyond the cluster's (node settings CK_GPU_HEALTH, CK_GPU_HEALTH_BUDGET): only where the
    check runs at boot, so other queues' Args, and their nodes, stay as they were."""
    return ("CK_GPU_HEALTH=boot", f"CK_GPU_HEALTH_BUDGET={BOOT_BUDGET_S}") if check == "boot" else ()
