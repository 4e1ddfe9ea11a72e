"""A checkout with a user's own specs in cluster_configs/ passes the tests that read the shipped examples.

Was: with two `clusterkit init` specs there, `make test-fast` failed 14 tests (they enumerated the folder, and
demanded a render, prices and a lock for every spec in it). Here: this checkout's tracked files copied, two specs
a user makes (`g5-west`, g5.12xlarge in us-west-2, not rendered; `my-east` on the shipped research-east platform,
locked), then pytest in the copy on the test files that read cluster_configs/ most. pytest in a copy is a second
process, so this file is in the ``process`` tier (tests/tiers.py).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from clusterkit.paths import ROOT
from tests import in_process

# The unit-tier files that read the checkout's specs: renders, validate/render --check, a platform's members, costs.
FILES = ("tests/render/test_render.py", "tests/cli/test_cli_output.py", "tests/cli/test_specs_anywhere.py",
         "tests/cost/test_cost_estimate.py", "tests/cost/test_price_build.py", "tests/spec/test_schema.py",
         "tests/contracts/test_fixture_specs.py")


def _copy_checkout(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for rel in filter(None, listed.stdout.split("\0")):
        source = ROOT / rel
        if source.is_file() and not source.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


def _user_specs(configs: Path) -> None:
    """What a user does after reading the README: init two specs, put one on the platform, lock it."""
    done = in_process.clusterkit("init", "--name", "g5-west", "--region", "us-west-2", "--instance-type",
                                 "g5.12xlarge", "-o", f"{configs}/", cwd=configs)
    assert done.returncode == 0, done.stderr
    done = in_process.clusterkit("init", "--name", "my-east", "--instance-type", "p4d.24xlarge", "--max-nodes", "3",
                                 "-o", f"{configs}/", cwd=configs)
    assert done.returncode == 0, done.stderr
    spec = configs / "my-east.yaml"
    text = spec.read_text(encoding="utf-8").replace("name: my-east\n", "name: my-east\nplatform: research-east\n", 1)
    spec.write_text(text + "\nsecurity:\n  trust_domain: research-team\n", encoding="utf-8")
    done = in_process.clusterkit("lock", str(spec), cwd=configs)
    assert done.returncode == 0, done.stderr


def test_the_spec_reading_tests_pass_beside_a_users_specs(tmp_path: Path) -> None:
    copy = _copy_checkout(tmp_path / "checkout")
    _user_specs(copy / "cluster_configs")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", "-m", "unit", *FILES], cwd=copy, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert (copy / "cluster_configs" / "g5-west.yaml").is_file() and not (copy / "cluster_configs" / "rendered" /
                                                                        "g5-west.yaml").exists()
