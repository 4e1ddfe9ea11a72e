"""login_nodes: ParallelCluster's LoginNodes pools in the spec. Every mistake PC 3.16.1 would refuse (its pool schema
and validators: tests/pcluster/test_pcluster_agrees.py shows PC refuses each one too), and a pool that could not boot
(another CPU architecture than the head node's AMI), is one positioned line with a hint; the effective spec carries
the pools as written, with ParallelCluster's defaults (count 1, gracetime 10 minutes).
"""
from __future__ import annotations

import pytest

from clusterkit.effective.expand import expand
from clusterkit.paths import ROOT
from clusterkit.pipeline.loader import load
from clusterkit.spec.errors import SpecError
from tests import in_process
from tests.spec_text import BASE_SPEC


def _spec(*pools: str) -> str:
    """BASE_SPEC with these pools (YAML mapping bodies, first line after '- ')."""
    return BASE_SPEC + "login_nodes:\n" + "".join(f"  - {pool}\n" for pool in pools)


POOL = "name: login\n    instance_type: c6i.large"


def _errors(tmp_path, text: str) -> list[str]:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load(str(path), check_lock=False)
    return [line.removeprefix(f"{path}:") for line in info.value.lines()]


def test_a_pool_takes_parallelclusters_defaults(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(_spec(POOL))
    (pool,) = expand(load(str(path), check_lock=False)).login_nodes
    assert (pool.name, pool.instance_type, pool.count, pool.gracetime_minutes) == ("login", "c6i.large", 1, 10)


def test_no_pools_by_default(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(BASE_SPEC)
    assert expand(load(str(path), check_lock=False)).login_nodes == ()


CASES = [
    ("bad name", _spec("name: Login_1\n    instance_type: c6i.large"),
     ["11:11: login_nodes[0].name: 'Login_1' is not a valid login node pool name (lowercase letter first; lowercase "
      "letters, digits, hyphens; at most 25; not 'default')"]),
    ("unknown instance type", _spec("name: login\n    instance_type: c6i.larg"),
     ["12:20: login_nodes[0].instance_type: unknown instance type 'c6i.larg' (did you mean 'c6i.large'?)"]),
    ("another architecture than the head node", _spec("name: login\n    instance_type: c7g.large"),
     ["12:20: login_nodes[0].instance_type: c7g.large is arm64, the head node is x86_64 (login nodes boot the head "
      "node's AMI (ParallelCluster picks it by the head node's architecture): pick a login instance type of the "
      "same architecture)"]),
    ("negative count", _spec(POOL + "\n    count: -1"),
     ["13:12: login_nodes[0].count: must be >= 0 (got -1) (0 stops the pool's login nodes; set the number of login "
      "nodes to run)"]),
    ("gracetime out of range", _spec(POOL + "\n    gracetime_minutes: 121"),
     ["13:24: login_nodes[0].gracetime_minutes: 121 is outside 3 to 120 minutes (ParallelCluster's GracetimePeriod "
      "takes 3 to 120; its default is 10)"]),
    ("duplicate pool", _spec(POOL, POOL),
     ["13:11: login_nodes[1].name: duplicate login node pool name 'login' (names must be unique)"]),
    ("root volume: PC 3.16.1 pools have none", _spec(POOL + "\n    root_volume_gib: 100"),
     ["13:5: login_nodes[0].root_volume_gib: unknown key "
      "(allowed keys: count, gracetime_minutes, instance_type, name)"]),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_pool_is_one_positioned_line(tmp_path, text, expected):
    assert _errors(tmp_path, text) == expected


def test_eleven_pools_are_refused(tmp_path):
    (line,) = _errors(tmp_path, _spec(*(f"name: l{i}\n    instance_type: c6i.large" for i in range(11))))
    assert line == ("11:3: login_nodes: 11 login node pools; ParallelCluster allows 10 (merge pools of the same "
                    "instance type (count sets how many nodes a pool runs))")


def test_validate_cli_says_one_line_and_exits_2(tmp_path):
    """Through the real entry point (tests/in_process.py): `clusterkit validate`, no traceback."""
    path = tmp_path / "t.yaml"
    path.write_text(_spec(POOL + "\n    gracetime_minutes: 2"))
    r = in_process.clusterkit("validate", str(path), cwd=ROOT)
    assert r.returncode == 2, r
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"{path}:13:24: login_nodes[0].gracetime_minutes: 2 is outside 3 to 120 minutes")


SMALL_SUBNET = """\
name: t
region: us-east-1
availability_zone: us-east-1a
network:
  existing:
    vpc_id: vpc-0123456789abcdef0
    head_node_subnet_id: subnet-0123456789abcdef0
    compute_subnet_id: subnet-0123456789abcdef1
    compute_subnet_cidr: 10.0.0.0/28
queues:
  - name: cpu
    compute_resources:
      - name: c
        instance_type: c6i.large
        max: 8
"""


def test_login_nodes_and_their_load_balancer_count_against_the_compute_subnet(tmp_path):
    """A /28 has 11 usable addresses: the head node and 8 compute nodes fit; 2 login nodes and the pool's load balancer
    (all in the compute subnet) do not."""
    path = tmp_path / "t.yaml"
    path.write_text(SMALL_SUBNET)
    load(str(path), check_lock=False)
    (line,) = _errors(tmp_path, SMALL_SUBNET + "login_nodes:\n  - " + POOL + "\n    count: 2\n")
    assert "network.existing.compute_subnet_cidr: compute subnet has 11 usable addresses but max nodes need 12" in line
