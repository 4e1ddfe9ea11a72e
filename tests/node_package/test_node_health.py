"""The health loop's node commands (clusterkit_node/fleet/health*.py) as processes, against stand-in nvidia-smi,
fi_info and scontrol (the GPU, the EFA devices and slurmctld), a stand-in kernel log in the kmsg record format
(``prio,seq,usec,flags;text``, Documentation/ABI/testing/dev-kmsg) under CK_ROOT, and a real store directory.

Each failing check drains the node with a reason naming the check, records it in the store, and exits 1; a check
that cannot judge (no plan, a name that is not ParallelCluster's) exits 0 and drains nothing. The same commands on
real Slurm across nodes: tests/multinode/test_multinode_health.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit_node.contract.health_plan import Deep, Expect, HealthPlan, QueueHealth, dumps
from clusterkit_node.fleet.health_deep import Pair, judge, ring

REPO = Path(__file__).resolve().parents[2]
NODE = "gpu-st-p5-1"
H100 = "NVIDIA H100 80GB HBM3"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


class World:
    """One node's stand-ins: what its GPUs, EFA devices and kernel log say, and what Slurm was asked."""

    def __init__(self, tmp: Path):
        self.tmp, self.root, self.bin = tmp, tmp / "root", tmp / "bin"
        self.store = tmp / "fsx" / "containers"
        self.store.mkdir(parents=True)
        (self.store / "manifest.json").write_text('{"images": {}}\n')
        self.bin.mkdir()
        (self.root / "proc/sys/kernel/random").mkdir(parents=True)
        (self.root / "dev").mkdir()
        (self.root / "etc/clusterkit").mkdir(parents=True)
        (self.root / "etc/clusterkit/node.env").write_text(f"CK_STORE='{self.store}'\nCK_CLUSTER='demo'\n")
        self.boot("boot-1")
        self.kmsg([])
        self.gpus([(H100, 0)] * 8)
        self.efa(32)
        _script(self.bin / "scontrol", f'printf "%s\\n" "$@" >> {tmp}/scontrol.calls\n')
        self.plan = tmp / "health_plan.json"
        self.write_plan()

    def write_plan(self, quick: bool = True, budget: int = 5) -> None:
        plan = HealthPlan("demo", 300, {"gpu": QueueHealth(quick, budget, {"p5": Expect(8, "H100", 32)},
                                                           Deep(24, 900, 2, 100.0))})
        self.plan.write_text(dumps(plan))

    def boot(self, boot_id: str) -> None:
        (self.root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")

    def kmsg(self, lines: list[str]) -> None:
        (self.root / "dev/kmsg").write_text("".join(f"4,{i},{i * 1000},-;{text}\n" for i, text in enumerate(lines)))

    def gpus(self, rows: list[tuple[str, int]], hang: bool = False) -> None:
        table = "".join(f"{i}, {name}, {ecc}\\n" for i, (name, ecc) in enumerate(rows))
        body = "sleep 30 & wait\n" if hang else f'printf "{table}"\n'
        _script(self.bin / "nvidia-smi", f'[[ "$1" == --query-gpu=index,name,* ]] || exit 9\n{body}')

    def efa(self, devices: int) -> None:
        body = "".join(f'printf "provider: efa\\n    fabric: efa\\n    domain: rdmap{i}s0-rdm\\n"\n'
                       for i in range(devices))
        _script(self.bin / "fi_info", body)

    def check(self, node: str = NODE, tier: str = "quick", plan: Path | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "CK_ROOT": str(self.root), "PATH": f"{self.bin}:/usr/bin:/bin"}
        return subprocess.run([sys.executable, "-m", "clusterkit_node", "health", "check", "--tier", tier,
                               "--source", "prolog", "--node", node, "--plan", str(plan or self.plan)],
                              cwd=REPO, capture_output=True, text=True, timeout=60, env=env)

    def show(self, fmt: str = "json") -> subprocess.CompletedProcess:
        env = {**os.environ, "PATH": f"{self.bin}:/usr/bin:/bin"}
        return subprocess.run([sys.executable, "-m", "clusterkit_node", "health", "show", "--store", str(self.store),
                               "--plan", str(self.plan), "--format", fmt], cwd=REPO, capture_output=True, text=True,
                              timeout=60, env=env)

    def drains(self) -> list[str]:
        calls = self.tmp / "scontrol.calls"
        return [ln for ln in calls.read_text().splitlines() if ln.startswith("Reason=")] if calls.exists() else []

    def history(self) -> list[dict]:
        return json.loads(self.show().stdout)["nodes"].get(NODE, [])


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_healthy_p5_passes_drains_nothing_and_is_recorded(world: World) -> None:
    proc = world.check()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert world.drains() == []
    (entry,) = world.history()
    assert entry["ok"] and entry["tier"] == "quick" and entry["boot_id"] == "boot-1"
    assert {r["check"] for r in entry["results"]} == {"store", "driver", "gpus", "ecc", "xid", "efa"}
    assert entry["seconds"] < 5


@pytest.mark.parametrize(("breakage", "reason"), [
    (lambda w: w.gpus([(H100, 0)] * 7), "gpus: 7 GPUs, expected 8"),
    (lambda w: w.gpus([("NVIDIA A100-SXM4-40GB", 0)] * 8), "gpus: GPU model NVIDIA A100-SXM4-40GB, expected H100"),
    (lambda w: w.gpus([(H100, 0)] * 7 + [(H100, 2)]), "ecc: uncorrected ECC errors since the driver loaded: GPU 7: 2"),
    (lambda w: w.efa(31), "efa: 31 EFA devices, expected 32"),
    (lambda w: w.kmsg(["NVRM: Xid (PCI:0000:97:00): 79, pid=0, GPU has fallen off the bus."]),
     "xid: fatal GPU errors in the kernel log: Xid 79 (PCI:0000:97:00)"),
    (lambda w: shutil.rmtree(w.store), "store: "),
    (lambda w: (w.bin / "nvidia-smi").unlink(), "driver: no nvidia-smi on a node that should have 8 GPUs"),
])
def test_a_failing_quick_check_drains_the_node_with_what_failed(world: World, breakage, reason: str) -> None:
    breakage(world)
    proc = world.check()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (drain,) = world.drains()
    assert drain.startswith(f"Reason=clusterkit health quick: {reason}"), drain
    assert drain.endswith(f"history: clusterkit_node.pyz health show {NODE}") and len(drain) <= len("Reason=") + 200
    if not world.store.exists():  # the drain stands; the history has nowhere to go, and says so
        assert "the check is not recorded on the store: the store did not answer" in proc.stderr
        assert "Traceback" not in proc.stderr
        return
    (entry,) = world.history()
    assert not entry["ok"] and entry["drained"] == drain.removeprefix("Reason=")


def test_a_hung_driver_fails_within_the_budget(world: World) -> None:
    world.gpus([], hang=True)
    world.write_plan(budget=2)
    started = time.monotonic()
    proc = world.check()
    assert time.monotonic() - started < 8, "the budget bounds the check, nvidia-smi's children included"
    assert proc.returncode == 1
    assert world.drains()[0].startswith("Reason=clusterkit health quick: driver: nvidia-smi did not answer within 2 s")


def test_an_xid_fails_the_node_once_and_an_applications_own_xid_never(world: World) -> None:
    world.kmsg(["NVRM: Xid (PCI:0000:53:00): 13, Graphics Exception", "usb 1-1: new device"])
    assert world.check().returncode == 0, "Xid 13 is the application's fault (monitored, not fatal)"
    world.kmsg(["NVRM: Xid (PCI:0000:53:00): 13, Graphics Exception", "usb 1-1: new device",
                "NVRM: Xid (PCI:0000:53:00): 95, pid=1234, Uncontained: FBHUB. RST: Yes"])
    assert world.check().returncode == 1
    assert world.check().returncode == 0, "the same record is not judged twice (the kmsg cursor)"
    world.boot("boot-2")  # a new boot numbers its records from 0 again: all of them are new
    assert world.check().returncode == 1


def test_a_replaced_node_keeps_the_drained_instances_history(world: World) -> None:
    world.gpus([(H100, 0)] * 7)
    assert world.check().returncode == 1
    world.boot("replacement")  # ParallelCluster launched a new instance under the same NodeName
    world.gpus([(H100, 0)] * 8)
    assert world.check(tier="boot").returncode == 0
    first, second = world.history()
    assert (first["boot_id"], first["ok"], bool(first["drained"])) == ("boot-1", False, True)
    assert (second["boot_id"], second["ok"], second["tier"]) == ("replacement", True, "boot")
    table = world.show("table").stdout
    assert NODE in table and "boot/prolog" in table and "drained " in table and "(boot boot-1)" in table
    assert world.check().returncode == 0  # one more pass: the summary keeps the last drain and the last check
    summary = subprocess.run([sys.executable, "-m", "clusterkit_node", "health", "show", "--store", str(world.store),
                              "--plan", str(world.plan), "--summary", "--format", "json"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    drained, last = json.loads(summary.stdout)["nodes"][NODE]
    assert (drained["boot_id"], drained["results"]) == ("boot-1", [{"check": "gpus", "ok": False,
                                                                      "detail": "7 GPUs, expected 8",
                                                                      "seconds": drained["results"][0]["seconds"]}])
    assert (last["ok"], last["source"], last["results"]) == (True, "prolog", [])


def test_show_puts_slurms_state_beside_each_nodes_history(world: World) -> None:
    world.gpus([(H100, 0)] * 7)
    assert world.check().returncode == 1
    # what sinfo -h -N -o '%N|%T|%E' prints on the head node (one line per node and partition)
    _script(world.bin / "sinfo", f'printf "{NODE}|drained|clusterkit health quick: gpus\\ngpu-st-p5-2|idle|none\\n'
                                 f'gpu-st-p5-2|idle|none\\n"\n')
    doc = json.loads(world.show().stdout)
    assert doc["schema"] == "clusterkit.node-health/v1"
    assert doc["slurm"] == {NODE: {"state": "drained", "reason": "clusterkit health quick: gpus"},
                            "gpu-st-p5-2": {"state": "idle", "reason": ""}}
    assert doc["nodes"]["gpu-st-p5-2"] == [], "a node Slurm knows and no check has recorded yet"
    table = world.show("table").stdout.splitlines()
    assert table[0].split() == ["NODE", "SLURM", "LAST", "CHECK", "TIER", "RESULT", "LAST", "DRAIN"]
    assert table[1].split()[:2] == [NODE, "drained"] and "never checked" in table[2]


@pytest.mark.parametrize("case", ["no plan", "not a PC node name", "quick off", "queue not in the plan"])
def test_a_check_that_cannot_judge_drains_nothing(world: World, case: str) -> None:
    world.gpus([(H100, 0)] * 7)  # a node that would fail
    node, plan = NODE, world.plan
    if case == "no plan":
        plan = world.tmp / "missing.json"
    elif case == "not a PC node name":
        node = "ip-10-0-0-5"
    elif case == "quick off":
        world.write_plan(quick=False)
    else:
        node = "cpu-dy-c6i-1"
    proc = world.check(node=node, plan=plan)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert world.drains() == []


def test_show_refuses_a_name_that_is_not_a_nodes_name_in_one_line(world: World) -> None:
    proc = subprocess.run([sys.executable, "-m", "clusterkit_node", "health", "show", "../../etc", "--store",
                           str(world.store), "--plan", str(world.plan)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "health: health show: '../../etc' is not a node or cluster name"


def test_a_plan_the_nodes_refuse_is_one_line(world: World) -> None:
    world.plan.write_text(world.plan.read_text().replace('"gpus": 8', '"gpus": "eight"'))
    proc = world.check()
    assert proc.returncode == 0 and world.drains() == []
    assert "plan.queues.gpu.resources.p5.gpus: 'eight' is not a whole number" in proc.stderr
    assert "Traceback" not in proc.stderr


def _pairs(nodes: list[str], slow: set[str], bw: float = 300.0) -> list[Pair]:
    return [Pair(p, 40.0 if slow & set(p) else bw, "") for p in ring(nodes)]


def test_the_deep_judgement_drains_only_the_node_every_pair_points_at() -> None:
    nodes = ["a", "b", "c", "d"]
    assert ring(nodes) == [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    assert judge(nodes, _pairs(nodes, {"c"}), 100) == (["c"], ["b", "d"])
    assert judge(nodes[:3], _pairs(nodes[:3], {"b"}), 100) == (["b"], ["a", "c"])
    assert judge(nodes, _pairs(nodes, set()), 100) == ([], [])
    # two nodes cannot be told apart; most pairs failing is the threshold or the network, not a node
    assert judge(["a", "b"], _pairs(["a", "b"], {"a"}), 100) == ([], ["a", "b"])
    assert judge(nodes, _pairs(nodes, set(), bw=50.0), 100) == ([], ["a", "b", "c", "d"])
    assert judge(nodes, [Pair(("a", "b"), None, "timed out")] + _pairs(nodes, set())[1:], 100) == ([], ["a", "b"])


def test_a_store_that_hangs_fails_at_the_budget_and_is_not_written_to(world: World, monkeypatch) -> None:
    """A hung Lustre mount blocks listdir in the kernel: the check stops waiting at the budget, and nothing writes
    to the store after (the prolog must not hang on its own record)."""
    from clusterkit_node.fleet import health_checks, health_node

    real_listdir = os.listdir
    monkeypatch.setattr(health_checks.os, "listdir",
                        lambda p: time.sleep(5) or real_listdir(p) if str(p) == str(world.store) else real_listdir(p))
    started = time.monotonic()
    result = health_checks.check_store(str(world.store), health_checks.Budget(0.5))
    assert time.monotonic() - started < 2 and not result.ok
    assert result.detail == f"{world.store} did not answer within 0.5 s (FSx hung?)"
    written = []
    monkeypatch.setattr(health_node.record, "append", lambda *a: written.append(a))
    plan = HealthPlan("demo", 300, {})
    assert not health_node.settle(plan, str(world.store), "quick", "prolog", NODE, [result], 0.5, "b",
                                  {"PATH": str(world.bin)}, do_drain=True)
    assert written == [] and world.drains()[0].startswith("Reason=clusterkit health quick: store: ")
