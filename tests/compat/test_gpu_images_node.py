"""The node side of GPU readiness: what enroot's NVIDIA hook will do with each image, judged with the node's driver.

Real: the node zipapp as a subprocess (sync, fingerprint, inspect), NVIDIA enroot 4.1.2 importing the images (it
writes each image config's Env to the image's /etc/environment, which the hook reads), squashfs-tools (mksquashfs
builds the images inspect reads directly; unsquashfs reads them), the rule (clusterkit_node/image/nvidia_hook.py).
Stand-ins (compat_harness.py): the loopback registry and image content, tests/compat/fakes/nvidia-smi (driver 580.95.05,
CUDA 13.0, H100s of compute capability 9.0 unless a test says otherwise).
"""
from __future__ import annotations

import json
import subprocess

from compat_harness import harness

CUDA_IMAGE = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
# NVIDIA's CUDA 13.2 images: cuda>=13.2 unless an older-branch driver of the listed brands (none is 580)
REQUIRE_13_2 = "NVIDIA_REQUIRE_CUDA=cuda>=13.2 brand=tesla,driver>=535,driver<536 brand=tesla,driver>=570,driver<571"
IMAGES = {
    "cuda-new": CUDA_IMAGE + [REQUIRE_13_2],
    "utility-only": ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"],
    "cpu": ["LANG=C.UTF-8"],
    "fine": CUDA_IMAGE + ["NVIDIA_REQUIRE_CUDA=cuda>=12.8 brand=tesla,driver>=535,driver<536"],
}


def synced(node, names):
    node.set_spec({f"test/{name}": {"env": IMAGES[name]} for name in names})
    node.write_lock([node.image(name) for name in names])
    proc = node.sync()
    assert proc.returncode == 0, proc.stderr
    return proc


def lines(text: str, level: str) -> list[str]:
    """The lines of that level, without the time stamp and program name before it."""
    return [ln[ln.index(f"{level}: "):] for ln in text.splitlines() if f" {level}: " in ln]


def test_sync_records_each_images_nvidia_settings_from_its_etc_environment(node):
    proc = synced(node, ["cuda-new", "cpu"])
    images = node.manifest()["images"]
    assert images["cuda-new"]["nvidia"] == {
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "NVIDIA_REQUIRE_CUDA": "cuda>=13.2 brand=tesla,driver>=535,driver<536 brand=tesla,driver>=570,driver<571",
        "NVIDIA_VISIBLE_DEVICES": "all"}
    assert images["cpu"]["nvidia"] == {}, "read, none set: the hook gives no GPU"
    assert "NVIDIA hook: GPUs, libcuda, NVIDIA_REQUIRE_CUDA='cuda>=13.2 " in proc.stdout
    assert "cpu: imported" in proc.stdout
    assert "NVIDIA hook: no GPU (NVIDIA_VISIBLE_DEVICES unset or void)" in proc.stdout


def test_fingerprint_fails_the_gpu_node_the_hook_refuses_and_warns_of_no_libcuda(node):
    """Refused: an error that stops the node. No libcuda: a warning (the image starts, and a job can ask for compute
    in its own environment, which pyxis passes to the hook)."""
    synced(node, list(IMAGES))
    proc = node.fingerprint()
    assert proc.returncode == 1, proc.stderr
    errors = lines(proc.stderr, "error")
    refused = [ln for ln in errors if "image cuda-new" in ln]
    assert refused == [
        "error: image cuda-new: NVIDIA_REQUIRE_CUDA='cuda>=13.2 brand=tesla,driver>=535,driver<536 "
        "brand=tesla,driver>=570,driver<571': 'cuda>=13.2' is unsatisfied on driver 580.95.05 (CUDA 13.0): "
        "nvidia-container-cli refuses to start the container (NVIDIA_* settings from the store's manifest (the "
        "image's /etc/environment, read at import)); use an image built for CUDA 13.0 or older, or an AMI whose "
        "NVIDIA driver meets the requirement"]
    assert [ln for ln in lines(proc.stderr, "warning") if "image utility-only" in ln] == [
        "warning: image utility-only: NVIDIA_DRIVER_CAPABILITIES is 'utility': the job gets the GPUs but "
        "no libcuda (CUDA error 35) (NVIDIA_* settings from the store's manifest (the image's /etc/environment, read "
        "at import)); use an image that sets NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all), as NVIDIA's CUDA "
        "images do, or set it in the job's environment (pyxis passes it to the hook)"]
    assert errors[-1].startswith("error: this node cannot run 1 locked image(s); failing its bootstrap")
    assert len(errors) == 2
    assert [ln for ln in lines(proc.stderr, "warning") if "image cpu" in ln] == [
        "warning: image cpu: NVIDIA_VISIBLE_DEVICES is not set: enroot's NVIDIA hook does nothing, the "
        "job sees no GPU and no driver library (NVIDIA_* settings from the store's manifest (the image's "
        "/etc/environment, read at import)); fine for a CPU image; for GPU work the image must set "
        "NVIDIA_VISIBLE_DEVICES=all"]
    assert "image fine" not in proc.stderr
    doc = node.fingerprint_doc()
    assert {v["image"]: (v["outcome"], v["level"]) for v in doc["nvidia_hook"]} == {
        "cpu": ("no-gpu", "warning"), "cuda-new": ("refused", "error"), "fine": ("ok", ""),
        "utility-only": ("no-libcuda", "warning")}
    assert doc["gpus"] == [{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}]
    assert "Traceback" not in proc.stderr


def test_a_capable_gpu_node_boots_and_a_node_without_gpu_judges_nothing(node):
    synced(node, ["fine", "cuda-new"])
    newer = node.fingerprint(FAKE_NVIDIA_DRIVER="595.45.04", FAKE_NVIDIA_CUDA="13.2")
    assert newer.returncode == 0, newer.stderr
    assert lines(newer.stderr, "error") == [] and lines(newer.stderr, "warning") == []
    assert {v["image"]: v["outcome"] for v in node.fingerprint_doc()["nvidia_hook"]} == {"cuda-new": "ok",
                                                                                         "fine": "ok"}
    cpu_node = node.fingerprint("cpu-st-c5-1", FAKE_NVIDIA_DRIVER="")  # a CPU instance of the GPU AMI
    assert cpu_node.returncode == 0, cpu_node.stderr
    assert "NVIDIA" not in cpu_node.stderr.replace("no NVIDIA driver answers", "")
    assert node.fingerprint_doc("cpu-st-c5-1")["nvidia_hook"] == []


def test_settings_come_from_the_sqsh_for_an_older_manifest_entry_else_from_the_lock(node):
    synced(node, ["utility-only"])
    manifest = node.manifest()
    del manifest["images"]["utility-only"]["nvidia"]  # written by a sync before the key existed
    (node.store / "manifest.json").write_text(json.dumps(manifest))
    proc = node.fingerprint()
    assert proc.returncode == 0, proc.stderr  # no libcuda: a warning
    sqsh = node.store / manifest["images"]["utility-only"]["file"]
    assert f"(NVIDIA_* settings from {sqsh}:/etc/environment); use an image that sets" in proc.stderr

    # not in the store yet: the lock's record (an online lock read the image config); an offline lock: not judged
    lock = json.loads(node.lock.read_text())
    entry = lock["images"][0]
    pinned = entry["enroot_uri"].rsplit("@", 1)[0]
    entry.update(name="later", digest="sha256:" + "7" * 64, enroot_uri=f"{pinned}@sha256:{'7' * 64}",
                 nvidia={"NVIDIA_VISIBLE_DEVICES": "all"}, nvidia_from="image config Env")
    offline = dict(entry, name="offline", digest="sha256:" + "8" * 64, enroot_uri=f"{pinned}@sha256:{'8' * 64}",
                   nvidia={}, nvidia_from="not read (lock --offline)")
    lock["images"] = [entry, offline]
    node.lock.write_text(json.dumps(lock))
    proc = node.fingerprint()
    assert proc.returncode == 0, proc.stderr
    assert ("fingerprint: warning: image later: NVIDIA_DRIVER_CAPABILITIES is not set (the hook then gives utility "
            "only): the job gets the GPUs but no libcuda (CUDA error 35) (NVIDIA_* settings from the lock (image "
            "config Env)); ") in proc.stderr
    assert "image offline: what enroot's NVIDIA hook does with it is not judged: " in proc.stdout
    assert "offline" not in proc.stderr


def test_an_old_driver_without_compute_cap_still_judges_cuda(node):
    synced(node, ["cuda-new"])
    proc = node.fingerprint(FAKE_NVIDIA_ARCH="old")
    assert proc.returncode == 1
    assert "'cuda>=13.2' is unsatisfied on driver 580.95.05 (CUDA 13.0)" in proc.stderr
    assert "compute capability unknown (nvidia-smi: Field \"compute_cap\" is not a valid field" in proc.stdout
    assert node.fingerprint_doc()["gpus"] == [{"name": "unknown GPU", "compute_cap": None}]


def mksquashfs(tmp_path, name: str, environment: str | None, link: bool = False):
    root = tmp_path / f"{name}-root"
    (root / "etc").mkdir(parents=True)
    if environment is not None:
        target = root / "etc" / ("environment.real" if link else "environment")
        target.write_text(environment)
        if link:
            (root / "etc/environment").symlink_to("/etc/environment.real")
    out = tmp_path / f"{name}.sqsh"
    subprocess.run(["mksquashfs", str(root), str(out), "-quiet", "-noappend", "-no-progress"], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def inspect(node, sqsh, *extra, **env):
    return node.run("inspect", str(sqsh), "--rules", str(harness.REPO / "clusterkit/data/compat_rules.json"),
                    *extra, env=dict(node.env, **env))


def test_inspect_shows_the_settings_and_what_the_hook_does_here(node, tmp_path):
    # what enroot writes (the config's Env, one per line) plus what its envfmt drops or unquotes
    sqsh = mksquashfs(tmp_path, "cuda", "PATH=/usr/bin\n# NVIDIA_VISIBLE_DEVICES=void\nNVIDIA_VISIBLE_DEVICES=all\n"
                                        "NVIDIA_DRIVER_CAPABILITIES='compute,utility'\n" + REQUIRE_13_2 + "\n")
    here = inspect(node, sqsh)
    assert here.returncode == 1, here.stderr
    out = here.stdout.splitlines()
    assert out[-3:] == [
        f"  NVIDIA_* ({sqsh}:/etc/environment): NVIDIA_DRIVER_CAPABILITIES=compute,utility "
        "NVIDIA_REQUIRE_CUDA=cuda>=13.2 brand=tesla,driver>=535,driver<536 brand=tesla,driver>=570,driver<571 "
        "NVIDIA_VISIBLE_DEVICES=all",
        "  NVIDIA hook plan: GPUs, libcuda, NVIDIA_REQUIRE_CUDA='cuda>=13.2 brand=tesla,driver>=535,driver<536 "
        "brand=tesla,driver>=570,driver<571'",
        "  error: NVIDIA hook on this node (driver 580.95.05, CUDA 13.0, NVIDIA H100 80GB HBM3 (compute capability "
        "9.0)): NVIDIA_REQUIRE_CUDA='cuda>=13.2 brand=tesla,driver>=535,driver<536 brand=tesla,driver>=570,"
        "driver<571': 'cuda>=13.2' is unsatisfied on driver 580.95.05 (CUDA 13.0): nvidia-container-cli refuses "
        "to start the container; use an image built for CUDA 13.0 or older, or an AMI whose NVIDIA driver meets "
        "the requirement"]
    head_node = inspect(node, sqsh, FAKE_NVIDIA_DRIVER="")  # no GPU here: the plan only, never an error
    assert head_node.returncode == 0, head_node.stderr
    assert head_node.stdout.splitlines()[-1] == (
        "  NVIDIA hook here: no GPU driver answers (nvidia-smi: No devices were found): the plan above, not judged")
    doc = json.loads(inspect(node, sqsh, "--format", "json", FAKE_NVIDIA_DRIVER="595.45.04",
                             FAKE_NVIDIA_CUDA="13.2").stdout)["nvidia"]
    assert doc["node"]["outcome"] == "ok" and doc["level"] == "" and doc["settings"]["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_inspect_reads_a_linked_environment_and_says_when_there_is_none(node, tmp_path):
    linked = inspect(node, mksquashfs(tmp_path, "linked", "NVIDIA_VISIBLE_DEVICES=all\n", link=True))
    assert linked.returncode == 0  # devices but no capabilities: utility only, a warning
    assert "NVIDIA_* (" in linked.stdout and "): NVIDIA_VISIBLE_DEVICES=all" in linked.stdout
    assert "warning: NVIDIA hook on this node" in linked.stdout and "no libcuda (CUDA error 35)" in linked.stdout
    bare = mksquashfs(tmp_path, "bare", None)
    none = inspect(node, bare)
    assert none.returncode == 0, none.stderr
    assert f"  NVIDIA_* ({bare} (no /etc/environment: no NVIDIA_* setting)): (none set)" in none.stdout
    assert "  warning: NVIDIA hook on this node" in none.stdout and "NVIDIA_VISIBLE_DEVICES is not set" in none.stdout
