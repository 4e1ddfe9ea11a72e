"""The node health plan: which checks each queue's nodes run, what they expect, their time budgets.

Why a file in the bundle and not Args: the expectations are per compute resource (GPU count and model, EFA devices),
the deep check's schedule is the head node's business, and a change of thresholds must not replace the compute
fleet (a change of the compute nodes' Args does; the bundle is re-staged on the head node and read through the
NFS-shared live link). The CLI writes it (``clusterkit/effective/health.py`` from the spec), the nodes read it
(``clusterkit_node/fleet/health_*.py``); this module is both sides' one model, so the CLI can never write a plan a
node refuses. Loading validates every field (the file travels through S3 and a shared directory): a bad plan is one
line naming the field, never a traceback.

Names the Slurm side uses (the rendered ``CustomSlurmSettings`` and the head node's installer agree through these):
``HEALTH_PROGRAM`` is Slurm's ``HealthCheckProgram`` (slurmd runs it as root, at start before it registers and
every ``HealthCheckInterval`` seconds on nodes in ``HEALTH_NODE_STATE``: idle nodes only, so it never runs beside a
job), ``PROLOG_NAME`` the quick check before every job (PC's prolog.d runs in reverse alphabetical order: after PC's
``90_pcluster_health_check_manager``, before ClusterKit's ``10_`` user dirs).

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

PLAN_NAME = "health_plan.json"
SCHEMA = 1
SCRIPTS_DIR = "/opt/slurm/etc/scripts"
HEALTH_PROGRAM = f"{SCRIPTS_DIR}/clusterkit_health_check"
PROLOG_NAME = "50_clusterkit_node_health"
HEALTH_NODE_STATE = "IDLE"
DEEP_JOB_NAME = "clusterkit-health-deep"  # the deep check's Slurm jobs (squeue -n shows them; never a user's)

NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")  # PC's queue and compute resource names
MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,31}")  # catalog GPU models: H100, A10G, L40S, B200, ...
LIMITS: Dict[str, Tuple[int, int]] = {  # field: (lowest, highest) accepted
    "interval_s": (10, 86400),
    "quick_budget_s": (1, 120),
    "gpus": (0, 64),
    "efa": (0, 64),
    "every_hours": (0, 8760),
    "budget_s": (30, 7200),
    "dcgm_level": (0, 4),
    "nccl_min_busbw_gbps": (0, 10000),
}


class PlanError(ValueError):
    """One line: which field of the plan is wrong and how."""


@dataclass(frozen=True)
class Expect:
    """What one compute resource's nodes must show. 0 / "" = not checked."""

    gpus: int = 0
    gpu_model: str = ""  # a word of nvidia-smi's name ("NVIDIA H100 80GB HBM3" has H100)
    efa: int = 0  # EFA devices (/sys/class/infiniband/*, driver efa)


@dataclass(frozen=True)
class Deep:
    """The deep check on idle nodes, run as Slurm jobs the head node submits. every_hours 0 = off."""

    every_hours: int = 0
    budget_s: int = 900  # the whole job's time limit: a job waits at most this long behind it
    dcgm_level: int = 0  # dcgmi diag -r LEVEL on each node; 0 = none
    nccl_min_busbw_gbps: float = 0.0  # all_reduce_perf bus bandwidth between two nodes; 0 = no NCCL test


@dataclass(frozen=True)
class QueueHealth:
    quick: bool = True
    quick_budget_s: int = 10
    resources: Mapping[str, Expect] = field(default_factory=dict)  # by compute resource name
    deep: Deep = Deep()


@dataclass(frozen=True)
class HealthPlan:
    cluster: str
    interval_s: int = 300  # Slurm's HealthCheckInterval
    queues: Mapping[str, QueueHealth] = field(default_factory=dict)

    def queue(self, name: str) -> Optional[QueueHealth]:
        return self.queues.get(name)


def custom_slurm_settings(plan: HealthPlan) -> Tuple[Dict[str, str], ...]:
    """The slurm.conf lines that run the quick check on idle nodes (ParallelCluster's CustomSlurmSettings: not on
    its deny list, pcluster/validators/slurm_settings_validator.py)."""
    return ({"HealthCheckProgram": HEALTH_PROGRAM}, {"HealthCheckInterval": str(plan.interval_s)},
            {"HealthCheckNodeState": HEALTH_NODE_STATE})


def dumps(plan: HealthPlan) -> str:
    """The plan as the bundle holds it: sorted keys, one fixed layout (deterministic bytes)."""
    check(plan)
    doc = {"schema": SCHEMA, **asdict(plan)}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _int(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{where}.{key}: {value!r} is not a whole number")
    low, high = LIMITS[key]
    if not low <= value <= high:
        raise PlanError(f"{where}.{key}: {value} is outside {low}..{high}")
    return value


def _number(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"{where}.{key}: {value!r} is not a number")
    low, high = LIMITS[key]
    if not low <= value <= high:
        raise PlanError(f"{where}.{key}: {value} is outside {low}..{high}")
    return float(value)


def _obj(where: str, value: Any, keys: Tuple[str, ...]) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise PlanError(f"{where}: not an object")
    extra = sorted(set(value) - set(keys))
    if extra:
        raise PlanError(f"{where}: unknown key {extra[0]!r}")
    missing = sorted(set(keys) - set(value))
    if missing:
        raise PlanError(f"{where}: {missing[0]!r} is missing")
    return value


def _name(where: str, value: Any, pattern: "re.Pattern[str]" = NAME, empty: bool = False) -> str:
    if not isinstance(value, str) or not (pattern.fullmatch(value) or (empty and value == "")):
        raise PlanError(f"{where}: {value!r} is not a valid name")
    return value


def _expect(where: str, raw: Any) -> Expect:
    d = _obj(where, raw, ("gpus", "gpu_model", "efa"))
    return Expect(gpus=_int(where, "gpus", d["gpus"]), gpu_model=_name(f"{where}.gpu_model", d["gpu_model"], MODEL,
                                                                        empty=True),
                  efa=_int(where, "efa", d["efa"]))


def _deep(where: str, raw: Any) -> Deep:
    d = _obj(where, raw, ("every_hours", "budget_s", "dcgm_level", "nccl_min_busbw_gbps"))
    return Deep(every_hours=_int(where, "every_hours", d["every_hours"]),
                budget_s=_int(where, "budget_s", d["budget_s"]),
                dcgm_level=_int(where, "dcgm_level", d["dcgm_level"]),
                nccl_min_busbw_gbps=_number(where, "nccl_min_busbw_gbps", d["nccl_min_busbw_gbps"]))


def _queue(where: str, raw: Any) -> QueueHealth:
    d = _obj(where, raw, ("quick", "quick_budget_s", "resources", "deep"))
    if not isinstance(d["quick"], bool):
        raise PlanError(f"{where}.quick: {d['quick']!r} is not true or false")
    resources = d["resources"]
    if not isinstance(resources, dict):
        raise PlanError(f"{where}.resources: not an object")
    return QueueHealth(quick=d["quick"], quick_budget_s=_int(where, "quick_budget_s", d["quick_budget_s"]),
                       resources={_name(f"{where}.resources", k): _expect(f"{where}.resources.{k}", v)
                                  for k, v in sorted(resources.items())},
                       deep=_deep(f"{where}.deep", d["deep"]))


def parse(doc: Any) -> HealthPlan:
    d = _obj("plan", doc, ("schema", "cluster", "interval_s", "queues"))
    if d["schema"] != SCHEMA:
        raise PlanError(f"plan.schema: {d['schema']!r} is not {SCHEMA} (a bundle from another ClusterKit version?)")
    cluster = d["cluster"]
    if not isinstance(cluster, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,59}", cluster):
        raise PlanError(f"plan.cluster: {cluster!r} is not a cluster name")
    queues = d["queues"]
    if not isinstance(queues, dict):
        raise PlanError("plan.queues: not an object")
    return HealthPlan(cluster=cluster, interval_s=_int("plan", "interval_s", d["interval_s"]),
                      queues={_name("plan.queues", k): _queue(f"plan.queues.{k}", v)
                              for k, v in sorted(queues.items())})


def check(plan: HealthPlan) -> None:
    """Raise PlanError where the plan is one the nodes would refuse (the CLI calls it before writing)."""
    parse(json.loads(json.dumps({"schema": SCHEMA, **asdict(plan)})))


def load(path: str) -> HealthPlan:
    """The plan at ``path``; PlanError (one line, naming the file) when it is missing, unreadable or wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the health plan: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PlanError(f"{path}: not JSON: {exc}") from None
    try:
        return parse(doc)
    except PlanError as exc:
        raise PlanError(f"{path}: {exc}") from None
