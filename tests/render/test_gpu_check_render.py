"""Where the deep GPU check runs (clusterkit/effective/gpu_check_place.py), as validate and render see it: boot by
default on the families where DCGM level 2 outlasts a job start (HealthChecks.Gpu off, the boot check's Args on),
PC's prolog check elsewhere, and the spec's choice with the warnings and the one-line error it gets.

Real: the loader (rules included), expand and render_config on specs written to tmp_path."""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.effective import gpu_check_place
from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from clusterkit.render.pcluster_config import placeholder_refs, render_config
from clusterkit.spec.errors import SpecError
from tests.spec_text import BASE_SPEC

BOOT_ARGS = ["CK_GPU_HEALTH=boot", f"CK_GPU_HEALTH_BUDGET={gpu_check_place.BOOT_BUDGET_S}"]


class _Key:
    key, sha256 = "k", "0" * 64


class _Artifacts:
    stage0 = launcher = compute_start = compute_configured = bundle = _Key()
    login_stage0 = None


def _spec(tmp_path: Path, instance_type: str, gpu_line: str = ""):
    text = BASE_SPEC.replace("p5.48xlarge", instance_type)
    if gpu_line:
        text = text.replace("  - name: gpu\n", f"  - name: gpu\n    health_checks: {{gpu: {gpu_line}}}\n")
    (tmp_path / "t.yaml").write_text(text)
    return load(str(tmp_path / "t.yaml"), check_lock=False)


def _queue(loaded) -> dict:
    eff = expand(loaded)
    return render_config(eff, placeholder_refs(eff), _Artifacts())["Scheduling"]["SlurmQueues"][0]


@pytest.mark.parametrize(("instance_type", "where"), [
    ("p5.48xlarge", "boot"), ("p4d.24xlarge", "boot"), ("p5en.48xlarge", "boot"), ("p6-b200.48xlarge", "boot"),
    ("g5.48xlarge", "boot"),  # 8 GPUs: the guess for any type with 4 or more
    ("p5.4xlarge", "boot"),  # the p5 family, one H100
    ("g5.xlarge", "prolog"), ("g6.2xlarge", "prolog"), ("g4dn.xlarge", "prolog"),
])
def test_the_default_place_per_family(tmp_path, instance_type, where):
    queue = _queue(_spec(tmp_path, instance_type))
    assert queue["HealthChecks"] == {"Gpu": {"Enabled": where == "prolog"}}
    args = queue["CustomActions"]["OnNodeConfigured"]["Args"]
    assert (args[-2:] == BOOT_ARGS) is (where == "boot")
    assert queue["CustomActions"]["OnNodeStart"]["Args"] == args


def test_a_cpu_queue_has_neither(tmp_path):
    queue = _queue(_spec(tmp_path, "c6i.2xlarge"))
    assert "HealthChecks" not in queue
    assert not [a for a in queue["CustomActions"]["OnNodeConfigured"]["Args"] if a.startswith("CK_GPU_HEALTH")]


@pytest.mark.parametrize(("choice", "enabled", "warning"), [
    ("boot", False, None), ("prolog", True, "gpu-check-in-job-start"), ("none", False, "gpu-check-none")])
def test_the_spec_chooses_and_validate_says_why(tmp_path, choice, enabled, warning):
    loaded = _spec(tmp_path, "p5.48xlarge", choice)
    assert [w.id for w in loaded.warnings if w.id.startswith("gpu-")] == ([warning] if warning else [])
    queue = _queue(loaded)
    assert queue["HealthChecks"] == {"Gpu": {"Enabled": enabled}}
    assert (queue["CustomActions"]["OnNodeConfigured"]["Args"][-2:] == BOOT_ARGS) is (choice == "boot")
    if warning == "gpu-check-in-job-start":
        shown = next(w for w in loaded.warnings if w.id == warning).render()
        assert "t.yaml:6:" in shown
        assert "aws-parallelcluster#6777" in shown and "180 s" in shown and "health_checks.gpu: boot" in shown


def test_prolog_on_a_small_family_is_not_warned(tmp_path):
    loaded = _spec(tmp_path, "g5.xlarge", "prolog")
    assert not [w for w in loaded.warnings if w.id.startswith("gpu-")]


def test_a_gpu_check_on_a_cpu_queue_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(SpecError) as raised:
        _spec(tmp_path, "c6i.2xlarge", "boot")
    text = str(raised.value)
    assert "t.yaml:6:" in text and "queues[0].health_checks.gpu: queue 'gpu' has no GPU instance type" in text
    assert "remove health_checks.gpu" in text and "Traceback" not in text


def test_a_bare_off_is_refused_with_the_choices(tmp_path):
    with pytest.raises(SpecError) as raised:
        _spec(tmp_path, "p5.48xlarge", "off")
    assert "queues[0].health_checks.gpu: must be one of boot | prolog | none" in str(raised.value)
