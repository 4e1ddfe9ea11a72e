"""`python -m clusterkit validate` warns when an image's expected versions break a compatibility rule.

Real: the spec loader, rules.check with its compat hook, the committed rules file, the CLI as a
subprocess. Validate knows only each image's `expect`; versions recorded from the .sqsh files are
checked on the nodes (test_drift_fingerprint.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.pipeline.loader import load
from clusterkit.rules import compat_rules as compat
from clusterkit.spec.errors import SpecError
from tests.spec_text import BASE_SPEC

REPO = Path(__file__).resolve().parents[2]

SPEC = BASE_SPEC + """\
containers:
  images:
    - name: ok
      uri: nvcr.io/nvidia/pytorch:25.01-py3
      expect:
        cuda: "12.8"
        nccl: 2.25.1
        efa_installer: 1.38.0
    - name: old-efa
      uri: public.ecr.aws/hpc-cloud/nccl-tests:latest
      expect:
        nccl: 2.21.5
        aws_ofi_nccl: 1.9.1
        efa_installer: 1.28.0
    - name: future
      uri: nvcr.io/nvidia/pytorch:28.01-py3
      expect:
        cuda: "14.0"
"""


def compat_warnings(loaded) -> list[str]:
    """Only this feature's warnings (other rules may add advice of their own)."""
    text = [w.render() for w in loaded.warnings]
    return [t for t in text if "compat_rules.json" in t]


def test_expected_versions_breaking_a_rule_warn_at_the_expect_key(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SPEC)
    loaded = load(str(path), check_lock=False)
    rel = "clusterkit/data/compat_rules.json"
    assert compat_warnings(loaded) == [
        f"{path}:23:24: warning[image-expect-incompatible]: containers.images[1].expect.efa_installer: image "
        f"old-efa: NCCL 2.21.5 needs "
        f"EFA installer >= 1.29 (it has 1.28.0) (libfabric from EFA installers before 1.29 fails NCCL "
        f"2.19+ GPU memory registration (NET/OFI Unable to register memory, RC: -22); workaround "
        f"FI_EFA_SET_CUDA_SYNC_MEMOPS=0; rule nccl-2.19-needs-efa-installer-1.29 in {rel})",
        f"{path}:27:15: warning[image-expect-incompatible]: containers.images[2].expect.cuda: image future: no "
        f"rule gives the minimum "
        f"NVIDIA driver for CUDA 14.0, so nodes cannot check their driver against it (add the CUDA major "
        f"version to an error-level driver_for_cuda rule; rule compat-coverage in {rel})",
    ]


def test_warnings_do_not_fail_validation(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SPEC)
    proc = subprocess.run([sys.executable, "-m", "clusterkit", "validate", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert ("warning[image-expect-incompatible]: containers.images[1].expect.efa_installer: image old-efa"
            in proc.stderr)
    assert proc.returncode in (0, 2)
    # exit 2 may only come from the missing lock of this throwaway spec, never from a compat warning
    errors = [ln for ln in proc.stderr.splitlines() if ": warning[" not in ln and ln.strip()]
    assert all("lock" in ln for ln in errors), errors


@pytest.mark.parametrize("name", ["p4d-existing", "p5-capacity-block"])
def test_committed_specs_raise_no_compat_warning(name):
    assert compat_warnings(load(name)) == []


def test_demo_image_is_not_covered_by_the_aws_ofi_nccl_notes():
    """AWS's nccl-tests image pairs aws-ofi-nccl 1.19.0 with NCCL 2.30.4: the 1.19 notes name NCCL up to 2.29.7
    (NCCL 2.30's plugin interface came with 1.20.0), so the generated rules warn 'not covered', under an id of its
    own (untested is not incompatible), which the demo acknowledges with its reason."""
    loaded = load("demo")
    assert compat_warnings(loaded) == []
    found = [a.problem.render() for a in loaded.acknowledged if "compat_rules.json" in a.problem.render()]
    assert len(found) == 1 and (
        "warning[image-combination-untested]: containers.images[0].expect.nccl: image nccl-tests: NCCL 2.30.4 is "
        "newer than every NCCL aws-ofi-nccl 1.19.0 was tested with (2.27.3, 2.28.7, 2.29.2, 2.29.7, aws-ofi-nccl "
        "release notes v1.18.0 to v1.19.2): not covered") in found[0]
    assert "rule ofi-notes-1.18.0-to-1.19.2-nccl-tested in clusterkit/data/compat_rules.json" in found[0]


def test_broken_rules_file_is_an_error_not_a_traceback(tmp_path, monkeypatch):
    bad = tmp_path / "compat_rules.json"
    bad.write_text('{"source": "x", "as_of": "2026-11-30", "rules": [\n')
    monkeypatch.setattr(compat, "RULES_PATH", bad)
    monkeypatch.setattr(compat, "REPO", tmp_path)
    compat.rules.cache_clear()
    path = tmp_path / "t.yaml"
    path.write_text(SPEC)
    try:
        with pytest.raises(SpecError) as info:
            load(str(path), check_lock=False)
    finally:
        compat.rules.cache_clear()
    lines = [p.render() for p in info.value.problems if "compatibility rules" in p.message]
    assert lines == ["compat_rules.json:2:1: compatibility rules unusable: not valid JSON: Expecting value"]
