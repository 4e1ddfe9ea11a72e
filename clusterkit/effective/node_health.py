"""The node health plan of a cluster (``clusterkit_node/contract/health_plan.py``): which checks each queue's nodes
run, what each compute resource's nodes must show, and the deep check's schedule and thresholds.

Resolved here, once, from the spec's ``queues[].health_checks`` and ``scheduling.health_check_interval_s`` plus the
catalog; ``expand`` puts it on the effective spec, the bundle ships it (``health_plan.json``) and render writes the
Slurm lines that run the check. Never in Args: a threshold change must not replace the compute fleet.

What a node must show, per compute resource:

- GPUs: the catalog's count (EC2 DescribeInstanceTypes ``GpuInfo``), and its model where the model is one word the
  node can find in nvidia-smi's name (the contract's ``MODEL``: H100, A10G, L40S; "RTX PRO 4500" is not, so "").
- EFA devices: how many EFA interfaces ParallelCluster 3.16.1's launch template gives the node when the compute
  resource has EFA, else 0. ``pcluster/templates/queues_stack.py`` ``add_network_interfaces``: with EFA enabled (and
  no DevSettings ``EfaInterfaceType``, which ClusterKit never renders), network card 0 carries one EFA interface
  (an ``efa-only`` ENI beside the primary ``interface``, or a combined ``efa`` one where card 0 holds a single ENI)
  when card 0 supports EFA, which PC infers from ``MaximumEfaInterfaces == MaximumNetworkCards``; every further
  card (``network_cards_list[1:]``) gets one ``efa-only`` interface. So: ``max_network_cards`` EFA devices where the
  two counts agree (p5.48xlarge 32, p4d 4, c5n 1), ``max_network_cards - 1`` where card 0 has no EFA (p6-b300:
  17 cards, 16 EFA). Each EFA interface is one device under ``/sys/class/infiniband``.

The deep check's defaults: on GPU queues (any instance type with GPUs in the catalog) every 24 hours with DCGM
level 2, elsewhere off; the NCCL threshold per instance type from ``NCCL_MIN_BUSBW_GBPS`` below.
"""
from __future__ import annotations

from collections.abc import Mapping

from clusterkit.catalog import lookup as catalog
from clusterkit.spec.model import ClusterSpec, Queue
from clusterkit_node.contract.health_plan import MODEL, Deep, Expect, HealthPlan, QueueHealth

GPU_DEEP_EVERY_HOURS = 24  # the deep check's default period on GPU queues (the brief of #40: daily)
GPU_DCGM_LEVEL = 2  # dcgmi diag -r 2 on GPU queues, what ParallelCluster's own HealthChecks.Gpu runs

# The least all_reduce_perf bus bandwidth (GB/s) between two nodes, per instance type, each with its source.
# Empty on purpose: no public figure is a threshold a healthy node is known to reach. The only published per-type
# figures, aws-samples/awsome-distributed-training 4.validation_and_observability/2.gpu-cluster-healthcheck/
# checks/5-nccl-allreduce.sh get_min_bus_bw() (p4d.24xlarge 300, p5/p5e/p5en.48xlarge 800, p6-b200.48xlarge 900),
# are advisory in that script (a shortfall is check_warn, "advisory (MONITOR) unless the operator has set
# NCCL_MIN_BUS_BW to a well-characterized baseline"), are taken as the maximum over its own message sizes
# (-b 8 -e 128M), and were not validated against a measurement; a threshold here drains and replaces the node. So
# every type defaults to 0 (no NCCL test) until a cited, measured figure for the nodes' own test is added here;
# a queue sets its own baseline with health_checks.deep.nccl_min_busbw_gbps.
NCCL_MIN_BUSBW_GBPS: dict[str, tuple[float, str]] = {}


def efa_devices(instance_type: str) -> int:
    """EFA devices a node of this type has when its compute resource enables EFA (ParallelCluster 3.16.1's launch
    template, module docstring); 0 for a type without EFA or unknown to the catalog."""
    facts = catalog.instance_type(instance_type)
    if facts is None or not facts.efa_supported:
        return 0
    cards = facts.max_network_cards
    return cards if facts.max_efa_interfaces == cards else cards - 1


def expect(instance_type: str, efa: bool) -> Expect:
    facts = catalog.instance_type(instance_type)
    gpus = facts.gpus if facts else 0
    model = (facts.gpu_model or "") if facts and gpus else ""
    return Expect(gpus=gpus, gpu_model=model if MODEL.fullmatch(model) else "",
                  efa=efa_devices(instance_type) if efa else 0)


def nccl_default(queue: Queue, efa: Mapping[str, bool]) -> float:
    """The type's figure (the lowest of the queue's types), 0 where any type has none, a compute resource has no
    EFA, or the queue's max nodes add up to less than 2 (the test runs between two of its nodes)."""
    if not queue.compute_resources or sum(cr.max for cr in queue.compute_resources) < 2:
        return 0.0
    if not all(efa.get(cr.name, False) for cr in queue.compute_resources):
        return 0.0
    figures = [NCCL_MIN_BUSBW_GBPS.get(cr.instance_type, (0.0, ""))[0] for cr in queue.compute_resources]
    return float(min(figures))


def queue_health(queue: Queue, *, gpu: bool, efa: Mapping[str, bool]) -> QueueHealth:
    """One queue's checks; ``gpu`` and ``efa``: the effective queue's (any GPU type; EFA per compute resource)."""
    checks, deep = queue.health_checks, queue.health_checks.deep
    return QueueHealth(
        quick=checks.quick,
        quick_budget_s=checks.quick_budget_s,
        resources={cr.name: expect(cr.instance_type, efa.get(cr.name, False)) for cr in queue.compute_resources},
        deep=Deep(
            every_hours=deep.every_hours if deep.every_hours is not None else (GPU_DEEP_EVERY_HOURS if gpu else 0),
            budget_s=deep.budget_s,
            dcgm_level=deep.dcgm_level if deep.dcgm_level is not None else (GPU_DCGM_LEVEL if gpu else 0),
            nccl_min_busbw_gbps=(float(deep.nccl_min_busbw_gbps) if deep.nccl_min_busbw_gbps is not None
                                 else nccl_default(queue, efa))))


def plan(spec: ClusterSpec, *, gpu: Mapping[str, bool], efa: Mapping[str, Mapping[str, bool]]) -> HealthPlan:
    """The cluster's plan from the effective queues' resolved values, by queue name: ``gpu`` (``has_gpu``) and
    ``efa`` (per compute resource name). Never raises (the bundle's ``health_plan.dumps`` checks it against the
    nodes' ranges)."""
    return HealthPlan(cluster=spec.name, interval_s=spec.scheduling.health_check_interval_s,
                      queues={q.name: queue_health(q, gpu=gpu.get(q.name, False), efa=efa.get(q.name, {}))
                              for q in spec.queues})
