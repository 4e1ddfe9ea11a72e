"""The node health plan as the CLI side builds it (#40): the spec's ``queues[].health_checks`` and
``scheduling.health_check_interval_s`` with their defaults per family, the rules that refuse what the nodes would,
the Slurm lines render adds, and the plan the bundle ships, which never touches the compute nodes' Args.

Real: the loader (rules included), expand, render_config, node_artifacts and the nodes' own contract
(clusterkit_node/contract/health_plan.py ``parse``) on specs written to tmp_path."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.effective import node_health as health
from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from clusterkit.render.pcluster_config import placeholder_refs, render_config
from clusterkit.spec.errors import SpecError
from clusterkit_node.contract import health_plan
from clusterkit_node.contract.health_plan import Deep, Expect
from tests.spec_text import BASE_SPEC

CPU_QUEUE = """\
  - name: cpu
    compute_resources:
      - name: c6i
        instance_type: c6i.32xlarge
        max: 4
"""


class _Key:
    key, sha256 = "k", "0" * 64


class _Artifacts:
    stage0 = launcher = compute_start = compute_configured = bundle = _Key()
    login_stage0 = None


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return path


def _load(tmp_path: Path, text: str = BASE_SPEC + CPU_QUEUE):
    return load(str(_write(tmp_path, text)), check_lock=False)


def _with_checks(checks: str, text: str = BASE_SPEC) -> str:
    """The spec with ``health_checks`` (a YAML flow mapping) on its first queue, on line 6."""
    return text.replace("  - name: gpu\n", f"  - name: gpu\n    health_checks: {checks}\n", 1)


def _errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(SpecError) as raised:
        _load(tmp_path, text)
    return raised.value.lines()


def test_the_defaults_per_family(tmp_path):
    """p5.48xlarge: 8 H100s and 32 EFA devices (one per network card, PC's launch template), the deep check daily
    with DCGM level 2; a c6i CPU queue: nothing GPU, its one EFA device, no deep check; the quick check everywhere."""
    plan = expand(_load(tmp_path)).health
    assert (plan.cluster, plan.interval_s) == ("t", 300)
    gpu, cpu = plan.queues["gpu"], plan.queues["cpu"]
    assert gpu.resources == {"p5": Expect(gpus=8, gpu_model="H100", efa=32)}
    assert gpu.deep == Deep(every_hours=24, budget_s=900, dcgm_level=2, nccl_min_busbw_gbps=0.0)
    assert cpu.resources == {"c6i": Expect(gpus=0, gpu_model="", efa=1)}
    assert cpu.deep == Deep(every_hours=0, budget_s=900, dcgm_level=0, nccl_min_busbw_gbps=0.0)
    assert (gpu.quick, gpu.quick_budget_s, cpu.quick, cpu.quick_budget_s) == (True, 10, True, 10)


@pytest.mark.parametrize(("instance_type", "efa", "expected"), [
    ("p4d.24xlarge", None, Expect(gpus=8, gpu_model="A100", efa=4)),
    ("p5en.48xlarge", None, Expect(gpus=8, gpu_model="H200", efa=16)),
    ("p6-b300.48xlarge", None, Expect(gpus=8, gpu_model="B300", efa=16)),  # 17 cards, card 0 without EFA
    ("p5.48xlarge", "false", Expect(gpus=8, gpu_model="H100", efa=0)),  # EFA off: no EFA device expected
    ("g5.xlarge", None, Expect(gpus=1, gpu_model="A10G", efa=0)),  # no EFA on the type
    ("g7.48xlarge", None, Expect(gpus=8, gpu_model="", efa=2)),  # "RTX PRO 4500" is not one word nvidia-smi shows
])
def test_what_each_compute_resource_must_show(tmp_path, instance_type, efa, expected):
    text = BASE_SPEC.replace("p5.48xlarge", instance_type) + (f"        efa: {efa}\n" if efa else "")
    assert expand(_load(tmp_path, text)).health.queues["gpu"].resources == {"p5": expected}


def test_the_spec_overrides_every_default(tmp_path):
    text = _with_checks("{quick: false, quick_budget_s: 30, deep: {every_hours: 0, budget_s: 600, dcgm_level: 3, "
                        "nccl_min_busbw_gbps: 150}}") + "scheduling:\n  health_check_interval_s: 600\n"
    plan = expand(_load(tmp_path, text)).health
    queue = plan.queues["gpu"]
    assert (plan.interval_s, queue.quick, queue.quick_budget_s) == (600, False, 30)
    assert queue.deep == Deep(every_hours=0, budget_s=600, dcgm_level=3, nccl_min_busbw_gbps=150.0)


def test_the_nccl_default_needs_a_cited_figure_efa_and_two_nodes(tmp_path, monkeypatch):
    """The table is empty (no cited drain threshold: effective/node_health.py); with a figure in it, the default is that
    figure where the queue has EFA and two nodes, else 0."""
    assert expand(_load(tmp_path)).health.queues["gpu"].deep.nccl_min_busbw_gbps == 0.0
    monkeypatch.setitem(health.NCCL_MIN_BUSBW_GBPS, "p5.48xlarge", (123.0, "test"))
    assert expand(_load(tmp_path)).health.queues["gpu"].deep.nccl_min_busbw_gbps == 123.0
    one_node = BASE_SPEC.replace("max: 2", "max: 1")
    no_efa = BASE_SPEC + "        efa: false\n"
    for text in (one_node, no_efa):
        assert expand(_load(tmp_path, text)).health.queues["gpu"].deep.nccl_min_busbw_gbps == 0.0


@pytest.mark.parametrize(("checks", "line"), [
    ("{quick_budget_s: 0}", "queues[0].health_checks.quick_budget_s: 0 s is outside 1..120"),
    ("{quick_budget_s: 121}", "queues[0].health_checks.quick_budget_s: 121 s is outside 1..120"),
    ("{deep: {every_hours: 1000000}}", "queues[0].health_checks.deep.every_hours: 1000000 h is outside 0..8760"),
    ("{deep: {budget_s: 29}}", "queues[0].health_checks.deep.budget_s: 29 s is outside 30..7200"),
    ("{deep: {dcgm_level: 5}}", "queues[0].health_checks.deep.dcgm_level: 5 is outside 0..4"),
    ("{deep: {nccl_min_busbw_gbps: -1}}",
     "queues[0].health_checks.deep.nccl_min_busbw_gbps: -1 GB/s is outside 0..10000"),
])
def test_out_of_range_values_are_one_line_naming_file_line_and_field(tmp_path, checks, line):
    (error,) = _errors(tmp_path, _with_checks(checks))
    assert "t.yaml:6:" in error, error
    assert line in error and "the range the nodes accept in the health plan" in error and "\n" not in error


def test_the_interval_is_held_to_the_nodes_range(tmp_path):
    (error,) = _errors(tmp_path, BASE_SPEC + "scheduling:\n  health_check_interval_s: 5\n")
    assert ":11:" in error and "scheduling.health_check_interval_s: 5 s is outside 10..86400" in error
    assert "HealthCheckInterval" in error


def test_dcgm_and_nccl_only_where_they_can_run(tmp_path):
    cpu = BASE_SPEC.replace("p5.48xlarge", "c6i.32xlarge")
    (dcgm,) = _errors(tmp_path, _with_checks("{deep: {dcgm_level: 2}}", cpu))
    assert "queues[0].health_checks.deep.dcgm_level: queue 'gpu' has no GPU instance type for DCGM" in dcgm
    (nccl,) = _errors(tmp_path, _with_checks("{deep: {nccl_min_busbw_gbps: 100}}", BASE_SPEC.replace("max: 2",
                                                                                                      "max: 1")))
    assert "nccl_min_busbw_gbps: queue 'gpu' has fewer than 2 nodes" in nccl and "t.yaml:6:" in nccl


def test_render_appends_the_health_check_lines(tmp_path):
    eff = expand(_load(tmp_path, BASE_SPEC + "scheduling:\n  health_check_interval_s: 600\n"))
    settings = render_config(eff, placeholder_refs(eff), _Artifacts())["Scheduling"]["SlurmSettings"]
    assert settings["CustomSlurmSettings"] == [
        {"PrologFlags": "Alloc"}, {"HealthCheckProgram": "/opt/slurm/etc/scripts/clusterkit_health_check"},
        {"HealthCheckInterval": "600"}, {"HealthCheckNodeState": "IDLE"}]


def test_the_bundle_ships_the_effective_plan(tmp_path):
    loaded = _load(tmp_path)
    with zipfile.ZipFile(io.BytesIO(node_artifacts(loaded).bundle.data)) as zf:
        shipped = zf.read(health_plan.PLAN_NAME)
    assert health_plan.parse(json.loads(shipped)) == expand(loaded).health
    assert shipped == health_plan.dumps(expand(loaded).health).encode()


def test_health_settings_never_change_the_compute_nodes_args(tmp_path):
    """A change of thresholds must not replace the compute fleet: the queues (their CustomActions and Args) and the
    bundle's node.args and compute.args stay byte for byte; only the plan and the Slurm lines move."""
    changed = _with_checks("{quick: false, quick_budget_s: 60, deep: {every_hours: 6, budget_s: 300, dcgm_level: 4, "
                           "nccl_min_busbw_gbps: 200}}") + "scheduling:\n  health_check_interval_s: 900\n"
    results = []
    for name, text in (("a", BASE_SPEC), ("b", changed)):
        (tmp_path / name).mkdir()
        loaded = load(str(_write(tmp_path / name, text)), check_lock=False)
        eff = expand(loaded)
        config = render_config(eff, placeholder_refs(eff), _Artifacts())
        with zipfile.ZipFile(io.BytesIO(node_artifacts(loaded).bundle.data)) as zf:
            args = (zf.read("node.args"), zf.read("compute.args"))
        results.append((eff, config, args))
    (before, old, old_args), (after, new, new_args) = results
    assert before.health != after.health
    assert old["Scheduling"]["SlurmQueues"] == new["Scheduling"]["SlurmQueues"]
    assert old_args == new_args and before.node == after.node and before.queues == after.queues
