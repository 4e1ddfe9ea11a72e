"""Head node and queue rules: instance types from the offline catalog, names, counts, EFA, capacity types,
one CPU architecture per cluster.
"""
from __future__ import annotations

from collections.abc import Iterator

from clusterkit.catalog import lookup as catalog
from clusterkit.effective import gpu_check_place
from clusterkit.rules.common import duplicates
from clusterkit.rules.limits import (
    HEALTH_LIMITS,
    IDS,
    MAX_COMPUTE_RESOURCES,
    MAX_EBS_GIB,
    MAX_QUEUES,
    MIN_HEAD_ROOT_GIB,
    MIN_RESERVATION_INSTANCES,
    QUEUE_NAME,
    RESERVED_NAMES,
    RESOURCE_NAME,
)
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec, Queue
from clusterkit.spec.yaml_reader import Marks, did_you_mean


def _instance(m: Marks, path: str, name: str) -> Iterator[Problem]:
    if catalog.instance_type(name) is None:
        yield m.problem(path, f"unknown instance type '{name}'", did_you_mean(name, catalog.instance_type_names()))


def head_node(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    yield from _instance(m, "head_node.instance_type", spec.head_node.instance_type)
    if spec.head_node.root_volume_gib < MIN_HEAD_ROOT_GIB:
        yield m.problem("head_node.root_volume_gib",
                        f"{spec.head_node.root_volume_gib} GiB is below the AMI's root size",
                        f"at least {MIN_HEAD_ROOT_GIB}")


def queues(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    if not spec.queues:
        yield m.problem("queues", "at least one queue is required")
    if len(spec.queues) > MAX_QUEUES:
        yield m.problem("queues", f"{len(spec.queues)} queues; ParallelCluster allows {MAX_QUEUES}")
    total = sum(len(q.compute_resources) for q in spec.queues)
    if total > MAX_COMPUTE_RESOURCES:
        yield m.problem("queues",
                        f"{total} compute resources; ParallelCluster allows {MAX_COMPUTE_RESOURCES} per cluster")
    yield from duplicates(m, [(f"queues[{i}].name", q.name) for i, q in enumerate(spec.queues)], "queue")
    arches: dict[str, str] = {}
    for i, queue in enumerate(spec.queues):
        yield from _queue(spec, m, f"queues[{i}]", queue, arches)
    if len(set(arches.values())) > 1:
        path = sorted(arches)[-1]
        shown = ", ".join(f"{p.split('.instance_type')[0]}={a}" for p, a in sorted(arches.items()))
        yield m.problem(path, "compute resources mix CPU architectures", f"one image platform per cluster: {shown}")
    head = catalog.instance_type(spec.head_node.instance_type)
    if head is not None and arches and head.arch not in arches.values():
        compute = sorted(set(arches.values()))[0]
        yield m.problem("head_node.instance_type", f"{spec.head_node.instance_type} is {head.arch}, the compute "
                        f"nodes are {compute}", "ParallelCluster needs one architecture for head and compute nodes")


def _queue(spec: ClusterSpec, m: Marks, qp: str, queue: Queue, arches: dict[str, str]) -> Iterator[Problem]:
    if queue.root_volume_gib is not None and not MIN_HEAD_ROOT_GIB <= queue.root_volume_gib <= MAX_EBS_GIB:
        yield m.problem(f"{qp}.root_volume_gib", f"{queue.root_volume_gib} GiB is not a usable root volume",
                        f"{MIN_HEAD_ROOT_GIB} (the AMI's root snapshot) to {MAX_EBS_GIB} (the EBS gp3 limit)")
    if not QUEUE_NAME.fullmatch(queue.name) or queue.name in RESERVED_NAMES:
        yield m.problem(f"{qp}.name", f"'{queue.name}' is not a valid queue name",
                        "lowercase letter first; lowercase letters, digits, hyphens; at most 25; not 'default'")
    if not queue.compute_resources:
        yield m.problem(f"{qp}.compute_resources", "a queue needs at least one compute resource")
    yield from duplicates(m, [(f"{qp}.compute_resources[{j}].name", cr.name)
                               for j, cr in enumerate(queue.compute_resources)], "compute resource")
    yield from _gpu_check(m, qp, queue)
    yield from _health(m, qp, queue)
    block = queue.capacity_type == "capacity_block"
    if block and queue.placement_group:
        yield m.problem(f"{qp}.placement_group", "capacity blocks cannot use a placement group",
                        "the reservation already fixes placement; remove placement_group")
    for j, cr in enumerate(queue.compute_resources):
        cp = f"{qp}.compute_resources[{j}]"
        if not RESOURCE_NAME.fullmatch(cr.name) or cr.name in RESERVED_NAMES:
            yield m.problem(f"{cp}.name", f"'{cr.name}' is not a valid compute resource name",
                            "lowercase letter first; lowercase letters, digits, hyphens; at most 25; not 'default'")
        yield from _instance(m, f"{cp}.instance_type", cr.instance_type)
        facts = catalog.instance_type(cr.instance_type)
        if facts is not None:
            arches[f"{cp}.instance_type"] = facts.arch
            if cr.efa and not facts.efa_supported:
                yield m.problem(f"{cp}.efa", f"{cr.instance_type} does not support EFA",
                                "set efa: false or pick an EFA type")
            az_known = spec.availability_zone in (catalog.region_azs(spec.region) or [])
            offered = catalog.offered_azs(spec.region, cr.instance_type) if az_known else None
            if offered is not None and spec.availability_zone not in offered:
                where = ", ".join(offered) if offered else "no AZ"
                yield m.problem(f"{cp}.instance_type", f"{cr.instance_type} is not offered in {spec.availability_zone}",
                                f"catalog lists {where}", level="warning", id="instance-type-not-in-az")
        if cr.min < 0:
            yield m.problem(f"{cp}.min", f"must be >= 0 (got {cr.min})")
        if cr.max < 1:
            yield m.problem(f"{cp}.max", f"must be >= 1 (got {cr.max})")
        elif cr.max < cr.min:
            yield m.problem(f"{cp}.max", f"must be >= min ({cr.max} < {cr.min})")
        if cr.capacity_reservation_id is not None and not IDS["cr"].fullmatch(cr.capacity_reservation_id):
            yield m.problem(f"{cp}.capacity_reservation_id", f"'{cr.capacity_reservation_id}' is not a reservation id",
                            "cr- followed by 17 lowercase hex characters")
        count = cr.reservation_instance_count
        if count is not None and count < MIN_RESERVATION_INSTANCES:
            yield m.problem(f"{cp}.reservation_instance_count", f"must be >= {MIN_RESERVATION_INSTANCES} (got {count})",
                            "a capacity reservation holds at least one instance (EC2 CreateCapacityReservation); "
                            "leave it out when unknown")
        if block:
            if cr.capacity_reservation_id is None:
                yield m.problem(cp, "capacity_block needs capacity_reservation_id",
                                "the cr-... id of the capacity block")
            if cr.min != cr.max or cr.max < 1:
                yield m.problem(f"{cp}.min", f"capacity_block needs min == max > 0 (min {cr.min}, max {cr.max})",
                                "set both to the block's instance count")
        elif queue.capacity_type == "spot" and cr.capacity_reservation_id is not None:
            yield m.problem(f"{cp}.capacity_reservation_id", "spot capacity cannot use a capacity reservation",
                            "use capacity_type: ondemand or capacity_block")


def _gpu_check(m: Marks, qp: str, queue: Queue) -> Iterator[Problem]:
    """``health_checks.gpu``: only on GPU queues; the deep check in the job's prolog where it outlasts a job start,
    or no deep check at all, only with an acknowledged reason (clusterkit/effective/gpu_check_place.py)."""
    chosen, path = queue.health_checks.gpu, f"{qp}.health_checks.gpu"
    if chosen is None:
        return
    types = [cr.instance_type for cr in queue.compute_resources]
    facts = [catalog.instance_type(t) for t in types]
    if all(f is not None and f.gpus == 0 for f in facts):
        yield m.problem(path, f"queue '{queue.name}' has no GPU instance type", "remove health_checks.gpu")
        return
    slow = [t for t in types if gpu_check_place.slow(t)]
    if chosen == "prolog" and slow:
        yield m.problem(path, f"DCGM's level-2 check in the job's prolog on {slow[0]} outlasts a job start "
                        f"({gpu_check_place.why_slow(slow[0])}): ParallelCluster's BatchStartTimeout is 180 s, so "
                        "jobs fail or hang at start (aws-parallelcluster#6777)",
                        "use health_checks.gpu: boot (once per node, before it takes jobs), or acknowledge "
                        "gpu-check-in-job-start with a reason", level="warning", id="gpu-check-in-job-start")
    elif chosen == "none":
        yield m.problem(path, f"no deep GPU check on queue '{queue.name}': a node with a failing GPU takes jobs",
                        "use health_checks.gpu: boot, or acknowledge gpu-check-none with a reason",
                        level="warning", id="gpu-check-none")


def _in_range(m: Marks, path: str, spec_path: str, value: float | None, unit: str) -> Iterator[Problem]:
    """A health number outside the nodes' own range (clusterkit_node/contract/health_plan.py LIMITS)."""
    low, high = HEALTH_LIMITS[spec_path]
    if value is not None and not low <= value <= high:
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        yield m.problem(path, f"{shown}{unit} is outside {low}..{high}",
                        f"the range the nodes accept in the health plan: {low} to {high}")


def _health(m: Marks, qp: str, queue: Queue) -> Iterator[Problem]:
    """``health_checks`` quick and deep: the nodes' ranges; DCGM and NCCL only where they can run (GPUs; NCCL
    between two nodes of the queue)."""
    checks, hp = queue.health_checks, f"{qp}.health_checks"
    yield from _in_range(m, f"{hp}.quick_budget_s", "queues[].health_checks.quick_budget_s", checks.quick_budget_s,
                         " s")
    deep = checks.deep
    for key, unit in (("every_hours", " h"), ("budget_s", " s"), ("dcgm_level", ""), ("nccl_min_busbw_gbps", " GB/s")):
        yield from _in_range(m, f"{hp}.deep.{key}", f"queues[].health_checks.deep.{key}", getattr(deep, key), unit)
    facts = [catalog.instance_type(cr.instance_type) for cr in queue.compute_resources]
    no_gpu = bool(facts) and all(f is not None and f.gpus == 0 for f in facts)
    if no_gpu and deep.dcgm_level:
        yield m.problem(f"{hp}.deep.dcgm_level", f"queue '{queue.name}' has no GPU instance type for DCGM to check",
                        "remove dcgm_level (CPU queues default to 0)")
    if no_gpu and deep.nccl_min_busbw_gbps:
        yield m.problem(f"{hp}.deep.nccl_min_busbw_gbps", f"queue '{queue.name}' has no GPU instance type for "
                        "the NCCL test", "remove nccl_min_busbw_gbps (CPU queues default to 0)")
    elif deep.nccl_min_busbw_gbps and sum(cr.max for cr in queue.compute_resources) < 2:
        yield m.problem(f"{hp}.deep.nccl_min_busbw_gbps", f"queue '{queue.name}' has fewer than 2 nodes: the NCCL "
                        "test runs between two", "set 0, or raise a compute resource's max")
