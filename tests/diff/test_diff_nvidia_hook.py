"""``clusterkit diff`` says, in one line, when a re-pinned image changes what enroot's NVIDIA hook will do with it.

Real: the diff's report and text renderer, the hook rule (clusterkit_node/image/nvidia_hook.py) over lock entries
shaped as ``clusterkit lock`` writes them (``nvidia``, ``nvidia_from``).
"""
from __future__ import annotations

from clusterkit.diff.report import ClusterDiff, ImageChange, Report
from clusterkit.diff.text import render_markdown, render_text

CUDA = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}


def _entry(digest: str, nvidia: dict, nvidia_from: str = "image config Env") -> dict:
    return {"name": "pytorch", "digest": "sha256:" + digest * 64, "source": "nvcr.io/nvidia/pytorch:25.01-py3",
            "platform": "linux/amd64", "expect": {}, "nvidia": nvidia, "nvidia_from": nvidia_from}


def _report(old: dict, new: dict) -> Report:
    image = ImageChange("pytorch", "changed", old, new)
    return Report("HEAD", "0" * 40, (ClusterDiff("demo", "changed", images=(image,)),))


def test_a_repin_that_changes_the_hooks_plan_says_so_in_one_line() -> None:
    new = dict(CUDA, NVIDIA_REQUIRE_CUDA="cuda>=13.2")
    text = render_text(_report(_entry("a", CUDA), _entry("b", new)))
    hook = [ln.strip() for ln in text.splitlines() if "NVIDIA hook" in ln]
    assert hook == ["NVIDIA hook: GPUs, libcuda, NVIDIA_REQUIRE_CUDA='cuda>=12.8' → GPUs, libcuda, "
                    "NVIDIA_REQUIRE_CUDA='cuda>=13.2'"]
    assert "NVIDIA hook: GPUs, libcuda, NVIDIA_REQUIRE_CUDA='cuda>=12.8' →" in render_markdown(
        _report(_entry("a", CUDA), _entry("b", new)))
    no_compute = dict(CUDA, NVIDIA_DRIVER_CAPABILITIES="utility")
    assert "→ GPUs, no libcuda (NVIDIA_DRIVER_CAPABILITIES lacks compute), NVIDIA_REQUIRE_CUDA" in render_text(
        _report(_entry("a", CUDA), _entry("b", no_compute)))


def test_no_line_when_the_plan_is_the_same_or_a_side_was_not_read() -> None:
    reordered = dict(reversed(list(CUDA.items())))
    assert "NVIDIA hook" not in render_text(_report(_entry("a", CUDA), _entry("b", reordered)))
    assert "NVIDIA hook" not in render_text(_report(_entry("a", {}, "not read (lock --offline)"), _entry("b", CUDA)))
