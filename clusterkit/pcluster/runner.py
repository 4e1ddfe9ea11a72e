"""Ask ParallelCluster itself (the version requirements-pcluster.txt pins) about rendered configs.

aws-parallelcluster cannot share a venv with aws-cdk-lib, so it lives in ``.venv-pcluster`` and this
module talks to it through a subprocess and JSON (``clusterkit.pcluster.check`` and
``clusterkit.pcluster.policies``). Nothing here imports pcluster.

The interpreter is ``$CLUSTERKIT_PCLUSTER_PYTHON`` if set, else ``<root>/.venv-pcluster/bin/python``
(``clusterkit.paths.PCLUSTER_PYTHON``).
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from clusterkit.paths import PCLUSTER_PYTHON, ROOT
from clusterkit.spec.errors import ClusterKitError
from clusterkit.spec.files import make_command

PYTHON_ENV_VAR = "CLUSTERKIT_PCLUSTER_PYTHON"
TIMEOUT_SECONDS = 600

Mode = Literal["schema", "validate"]
ConfigToCheck = tuple[str, str, str, str]  # (cluster name, path shown to users, YAML text, region)


class PclusterVenvMissing(ClusterKitError):
    """The ParallelCluster venv is not there: the fix is one make target."""


class PclusterCheckFailed(ClusterKitError):
    """The checker itself crashed (not: a config failed a check)."""


def pcluster_python() -> Path:
    """Where the ParallelCluster venv's interpreter is expected (it may not exist: see ``.exists()``)."""
    configured = os.environ.get(PYTHON_ENV_VAR)
    return Path(configured) if configured else PCLUSTER_PYTHON


def require_pcluster_python() -> Path:
    """The interpreter, or a one-line error naming the command that creates the venv."""
    python = pcluster_python()
    if not python.exists():
        raise PclusterVenvMissing(
            f"ParallelCluster venv missing: run `{make_command('pcluster-venv')}` (no interpreter at {python})"
        )
    return python


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("VIRTUAL_ENV", None)
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_EC2_METADATA_DISABLED="true",
    )
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return env


def _run_module(module: str, stdin: str) -> str:
    python = require_pcluster_python()
    try:
        done = subprocess.run(
            [str(python), "-m", module],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_child_env(),
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PclusterCheckFailed(f"{module} did not finish within {TIMEOUT_SECONDS} s") from exc
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise PclusterCheckFailed(f"{module} exited {done.returncode}: {tail}")
    return done.stdout


def run_check(
    configs: Sequence[ConfigToCheck], mode: Mode, *, suppress_moto_gaps: bool = True
) -> list[dict[str, Any]]:
    """Check each config with PC's schema (``schema``) or schema + ``validate()`` under moto (``validate``).

    Returns one dict per config, in order: ``{"name", "path", "mode", "ok", "errors": [{"level", "type",
    "message", "line", "col"}], "suppressed": [{"type", "message"}], "seconds", "simulated": [{"kind", "id"}]}``
    (``simulated``: the resources that existed only in moto, validate mode; ``clusterkit.pcluster.simulation``).
    """
    if mode not in ("schema", "validate"):
        raise ValueError(f"mode must be 'schema' or 'validate', got {mode!r}")
    if not configs:
        return []
    request = {
        "mode": mode,
        "suppress_moto_gaps": suppress_moto_gaps,
        "configs": [
            {"name": name, "path": path, "yaml": text, "region": region} for name, path, text, region in configs
        ],
    }
    stdout = _run_module("clusterkit.pcluster.check", json.dumps(request))
    results = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    if len(results) != len(configs):
        raise PclusterCheckFailed(f"expected {len(configs)} results from clusterkit.pcluster.check, got {len(results)}")
    return results


def format_problems(results: Iterable[dict[str, Any]], *, warnings: bool = True) -> list[str]:
    """One line per finding: ``path[:line:col]: [warning: ]ParallelCluster <Type>: <message>``."""
    lines = []
    for result in results:
        for error in result["errors"]:
            is_error = error["level"] == "ERROR"
            if not is_error and not warnings:
                continue
            where = result["path"]
            if error.get("line"):
                where += f":{error['line']}:{error.get('col') or 1}"
            prefix = "" if is_error else f"{error['level'].lower()}: "
            lines.append(f"{where}: {prefix}ParallelCluster {error['type']}: {error['message']}")
    return lines


@functools.lru_cache(maxsize=1)
def _policies_json() -> str:
    return _run_module("clusterkit.pcluster.policies", "")


def update_policies() -> dict[str, dict[str, Any]]:
    """Config path (``Scheduling.SlurmQueues[].ComputeResources[].MaxCount``) -> policy entry.

    Each entry: ``{"policy", "level", "kind", "description"}`` plus ``update_key`` for lists and
    ``fail_reason`` / ``action_needed`` where ParallelCluster words them specially.
    """
    policies: dict[str, dict[str, Any]] = json.loads(_policies_json())
    return policies
