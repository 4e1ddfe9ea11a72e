"""The EFA devices the health plan expects per node (clusterkit/effective/node_health.py ``efa_devices``) are the EFA
interfaces ParallelCluster 3.16.1's compute launch template gives the node: its own ``add_network_interfaces``
(pcluster/templates/queues_stack.py) run on every EFA type of the catalog, so the day an upgrade changes how many
EFA interfaces a node gets, this fails instead of the quick check draining every node of the queue.

Real: the installed aws-parallelcluster 3.16.1 in .venv-pcluster, called with stand-ins for the compute resource
and queue that carry the catalog's DescribeInstanceTypes counts (MaximumNetworkCards, MaximumEfaInterfaces)."""
from __future__ import annotations

import json
import subprocess

import pytest
from pcluster_helpers import needs_pcluster_venv

from clusterkit.catalog import lookup as catalog
from clusterkit.effective.node_health import efa_devices
from clusterkit.pcluster.runner import pcluster_python

pytestmark = needs_pcluster_venv

# Counts the interfaces ParallelCluster's function puts in the launch template with EFA enabled. Card 0's ENI
# limit decides only between an efa-only ENI beside the primary one and a combined efa ENI (both one EFA device),
# so both limits are tried.
PROBE = """
import json, sys
from types import SimpleNamespace as NS
from pcluster.aws.aws_resources import NetworkCardInfo
from pcluster.templates.queues_stack import add_network_interfaces
out = {}
for name, facts in json.load(sys.stdin).items():
    counts = set()
    for card0_enis in (1, 2):
        cards = [NetworkCardInfo({"NetworkCardIndex": i, "MaximumNetworkInterfaces": card0_enis if i == 0 else 2})
                 for i in range(facts["cards"])]
        resource = NS(instance_types=[name], efa=NS(enabled=True), max_efa_interfaces=facts["efa"],
                      max_network_cards=facts["cards"], network_cards_list=cards)
        queue = NS(networking=NS(assign_public_ip=False, subnet_ids=["subnet-0"]))
        nics = add_network_interfaces(queue, resource, ["sg-0"])
        counts.add(sum(1 for nic in nics if nic.interface_type in ("efa", "efa-only")))
    out[name] = sorted(counts)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def pc_counts() -> dict[str, list[int]]:
    types = {name: {"cards": f.max_network_cards, "efa": f.max_efa_interfaces}
             for name in catalog.instance_type_names()
             if (f := catalog.instance_type(name)) is not None and f.efa_supported}
    done = subprocess.run([str(pcluster_python()), "-c", PROBE], input=json.dumps(types), capture_output=True,
                          text=True, timeout=300, check=True)
    counts: dict[str, list[int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


def test_every_efa_type_gets_the_devices_parallelclusters_launch_template_makes(pc_counts):
    assert len(pc_counts) > 20  # the catalog's EFA types, p5 to c5n
    assert {name: [efa_devices(name)] for name in pc_counts} == pc_counts


def test_the_cases_the_docstring_names(pc_counts):
    assert (pc_counts["p5.48xlarge"], pc_counts["p4d.24xlarge"], pc_counts["c5n.18xlarge"]) == ([32], [4], [1])
    assert pc_counts["p6-b300.48xlarge"] == [16]  # 17 network cards, card 0 without EFA
