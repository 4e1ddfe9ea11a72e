"""`clusterkit_node.pyz drift` on the head node: fingerprints grouped per queue, differing fields as a table.

Real: the node zipapp as a subprocess over fingerprint files shaped exactly like `fingerprint` writes them
(compat_harness.write_fingerprint, checked against a real one in test_fixture_matches_a_real_fingerprint),
the committed rules file for re-checking drivers against the images the store serves now.
"""
from __future__ import annotations

import json

from compat_harness import write_fingerprint


def lines(proc) -> list[str]:
    return [ln.rstrip() for ln in proc.stdout.splitlines()]


def test_fixture_matches_a_real_fingerprint(node):
    node.write_lock([node.image("a")])
    node.store.mkdir()
    assert node.fingerprint("gpu-st-p5-1").returncode == 0
    real = node.fingerprint_doc("gpu-st-p5-1")
    fixture = json.loads(write_fingerprint(node.root / "other", "gpu-st-p5-1").read_text())
    assert sorted(real) == sorted(fixture)


def test_identical_nodes_no_drift(node):
    for i in range(1, 4):
        write_fingerprint(node.store, f"gpu-st-p5-{i}")
    proc = node.drift()
    assert proc.returncode == 0, proc.stderr
    assert lines(proc) == ["queue gpu: 3 node(s), one fingerprint: no drift",
                           "3 node(s) in 1 queue(s): no drift"]


def test_driver_drift_in_one_queue_is_a_table_of_only_the_differing_fields(node):
    for i in (1, 2, 10):
        write_fingerprint(node.store, f"gpu-st-p5-{i}")
    write_fingerprint(node.store, "gpu-dy-p5-1", nvidia_driver="575.57.08", cuda_driver_api="12.9",
                      ami_id="ami-0bbbbbbbbbbbbbbbb", recorded_at="2026-11-30T09:30:00Z")
    write_fingerprint(node.store, "cpu-st-c7i-1", queue="cpu", compute_resource="c7i", nvidia_driver=None,
                      cuda_driver_api=None, instance_type="c7i.4xlarge")
    proc = node.drift()
    assert proc.returncode == 1
    assert lines(proc) == [
        "queue cpu: 1 node(s), one fingerprint: no drift",
        "queue gpu: 4 nodes, 2 different fingerprints: DRIFT",
        "  FIELD            A (3 nodes)                             B (1 node)",
        "  ami_id           ami-0aaaaaaaaaaaaaaaa                   ami-0bbbbbbbbbbbbbbbb",
        "  nvidia_driver    570.86.15                               575.57.08",
        "  cuda_driver_api  12.8                                    12.9",
        "  nodes            gpu-st-p5-1, gpu-st-p5-2, gpu-st-p5-10  gpu-dy-p5-1",
        "  recorded         2026-11-30T08:00:00Z                    2026-11-30T09:30:00Z",
        "5 node(s) in 2 queue(s): drift in gpu",
    ]


def test_nodes_on_an_enroot_pyxis_pair_that_drops_an_option_are_named(node):
    """node_profiles.json's pairings, as each node's fingerprint recorded them at boot: one warning line per
    pairing naming the nodes; not drift (every node may run the same pair), so the exit stays 0."""
    warning = {"id": "pyxis-unshare-fails-without-enroot-unshare", "source": "s",  # as node_profiles.json names it
               "message": "pyxis 0.24.0 turns --container-unshare=net,ipc,uts into ENROOT_UNSHARE_* variables, "
                          "which enroot 4.1.2 does not read: every step that passes the option fails"}
    for i in (1, 2):
        write_fingerprint(node.store, f"gpu-st-p5-{i}", pyxis="0.24.0", enroot="4.1.2", pairing_warnings=[warning])
    proc = node.drift()
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "drift: " in ln]
    assert line.endswith(f"drift: warning: gpu-st-p5-1, gpu-st-p5-2: {warning['message']} [{warning['id']}]")
    doc = json.loads(node.run("drift", "--store", str(node.store), "--format", "json").stdout)
    assert doc["pairing_warnings"] == {"pyxis-unshare-fails-without-enroot-unshare": {
        "message": warning["message"], "nodes": ["gpu-st-p5-1", "gpu-st-p5-2"]}}


def test_the_pairing_applies_only_to_the_pair_it_names():
    from clusterkit.paths import NODE_PROFILES
    from clusterkit_node.contract import profiles
    shipped = profiles.load(str(NODE_PROFILES))
    hits = {(p, e): [x.id for x, _ in shipped.pairing_problems(p, e)]
            for p, e in [("0.24.0", "4.1.2"), ("0.24.0", "4.2.1"), ("0.20.0", "3.4.1"), ("0.24.0", None)]}
    assert hits == {("0.24.0", "4.1.2"): ["pyxis-unshare-fails-without-enroot-unshare"], ("0.24.0", "4.2.1"): [],
                    ("0.20.0", "3.4.1"): [], ("0.24.0", None): []}


def test_instance_type_differences_inside_a_queue_are_not_drift(node):
    """One queue may mix compute resources (p4d and p5): only the software must agree."""
    write_fingerprint(node.store, "gpu-st-p4d-1", compute_resource="p4d", instance_type="p4d.24xlarge",
                      instance_id="i-0aaaaaaaaaaaaaaa1")
    write_fingerprint(node.store, "gpu-st-p5-1")
    assert node.drift().returncode == 0


def test_every_drift_field_counts(node):
    fields = {"ami_id": "ami-0ccccccccccccccccc", "kernel": "6.1.112", "nvidia_driver": "570.133.20",
              "cuda_driver_api": "12.9", "efa_installer": "1.43.1", "libfabric": "2.1.0amzn3.0",
              "enroot": "3.5.1", "pyxis": "0.21.0", "slurm": "24.11.5", "manifest_sha256": "2" * 64}
    for key, value in fields.items():
        store = node.root / f"store-{key}"
        write_fingerprint(store, "gpu-st-p5-1")
        write_fingerprint(store, "gpu-st-p5-2", **{key: value})
        proc = node.run("drift", "--store", str(store), "--format", "json")
        assert proc.returncode == 1, key
        assert json.loads(proc.stdout)["queues"]["gpu"]["differing_fields"] == [key]


def test_json_report(node):
    write_fingerprint(node.store, "gpu-st-p5-1")
    write_fingerprint(node.store, "gpu-st-p5-2", slurm="24.11.5")
    proc = node.drift("--format", "json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    gpu = report["queues"]["gpu"]
    assert report["drift"] is True and report["nodes"] == 2 and report["incompatible"] == []
    assert gpu["differing_fields"] == ["slurm"]
    assert [(g["label"], g["nodes"], g["fingerprint"]["slurm"]) for g in gpu["groups"]] == [
        ("A", ["gpu-st-p5-1"], "24.05.8"), ("B", ["gpu-st-p5-2"], "24.11.5")]


def test_nodes_outside_the_pc_naming_are_grouped_as_unknown(node):
    write_fingerprint(node.store, "ip-10-0-1-17", queue=None, compute_resource=None)
    write_fingerprint(node.store, "ip-10-0-1-18", queue=None, compute_resource=None, kernel="6.1.112")
    proc = node.drift()
    assert proc.returncode == 1 and "queue (unknown): 2 nodes, 2 different fingerprints: DRIFT" in proc.stdout


def test_unreadable_and_temp_files(node):
    write_fingerprint(node.store, "gpu-st-p5-1")
    (node.staging / "nodes" / "gpu-st-p5-2.json").write_text("{not json")
    (node.staging / "nodes" / ".gpu-st-p5-3.json.tmp-4242").write_text("{")
    (node.staging / "nodes" / "notes.txt").write_text("hello")
    proc = node.drift()
    assert proc.returncode == 0
    assert "drift: warning: skipped" in proc.stderr and "gpu-st-p5-2.json: unreadable" in proc.stderr
    assert "gpu-st-p5-3" not in proc.stderr + proc.stdout


def test_fingerprints_of_the_previous_layout_are_read_too(node):
    """<store>/.nodes (previous layout): read until the head node's next sync moves them; a host with
    a fingerprint in both places is counted once, from the new place."""
    write_fingerprint(node.store, "gpu-st-p5-1")
    write_fingerprint(node.store, "gpu-st-p5-2", legacy=True)
    write_fingerprint(node.store, "gpu-st-p5-1", legacy=True, nvidia_driver="535.54.03")
    proc = node.drift("--format", "json")
    assert proc.returncode == 0, proc.stdout
    report = json.loads(proc.stdout)
    assert report["nodes"] == 2
    assert report["queues"]["gpu"]["groups"][0]["nodes"] == ["gpu-st-p5-1", "gpu-st-p5-2"]
    assert report["queues"]["gpu"]["groups"][0]["fingerprint"]["nvidia_driver"] == "570.86.15"


def test_max_age_ignores_nodes_long_gone(node):
    write_fingerprint(node.store, "gpu-st-p5-1", recorded_at="2099-01-01T00:00:00Z")  # "now" for the test
    write_fingerprint(node.store, "gpu-dy-p5-7", nvidia_driver="535.54.03", recorded_at="2020-01-01T00:00:00Z")
    assert node.drift().returncode == 1
    proc = node.drift("--max-age-hours", "24")
    assert proc.returncode == 0, proc.stdout
    assert "gpu-dy-p5-7.json: recorded" in proc.stderr and "older than --max-age-hours 24" in proc.stderr


def test_nodes_are_rechecked_against_the_images_served_now(node):
    """A node that booted before a CUDA 13 image arrived was never checked against it."""
    node.set_spec({"test/nccl-tests": {"versions": {"cuda": "13.0.2"}}})
    node.write_lock([node.image("nccl-tests", repository="test/nccl-tests")])
    assert node.sync().returncode == 0
    write_fingerprint(node.store, "gpu-st-p5-1", nvidia_driver="580.95.05")
    write_fingerprint(node.store, "gpu-st-p5-2", nvidia_driver="580.95.05")
    assert node.drift().returncode == 0
    write_fingerprint(node.store, "old-st-p4d-1", queue="old", nvidia_driver="570.86.15")
    proc = node.drift()
    assert proc.returncode == 1
    assert ("node old-st-p4d-1: host driver 570.86.15 cannot run image nccl-tests (CUDA 13.0.2 needs >= 580) "
            "[cuda-driver-floor]") in proc.stdout
    assert lines(proc)[-1] == ("3 node(s) in 2 queue(s): no drift; 1 node/image pair(s) the node driver "
                               "cannot run")


def test_no_fingerprints_yet(node):
    node.store.mkdir()
    proc = node.drift()
    assert proc.returncode == 0
    assert "no node fingerprints in" in proc.stdout and "OnNodeConfigured" in proc.stdout


def test_missing_store_is_a_usage_error(node):
    proc = node.drift()
    assert proc.returncode == 2 and "is not a directory (is FSx mounted" in proc.stderr


def test_clusters_on_one_store_keep_their_own_fingerprints_and_queues(node):
    """Clusters on one platform share the store, and ParallelCluster names nodes after queue and compute resource:
    train-a's and train-b's gpu-st-p5-1 once wrote the same nodes/gpu-st-p5-1.json, the last one won, and drift
    grouped both clusters' nodes as one queue. Now each cluster has its directory and drift names cluster/queue."""
    node.write_lock([node.image("a")])
    node.store.mkdir()
    assert node.fingerprint("gpu-st-p5-1", "--cluster", "train-a").returncode == 0
    done = node.fingerprint("gpu-st-p5-1", "--cluster", "train-b", FAKE_NVIDIA_DRIVER="575.57.08")
    assert done.returncode == 0, done.stderr
    nodes = node.staging / "nodes"
    a = json.loads((nodes / "train-a" / "gpu-st-p5-1.json").read_text())
    b = json.loads((nodes / "train-b" / "gpu-st-p5-1.json").read_text())
    assert (a["cluster"], a["nvidia_driver"]) == ("train-a", "580.95.05")
    assert (b["cluster"], b["nvidia_driver"]) == ("train-b", "575.57.08")
    proc = node.drift()
    assert proc.returncode == 0, proc.stdout + proc.stderr  # one driver per cluster's queue: no drift
    assert lines(proc) == ["queue train-a/gpu: 1 node(s), one fingerprint: no drift",
                           "queue train-b/gpu: 1 node(s), one fingerprint: no drift",
                           "2 node(s) in 2 queue(s): no drift"]
    only = node.drift("--cluster", "train-b")
    assert lines(only) == ["queue gpu: 1 node(s), one fingerprint: no drift",
                           "1 node(s) in 1 queue(s): no drift"]
    bad = node.fingerprint("gpu-st-p5-1", "--cluster", "../x")
    assert bad.returncode == 2 and "is not a ParallelCluster cluster name" in bad.stderr
