"""The node health loop on a real multi-node cluster: Debian's Slurm (slurmctld on the head node, slurmd on three
compute nodes), the bundle's health plan, ClusterKit's prolog and HealthCheckProgram as head_node.sh installed them,
the deep check submitted as Slurm jobs by the command the head node's timer runs. What stands in: the GPUs, EFA
devices and NCCL bandwidth of a p5 (gpu_standin.py), and ParallelCluster's clustermgtd (it would replace a node
these tests leave drained; they resume it instead).

Proved here: a node whose quick check fails before a job is drained with ClusterKit's reason (not Slurm's "Prolog
error") and the job goes elsewhere or waits, never runs there; Slurm's idle check drains a node that broke between
jobs; a deep check that finds a slow link drains only that node; no check runs on a node inside a user's job; the
budgets hold. Runs on the newest generation's cluster (shared with test_multinode_jobs.py; every test leaves the
nodes healthy and resumed).
"""
from __future__ import annotations

import calendar
import json
import time

import gpu_standin
import pytest
import runtime_build
from cluster_flow import SHARED
from fleet import HEALTH_INTERVAL_S, QUEUE
from fleet_flow import NCCL_MIN_GBPS, STORE

from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from clusterkit_node.contract.health_plan import DEEP_JOB_NAME

NEWEST = max(runtime_build.GENERATIONS)
ZIPAPP = f"{SHARED}/clusterkit_node.pyz"


@pytest.fixture(scope="module")
def up(fleets):
    return fleets(NEWEST)


def history(up, node: str) -> list[dict]:
    out = up.fleet.head.run(["python3", ZIPAPP, "health", "show", node, "--store", STORE, "--last", "200",
                             "--format", "json"]).stdout
    return json.loads(out)["nodes"][node]


def reason(up, node: str) -> str:
    return up.fleet.head.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"]).stdout.strip()


def at_epoch(entry: dict) -> float:
    return calendar.timegm(time.strptime(entry["at"], "%Y-%m-%dT%H:%M:%SZ"))


def resume(up, node) -> None:
    """What ParallelCluster's replacement would give: a healthy node, back in Slurm, and Slurm's next idle check of it
    passed (a check that began before the repair must not drain it again behind the next test's back)."""
    up.fleet.head.run(["scancel", "-w", node.slurm_node], check=False)  # what a test that failed midway left
    gpu_standin.healthy(node)
    up.fleet.head.run(["rm", "-f", f"{gpu_standin.LINKS}/{node.slurm_node}"], check=False)
    time.sleep(2)  # a check already running finishes with what it saw
    resumed = time.time()
    up.fleet.head.run(["scontrol", "update", f"NodeName={node.slurm_node}", "State=RESUME"], check=False)
    up.fleet.head.wait(lambda: any(e["source"] == "idle" and e["ok"] and at_epoch(e) > resumed + 1
                                   for e in history(up, node.slurm_node)), "an idle check passed after the repair",
                       HEALTH_INTERVAL_S * 3)
    up.fleet.wait_idle(timeout=90)


def test_the_fleets_plan_and_slurm_conf_agree_and_every_node_passed_its_boot_check(up) -> None:
    plan = expand(load(str(up.spec_path))).health
    assert plan.interval_s == HEALTH_INTERVAL_S
    conf = up.fleet.head.read("/opt/slurm/etc/slurm.conf")
    assert f"HealthCheckInterval={HEALTH_INTERVAL_S}" in conf and "HealthCheckNodeState=IDLE" in conf
    shipped = json.loads(up.fleet.head.read(f"{SHARED}/health_plan.json"))
    assert shipped["queues"][QUEUE]["deep"]["nccl_min_busbw_gbps"] == NCCL_MIN_GBPS
    assert shipped["queues"][QUEUE]["resources"]["p5"] == {"gpus": 8, "gpu_model": "H100", "efa": 32}
    for node in up.fleet.computes:
        entries = history(up, node.slurm_node)
        boots = [e for e in entries if e["tier"] == "boot"]
        assert boots and all(e["ok"] for e in boots), entries
        assert {r["check"] for r in boots[-1]["results"]} == {"store", "driver", "gpus", "ecc", "xid", "efa"}
        assert max(e["seconds"] for e in entries) < shipped["queues"][QUEUE]["quick_budget_s"], "the budget held"


def test_slurm_runs_the_quick_check_on_idle_nodes_and_never_inside_a_users_job(up) -> None:
    head, busy = up.fleet.head, up.fleet.computes[0]
    job = head.run(["sbatch", "--parsable", "-w", busy.slurm_node, "--exclusive", "--chdir=/home/ckuser1",
                    "--output=/dev/null", "--wrap", f"sleep {HEALTH_INTERVAL_S * 3}"], user="ckuser1").stdout.strip()
    head.wait(lambda: head.job_state(job) == "RUNNING", f"job {job} running", 60)
    started = time.time()
    time.sleep(HEALTH_INTERVAL_S * 2.5)
    during = time.time()
    head.wait(lambda: head.job_state(job) == "COMPLETED", f"job {job} done", HEALTH_INTERVAL_S * 3)

    def idle_at(node) -> list[float]:
        return [at_epoch(e) for e in history(up, node.slurm_node) if e["source"] == "idle"]

    others = [n for n in up.fleet.computes if n is not busy]
    assert all(any(t >= started for t in idle_at(n)) for n in others), "the idle nodes were checked"
    inside = [t for t in idle_at(busy) if started + 1 < t < during - 1]
    assert inside == [], "no idle check ran on the node while the user's job held it"


def test_a_node_whose_quick_check_fails_before_a_job_is_drained_with_its_reason_and_gets_no_job(up) -> None:
    head, bad = up.fleet.head, up.fleet.computes[1]
    # a user's job holds the node (so Slurm's idle check leaves it alone); its GPU falls off the bus
    head.run(["rm", "-f", "/home/ckuser1/holder.started"])
    holder = head.run(["sbatch", "--parsable", "-w", bad.slurm_node, "--chdir=/home/ckuser1", "--output=/dev/null",
                       "--wrap", "touch /home/ckuser1/holder.started; sleep 40"], user="ckuser1").stdout.strip()
    # past its own prolog (which checked a healthy node): the batch script runs only after the prolog
    head.wait(lambda: head.run(["test", "-e", "/home/ckuser1/holder.started"], check=False).returncode == 0,
              f"job {holder} past its prolog", 60)
    gpu_standin.gpus(bad, [(gpu_standin.H100, 0)] * 7)
    try:
        # the next job asks for that node: its prolog's quick check fails, drains it, and Slurm requeues the job
        job = head.run(["sbatch", "--parsable", "-w", bad.slurm_node, "--chdir=/home/ckuser2",
                        "--output=/home/ckuser2/health-prolog.out", "--wrap", "hostname"],
                       user="ckuser2").stdout.strip()
        head.wait(lambda: "DRAIN" in reason(up, bad.slurm_node).upper(), f"{bad.slurm_node} drained", 60)
        state, why = reason(up, bad.slurm_node).split("|", 1)
        assert why.startswith("clusterkit health quick: gpus: 7 GPUs, expected 8"), why
        assert why.endswith(f"history: clusterkit_node.pyz health show {bad.slurm_node}")
        head.wait(lambda: "Restarts=1" in head.run(["scontrol", "show", "job", job]).stdout, "the job requeued", 60)
        head.wait(lambda: head.job_state(job) == "PENDING", "the job pending again (after COMPLETING)", 60)
        held = head.run(["scontrol", "show", "job", job]).stdout
        assert "Reason=JobHeldAdmin" not in held and "Priority=0 " not in held, "requeued, not held"
        assert head.job_state(holder) == "RUNNING", "the running job is left to finish (the node is draining)"
        assert head.run(["test", "-s", "/home/ckuser2/health-prolog.out"], check=False).returncode != 0
        # a job that may go anywhere runs on a healthy node
        state, out = head.sbatch("#!/bin/bash\nhostname\n", user="ckuser1", args=("-N", "1"), timeout=60)
        assert state == "COMPLETED" and out.strip() != bad.slurm_node, out
        (entry,) = [e for e in history(up, bad.slurm_node) if e["source"] == "prolog" and not e["ok"]][-1:]
        assert entry["drained"] == why and entry["seconds"] < 10
        head.run(["scancel", job, holder])
    finally:
        resume(up, bad)


def test_slurms_idle_check_drains_a_node_that_broke_between_jobs(up) -> None:
    head, bad = up.fleet.head, up.fleet.computes[2]
    gpu_standin.efa(bad, 31)
    try:
        head.wait(lambda: "DRAIN" in reason(up, bad.slurm_node).upper(), f"{bad.slurm_node} drained by the idle check",
                  HEALTH_INTERVAL_S * 3)
        why = reason(up, bad.slurm_node).split("|", 1)[1]
        assert why.startswith("clusterkit health quick: efa: 31 EFA devices, expected 32"), why
        assert [e["source"] for e in history(up, bad.slurm_node) if e["drained"]][-1] == "idle"
    finally:
        resume(up, bad)


def test_a_deep_check_on_idle_nodes_drains_only_the_node_with_the_slow_link(up) -> None:
    head = up.fleet.head
    slow = up.fleet.computes[1]
    head.write(f"{gpu_standin.LINKS}/{slow.slurm_node}", "40\n")
    up.fleet.wait_idle()
    try:
        out = head.run(["python3", ZIPAPP, "health", "schedule", "--store", STORE]).stdout
        states = head.run(["sinfo", "-h", "-N", "-o", "%N %T %E"]).stdout
        assert "deep check job" in out, out + states
        job = head.run(["squeue", "-h", "-n", DEEP_JOB_NAME, "-o", "%i"]).stdout.split()[0]
        shown = head.run(["scontrol", "show", "job", job]).stdout
        # every idle node of the queue, one job, the budget as its time limit, removed unless it starts within a
        # minute (exclusivity is the partition's and --exclusive's: the fleet's partition forces sharing, PC's
        # JobExclusiveAllocation queues do not, so it is not visible here)
        assert "ReqNodeList=gpu-st-p5-[1-3]" in shown and "TimeLimit=00:15:00" in shown, shown + states
        assert "Deadline=20" in shown, shown
        head.wait(lambda: head.job_state(job) not in ("PENDING", "RUNNING", "CONFIGURING", ""), f"deep job {job}",
                  300)
        state, why = reason(up, slow.slurm_node).split("|", 1)
        assert "DRAIN" in state.upper(), state
        assert why == (f"clusterkit health deep: nccl: all_reduce_perf gpu-st-p5-1+{slow.slurm_node}: 40 GB/s (below "
                       f"{NCCL_MIN_GBPS} GB/s) (+1 more); history: clusterkit_node.pyz health show {slow.slurm_node}")
        for node in up.fleet.computes:
            if node is not slow:
                assert "DRAIN" not in reason(up, node.slurm_node).upper(), "only the slow node is drained"
            deep = [e for e in history(up, node.slurm_node) if e["tier"] == "deep"]
            assert deep and deep[-1]["ok"] == (node is not slow), deep
            assert deep[-1]["seconds"] < 900, "within the deep check's budget"
        # the schedule submits nothing more: every idle node had its deep check now
        again = head.run(["python3", ZIPAPP, "health", "schedule", "--store", STORE]).stdout
        assert "deep check job" not in again, again
    finally:
        resume(up, slow)
