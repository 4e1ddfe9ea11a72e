"""Mistakes our spec validation stops before render are mistakes ParallelCluster would reject too.

The list also holds mistakes that once passed our rules and only ParallelCluster caught (uppercase or
reserved names, a head node of another architecture): each is now caught by both.

For each mutation of the demo spec: (1) clusterkit's loader rejects it with a positioned message; (2) the
same spec, parsed WITHOUT our rules and rendered anyway, is rejected by ParallelCluster 3.16.1's own
schema or validate() (real PC code; moto stands in for AWS, see test_pcluster_rendered.py). So our
early errors are not stricter inventions, and users get them at `validate` time instead of at deploy.

ParallelCluster sees every mutation in ONE validate run (``parallelcluster_verdicts``): the check process
pays its ~2.5 s of imports once instead of once per mutation, and checks each config on its own (its own
moto context and fixtures, clusterkit.pcluster.check), so each test still asserts on its own mutation's result.
"""
from __future__ import annotations

from typing import Any

import pytest

from clusterkit.artifacts.bundle import (
    COMPUTE_CONFIGURED,
    COMPUTE_START,
    LAUNCHER,
    LOGIN_STAGE0,
    SCRIPTS,
    STAGE0,
    Artifact,
    NodeArtifacts,
)
from clusterkit.effective.expand import expand_spec
from clusterkit.pcluster.runner import pcluster_python, run_check
from clusterkit.pipeline.loader import CONFIG_DIR, Loaded, load
from clusterkit.render.pcluster_config import placeholder_refs, render_config
from clusterkit.render.rendered_files import NoAliasDumper
from clusterkit.spec.errors import SpecError
from clusterkit.spec.model import LoadedSpec, parse_spec

pytestmark = pytest.mark.skipif(not pcluster_python().exists(), reason="run `make pcluster-venv`")
DEMO = (CONFIG_DIR / "demo.yaml").read_text()


def _login(*pools: str) -> str:
    """A login_nodes block of these pools (each a name line and any more fields), put before containers:."""
    return "login_nodes:\n" + "".join(f"  - {pool}\n    instance_type: c6i.large\n" for pool in pools) + "containers:\n"


MUTATIONS = [
    # (id, old, new, our message fragment, PC validator type)
    ("min above max", "        min: 0\n        max: 4\n", "        min: 5\n        max: 4\n",
     "must be >= min (4 < 5)", "ComputeResourceSizeValidator"),
    ("efa on a type without efa", "instance_type: c6i.2xlarge\n        min: 0\n        max: 8",
     "instance_type: c6i.2xlarge\n        min: 0\n        max: 8\n        efa: true",
     "does not support EFA", "EfaValidator"),
    ("cluster name", "name: demo\n", "name: 2fast\n",
     "not a valid ParallelCluster cluster name", "ClusterNameValidator"),
    ("queue name", "  - name: gpu\n", "  - name: GPU_Queue\n", "is not a valid queue name", "NameValidator"),
    ("uppercase compute resource", "      - name: p5\n", "      - name: P5\n",
     "is not a valid compute resource name", "NameValidator"),
    ("reserved queue name", "  - name: cpu\n", "  - name: default\n", "is not a valid queue name", "NameValidator"),
    ("head node of another architecture", "head_node:\n  instance_type: c6i.2xlarge\n",
     "head_node:\n  instance_type: c7g.2xlarge\n", "the compute nodes are x86_64",
     "InstanceArchitectureCompatibilityValidator"),
    ("capacity block without reservation", "    capacity_type: ondemand\n", "    capacity_type: capacity_block\n",
     "capacity_block needs capacity_reservation_id", None),
    # mount directories: ParallelCluster's reserved list and its file_path pattern (clusterkit/rules/limits.py)
    ("mount_dir over /etc", "    mount_dir: /fsx\n", "    mount_dir: /etc\n",
     "is a system directory ParallelCluster reserves", "SharedStorageMountDirValidator"),
    ("mount_dir climbing out with ..", "    mount_dir: /fsx\n", "    mount_dir: /fsx/..\n",
     "has a '..' part", "ConfigSchemaValidator"),
    ("mount_dir with a trailing slash", "    mount_dir: /fsx\n", "    mount_dir: /fsx/\n",
     "ends with '/'", "ConfigSchemaValidator"),
    # LoginNodes pools (clusterkit/rules/login_nodes.py; PC 3.16.1 LoginNodesPoolSchema and its validators)
    ("login pool name", "containers:\n", _login("name: Login_1"), "is not a valid login node pool name",
     "NameValidator"),
    ("reserved login pool name", "containers:\n", _login("name: default"), "is not a valid login node pool name",
     "NameValidator"),
    ("login gracetime below 3", "containers:\n", _login("name: login\n    gracetime_minutes: 2"),
     "is outside 3 to 120 minutes", "ConfigSchemaValidator"),
    ("login gracetime above 120", "containers:\n", _login("name: login\n    gracetime_minutes: 121"),
     "is outside 3 to 120 minutes", "ConfigSchemaValidator"),
    ("negative login count", "containers:\n", _login("name: login\n    count: -1"), "must be >= 0 (got -1)",
     "ConfigSchemaValidator"),
    ("duplicate login pool", "containers:\n", _login("name: login", "name: login"),
     "duplicate login node pool name 'login'", "DuplicateNameValidator"),
    ("eleven login pools", "containers:\n", _login(*(f"name: login{i}" for i in range(11))),
     "11 login node pools; ParallelCluster allows 10", "MaxCountValidator"),
]


def _artifacts(loaded: Loaded) -> NodeArtifacts:
    """The node scripts and a stand-in bundle: node_artifacts refuses to build the bundle of a spec whose health plan
    the nodes would refuse (a cluster or queue name the rules refuse makes one), and ParallelCluster's checks read
    only the objects' keys."""
    def script(name: str) -> Artifact:
        return Artifact(name, (SCRIPTS / name).read_bytes())

    return NodeArtifacts(stage0=script(STAGE0), launcher=script(LAUNCHER), compute_start=script(COMPUTE_START),
                         compute_configured=script(COMPUTE_CONFIGURED),
                         bundle=Artifact(f"{loaded.spec.name}-bundle.zip", b"stand-in"),
                         login_stage0=script(LOGIN_STAGE0) if loaded.spec.login_nodes else None)


def _render_unchecked(text: str, tmp_path) -> tuple[str, str]:
    import yaml

    path = tmp_path / "demo.yaml"
    path.write_text(text)
    spec, marks, problems = parse_spec(text, str(path))
    assert spec is not None and not problems
    loaded = Loaded(spec=spec, source=LoadedSpec(spec=spec, path=CONFIG_DIR / "demo.yaml", marks=marks))
    effective = expand_spec(spec)  # total on specs the rules refuse
    config = render_config(effective, placeholder_refs(effective), _artifacts(loaded))
    return spec.name, yaml.dump(config, Dumper=NoAliasDumper, sort_keys=False)


@pytest.fixture(scope="module")
def parallelcluster_verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Mutation id -> ParallelCluster's result for that mutation rendered WITHOUT our rules, all checked
    in one ``run_check`` call (one process; each config still gets its own moto world)."""
    configs = []
    for case, old, new, _ours, _theirs in MUTATIONS:
        name, rendered = _render_unchecked(DEMO.replace(old, new, 1), tmp_path_factory.mktemp("agrees"))
        configs.append((name, case, rendered, "us-east-1"))
    return {result["path"]: result for result in run_check(configs, "validate")}


@pytest.mark.parametrize("case,old,new,ours,theirs", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_parallelcluster_rejects_what_we_reject(tmp_path, parallelcluster_verdicts, case, old, new, ours, theirs):
    assert old in DEMO
    text = DEMO.replace(old, new, 1)
    path = tmp_path / "demo.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load(str(path), check_lock=False)
    assert any(ours in line for line in info.value.lines()), info.value.lines()

    result = parallelcluster_verdicts[case]
    errors = [e for e in result["errors"] if e["level"] == "ERROR"]
    assert not result["ok"] and errors, "ParallelCluster accepted what clusterkit rejects"
    if theirs:
        assert theirs in {e["type"] for e in errors}, errors
