"""What enroot's NVIDIA hook will do with each locked image on the spec's GPU queues, with the driver of the spec's
ParallelCluster AMI (clusterkit/data/ami_drivers.json).

Why here: a GPU job whose image the hook refuses ("unsatisfied condition: cuda>=13.2") or starts without libcuda
(CUDA error 35) fails on every node; validate names the image at its file:line before a deploy. The rule is
clusterkit_node.image.nvidia_hook, the one the nodes judge with their real driver (inspect, the image sync,
fingerprint). Settings come from the lock (``nvidia``); an offline lock did not read them: the nodes judge those.
"""
from __future__ import annotations

import functools
import json
from typing import Any

from clusterkit import paths
from clusterkit.effective.expand import expand_spec
from clusterkit.images.lock_file import ImageLock
from clusterkit.rules import compat_rules
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks
from clusterkit_node.contract import compat
from clusterkit_node.image import nvidia_hook as hook

DRIVERS_PATH = paths.AMI_DRIVERS  # module attribute: a test points it elsewhere


@functools.lru_cache(maxsize=4)
def _drivers(path: str) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return dict(json.load(fh)["drivers"])


def ami_driver(pc_version: str) -> tuple[hook.Driver, str]:
    """The driver of this ParallelCluster version's AMIs (its CUDA version from the compat rules) and its source."""
    entry = _drivers(str(DRIVERS_PATH)).get(pc_version) or {}
    version = entry.get("driver")
    return hook.Driver(version, driver_cuda(version) if version else None), str(entry.get("source", "not listed"))


def driver_cuda(driver: str) -> str | None:
    """The newest CUDA whose GA driver this driver meets (compat_rules.json cuda-toolkit-driver): the version NVML
    reports and nvidia-container-cli compares ``cuda>=`` with (580.x: 13.0)."""
    try:
        ruleset = compat_rules.rules()
    except compat.RulesError:
        return None
    table = [entry for r in ruleset.rules if r.id == "cuda-toolkit-driver" for entry in r.min_driver]
    met = [cuda for cuda, floor in table if compat.compare_versions(driver, floor) >= 0]
    return max(met, key=compat.version_parts) if met else None


def hook_problems(spec: ClusterSpec, marks: Marks, lock: ImageLock | None) -> list[Problem]:
    """One line per image the hook refuses or gives no libcuda (errors), or no GPU (a warning), on the GPU queues."""
    if lock is None or not spec.containers.images:
        return []
    gpu_queues = [q.name for q in expand_spec(spec).queues if q.has_gpu]
    if not gpu_queues:
        return []
    driver, source = ami_driver(spec.parallelcluster_version)
    locked = {image.name: image for image in lock.images}
    queues = "GPU queue" + ("s " if len(gpu_queues) > 1 else " ") + ", ".join(gpu_queues)
    where = f"ParallelCluster {spec.parallelcluster_version}'s AMI driver {driver.version or 'unknown'}"
    problems = []
    for i, image in enumerate(spec.containers.images):
        entry = locked.get(image.name)
        if entry is None or not entry.nvidia_from or entry.nvidia_from.startswith("not read"):
            continue  # no settings recorded: the head node's sync and each node's fingerprint judge the .sqsh
        found = hook.verdict(entry.nvidia, driver)
        at = f"containers.images[{i}].uri"
        message = f"image '{image.name}' on {queues}: {found.reason}"
        if found.outcome == hook.REFUSED:
            problems.append(marks.problem(at, message, f"{where} ({source}); use an image built for that driver's "
                                          "CUDA or a ParallelCluster version whose AMI driver meets it"))
        elif found.outcome == hook.NO_LIBCUDA:
            problems.append(marks.problem(at, message, "use an image that sets NVIDIA_DRIVER_CAPABILITIES=compute,"
                                          "utility (or all), as NVIDIA's CUDA images do (a job can set it in its "
                                          "own environment: pyxis passes it to the hook)"))
        elif found.outcome in (hook.NO_GPU, hook.NO_DEVICES):
            problems.append(marks.problem(at, message, "a CPU image on a GPU queue is fine; for GPU work use an image "
                                          "that sets NVIDIA_VISIBLE_DEVICES=all", level="warning",
                                          id="image-no-gpu"))
        elif found.outcome == hook.UNKNOWN:
            problems.append(marks.problem(at, message, f"{where}; each node's fingerprint judges it with its own GPU "
                                          "and driver and stops a node the hook would refuse", level="warning",
                                          id="image-gpu-requirement-unchecked"))
    return problems
