"""`validate` says what enroot's NVIDIA hook will do with each locked image on the spec's GPU queues, with the driver
of the spec's ParallelCluster AMI (clusterkit/data/ami_drivers.json), at the image's file:line.

Real: specs and locks written to tmp_path, the loader, the lock reader, the committed driver and compat tables, and
the CLI as a subprocess for the exit code.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.pipeline.loader import load
from clusterkit.rules.gpu_images import ami_driver, driver_cuda
from clusterkit.spec.errors import SpecError
from tests.spec_text import BASE_SPEC, with_images

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "cd" * 32
GOOD = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}


def _write(tmp_path: Path, spec: str, images: dict[str, dict[str, str] | None]) -> Path:
    """t.yaml and its lock; an image's settings None: an offline lock entry (not read)."""
    entries = []
    for name, settings in sorted(images.items()):
        entry = {"compressed_size": None, "digest": DIGEST, "enroot_uri": f"docker://example.com#{name}@{DIGEST}",
                 "expect": {}, "name": name, "platform": "linux/amd64", "registry": "example.com",
                 "repository": name, "source": f"example.com/{name}@{DIGEST}"}
        entry["nvidia_from"] = "not read: offline" if settings is None else "image config Env"
        if settings:
            entry["nvidia"] = settings
        entries.append(entry)
    (tmp_path / "t.images.lock").write_text(json.dumps({"cluster": "t", "images": entries, "lock_version": 1},
                                                       indent=2))
    (tmp_path / "t.yaml").write_text(spec)
    return tmp_path / "t.yaml"


def _spec(*names: str, base: str = BASE_SPEC) -> str:
    return with_images(*[(n, f"example.com/{n}@{DIGEST}") for n in names]).replace(BASE_SPEC, base, 1)


def test_the_ami_driver_and_its_cuda():
    """PC 3.16.1's AMIs ship 595.71.05, whose CUDA is 13.2; 580.x is 13.0 and 570.x 12.8 (Table 3 of the notes)."""
    driver, source = ami_driver("3.16.1")
    assert (driver.version, driver.cuda) == ("595.71.05", "13.2") and "v3.16.3" in source
    assert (driver_cuda("580.159.04"), driver_cuda("570.172.08"), driver_cuda("550.90.07")) == ("13.0", "12.8", "12.4")


def test_refused_and_no_libcuda_are_errors_at_the_image_line(tmp_path):
    path = _write(tmp_path, _spec("fine", "future", "nolib", "offline"), {
        "fine": GOOD, "future": dict(GOOD, NVIDIA_REQUIRE_CUDA="cuda>=13.3"),
        "nolib": {"NVIDIA_VISIBLE_DEVICES": "all"}, "offline": None})
    with pytest.raises(SpecError) as err:
        load(str(path))
    lines = [p.render() for p in err.value.problems]
    assert lines == [
        f"{path}:15:12: containers.images[1].uri: image 'future' on GPU queue gpu: NVIDIA_REQUIRE_CUDA='cuda>=13.3': "
        "'cuda>=13.3' is unsatisfied on driver 595.71.05 (CUDA 13.2): nvidia-container-cli refuses to start the "
        "container (ParallelCluster 3.16.1's AMI driver 595.71.05 (" + ami_driver("3.16.1")[1] + "); use an image "
        "built for that driver's CUDA or a ParallelCluster version whose AMI driver meets it)",
        f"{path}:17:12: containers.images[2].uri: image 'nolib' on GPU queue gpu: NVIDIA_DRIVER_CAPABILITIES is not "
        "set (the hook then gives utility only): the job gets the GPUs but no libcuda (CUDA error 35) (use an image "
        "that sets NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all), as NVIDIA's CUDA images do (a job can set it "
        "in its own environment: pyxis passes it to the hook))",
    ]


def test_no_gpu_is_a_warning_and_cpu_queues_get_nothing(tmp_path):
    path = _write(tmp_path, _spec("cpu-tool"), {"cpu-tool": {}})
    [warning] = [w for w in load(str(path)).warnings if w.id == "image-no-gpu"]
    assert warning.render().startswith(f"{path}:13:12: warning[image-no-gpu]: containers.images[0].uri: "
                                       "image 'cpu-tool' on GPU queue gpu: NVIDIA_VISIBLE_DEVICES is not set: "
                                       "enroot's NVIDIA hook does nothing")
    cpu_only = BASE_SPEC.replace("p5.48xlarge", "c5.large")
    path = _write(tmp_path, _spec("cpu-tool", "nolib", base=cpu_only),
                  {"cpu-tool": {}, "nolib": {"NVIDIA_VISIBLE_DEVICES": "all"}})
    assert not [w for w in load(str(path)).warnings if w.id and w.id.startswith("image-")]


def test_validate_exits_with_the_error_code_and_names_the_image(tmp_path):
    path = _write(tmp_path, _spec("future"), {"future": dict(GOOD, NVIDIA_REQUIRE_CUDA="cuda>=13.3")})
    done = subprocess.run([sys.executable, "-m", "clusterkit", "validate", str(path)], cwd=REPO, text=True,
                          capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{path}:13:12: containers.images[0].uri: image 'future' on GPU queue gpu" in done.stdout + \
        done.stderr
    assert "Traceback" not in done.stderr
