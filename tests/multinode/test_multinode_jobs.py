"""Jobs across a real multi-node cluster: one head node, three compute nodes (own namespaces, own slurmd),
one store, the Debian-built PyTorch + Open MPI image, REAL enroot + pyxis of both generations.

What it proves that one node could not: the store's one file starts on three nodes at once; Slurm places
ranks on three hosts; enroot's Slurm hooks hand each container what a distributed job needs (the
pytorch hook's MASTER_ADDR/RANK/WORLD_SIZE, the PMI hook's PMIx variables and mounts); gloo and Open MPI
reach each other between containers on different hosts over the fabric; and the registry is asked for
nothing after the head node's import.
"""
from __future__ import annotations

import json
import math
import time

import pytest
import runtime_build
from cluster_flow import SHARED
from fleet import QUEUE, compute_names
from fleet_flow import IMAGE, STORE
from lifecycle import Lifecycle
from tier import stage_for

from clusterkit_node.image.versions import version_key
from jobs import DDP_STEP, images_started, run_3x2


def test_every_compute_node_booted_joined_and_fingerprinted(up) -> None:
    names = [n.slurm_node for n in up.fleet.computes]
    for boot in up.compute_boots:
        assert [phase for phase, _ in boot.steps] == ["init", "OnNodeStart", "config", "OnNodeConfigured",
                                                      "finalize"]
    manifest = json.loads((up.fleet.fsx / "containers" / "manifest.json").read_text())
    assert manifest["images"][IMAGE]["digest"] == up.digest == up.lock.images[0].digest, up.sync_log
    stored = sorted(str(p.relative_to(up.fleet.fsx)) for p in (up.fleet.fsx / "containers").rglob("*.sqsh"))
    assert f"containers/{IMAGE}/{up.digest.removeprefix('sha256:')}.sqsh" in stored, (stored, up.sync_log)
    prints = sorted(p.stem for p in (up.fleet.fsx / ".containers.clusterkit" / "nodes").glob("*/*.json"))
    assert set(names) <= set(prints)


def test_a_ddp_step_spans_three_nodes_and_equals_one_process(up) -> None:
    got, out = run_3x2(up, "ddp_step.py", DDP_STEP)
    assert {r["world"] for r in got} == {6}
    hex_digest = up.digest.removeprefix("sha256:")
    assert images_started(out) == {n: f"{STORE}/{IMAGE}/{hex_digest}.sqsh" for n in compute_names(3)}, out
    assert sorted({r["node"] for r in got}) == compute_names(3)
    # Debian builds 1.13.1 from a tree that calls itself 1.13.0a0 (torch.__version__)
    assert {r["torch"][:4] for r in got} == {"1.13"} and {r["master"] for r in got} == {compute_names(1)[0]}
    assert len({json.dumps(r["grads"]) for r in got}) == 1, "every rank ends with the same allreduced gradient"
    (line,) = [line for line in out.splitlines() if line.startswith("single ")]
    expected = json.loads(line.removeprefix("single "))
    assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(got[0]["grads"], expected))
    assert up.registry.log == [], "no node asked the registry for anything after the head node's import"


# --- drift across real nodes ----------------------------------------------------------------------------------

def drift(up) -> tuple[int, dict]:
    proc = up.fleet.head.run(["python3", f"{SHARED}/clusterkit_node.pyz", "drift", "--store", STORE, "--format",
                              "json"], check=False)
    return proc.returncode, json.loads(proc.stdout)


def other_generation(up):
    return next(g for k, g in runtime_build.GENERATIONS.items() if k != up.generation.key)


def test_identical_nodes_show_no_drift_and_another_generation_is_named(up) -> None:
    """Three nodes booted from one bundle: one fingerprint. A fourth node of the other enroot + pyxis generation:
    where its pyxis can take the head node's plugstack line (a newer pyxis) it joins and drift names it with the
    differing versions; where it cannot (an older pyxis than the line was written for) its boot fails in one
    line and it records nothing."""
    rc, report = drift(up)
    assert (rc, report["drift"], report["queues"][QUEUE]["nodes"]) == (0, False, 3), report
    other = other_generation(up)
    name = compute_names(1, first=4)[0]
    node = up.fleet.extra_node(name, stage_for(other.key))
    fingerprint = up.fleet.fsx / ".containers.clusterkit" / "nodes" / up.spec_path.stem / f"{name}.json"
    try:
        boot = Lifecycle(node, up.compute_args)
        if version_key(other.pyxis_version) > version_key(up.generation.pyxis_version):
            boot.compute_boot(first=True, until="OnNodeConfigured")
            rc, report = drift(up)
            queue = report["queues"][QUEUE]
            assert rc == 1 and report["drift"] and {"enroot", "pyxis"} <= set(queue["differing_fields"]), report
            odd = next(g for g in queue["groups"] if name in g["nodes"])
            assert odd["nodes"] == [name]
            assert (odd["fingerprint"]["enroot"], odd["fingerprint"]["pyxis"]) == (other.enroot_version,
                                                                                    other.pyxis_version)
        else:
            with pytest.raises(AssertionError) as failed:
                boot.compute_boot(first=True, until="OnNodeConfigured")
            assert f"pyxis {other.pyxis_version}" in str(failed.value), failed.value
            assert not fingerprint.exists()
            assert drift(up)[1]["drift"] is False
    finally:
        node.stop()
        fingerprint.unlink(missing_ok=True)


# --- IMDS on the fleet's compute nodes (security.compute_imds: root_only, the default) ---------------------------

PROBE = ("import sys, urllib.request\n"
         "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=1).status)\n"
         "except Exception as exc:\n    print(type(exc).__name__)\n")


def test_the_boot_locked_imds_to_root_on_every_compute_node(up) -> None:
    """The real OnNodeStart of every compute node (each in its own network namespace) hooked ClusterKit's chain into
    OUTPUT: on a stand-in IMDS at 169.254.169.254 in the node's namespace, root is answered and a job user is not,
    while the jobs above ran across the same nodes."""
    for node, boot in zip(up.fleet.computes, up.compute_boots):
        assert "IMDS: root only on this compute node" in boot.output, boot.output
        rules = node.run(["iptables", "-S"]).stdout.splitlines()
        assert "-A OUTPUT -d 169.254.169.254/32 -j CLUSTERKIT_IMDS" in rules, rules
        node.run(["ip", "addr", "add", "169.254.169.254/32", "dev", "lo"])
        node.spawn("imds-standin", ["python3", "-m", "http.server", "80", "--bind", "169.254.169.254"])
        try:
            url = "http://169.254.169.254/"
            for _ in range(50):
                if node.run(["python3", "-c", PROBE, url]).stdout.strip() == "200":
                    break
                time.sleep(0.1)
            assert node.run(["python3", "-c", PROBE, url]).stdout.strip() == "200"
            assert node.run(["python3", "-c", PROBE, url], user="ckuser1").stdout.strip() == "URLError"
        finally:
            server = node.daemons.pop("imds-standin")
            server.kill()
            server.wait()
            node.run(["ip", "addr", "del", "169.254.169.254/32", "dev", "lo"], check=False)
