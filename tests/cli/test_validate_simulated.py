"""``validate --pcluster`` says what its validators met only in simulated AWS (moto) and what only a real
account can check, one line each per rendered config, in text and JSON, through ``python -m clusterkit``.

p4d-existing names made-up ids (subnet-0a1b2c3d4e5f60719, fs-0123456789abcdef0): ParallelCluster's
validators accept them because moto_world creates them; the output must say so instead of a bare "ok".
"""
from __future__ import annotations

import json
import subprocess
import sys

from clusterkit.paths import ROOT

MADE_UP = ("subnet-0a1b2c3d4e5f60719", "subnet-0a1b2c3d4e5f6071a", "fs-0123456789abcdef0")
RENDERED = "cluster_configs/rendered/p4d-existing.yaml"


def validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", "validate", "--pcluster", "p4d-existing", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_text_names_the_simulated_ids_and_what_a_real_account_checks() -> None:
    done = validate()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    simulated = [line for line in lines if line.startswith(f"{RENDERED}: ParallelCluster's validators ran against "
                                                          "simulated AWS answers (moto), not an account: ")]
    real = [line for line in lines if line.startswith(f"{RENDERED}: only a real account can check: ")]
    assert len(simulated) == 1 and len(real) == 1, lines
    assert all(made_up in simulated[0] for made_up in MADE_UP)
    assert "exist only in the simulation" in simulated[0]
    assert "in us-west-2" in real[0] and "EC2 quotas" in real[0] and "HeadNodeLaunchTemplateValidator" in real[0]
    assert "`make deploy CLUSTER=p4d-existing`" in real[0]
    # its existing security groups were made with the EFA and Lustre rules: only --aws reads the real ones
    assert ("the rules of the existing security groups sg-0a1b2c3d4e5f60720 (the simulation gave them EFA's and "
            "Lustre's; `clusterkit validate p4d-existing --aws` reads the real ones)") in real[0]


def test_json_has_the_same_under_pcluster() -> None:
    done = validate("--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is True
    [entry] = doc["pcluster"]
    assert entry["file"] == RENDERED
    ids = {(s["kind"], s["id"]) for s in entry["simulated"]}
    assert {("subnet", MADE_UP[0]), ("subnet", MADE_UP[1]), ("fsx", MADE_UP[2])} <= ids
    assert any("EC2 quotas" in line for line in entry["real_account_only"])


def test_without_pcluster_json_has_no_such_key() -> None:
    done = subprocess.run([sys.executable, "-m", "clusterkit", "validate", "p4d-existing", "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert "pcluster" not in json.loads(done.stdout)
