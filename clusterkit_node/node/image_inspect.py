"""``inspect IMAGE.sqsh``: every version the image reveals, where each was read and why that copy counts, what
the compatibility rules say about the combination, and the image's ``NVIDIA_*`` settings with what enroot's NVIDIA
hook will do with them: on this node's driver and GPUs when it has them (a refusal or no libcuda is an error, as in
``fingerprint``), else the plan without a driver.

Why: the same readers the head node's sync records with (versions.py, image_env.py) and the rule the nodes judge
with (nvidia_hook.py), shown to a person: a reviewer or an operator checks a digest bump, or a surprising manifest
entry, without a mount or a registry. Here in ``node`` because it asks this node's nvidia-smi (facts.py).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Dict, List

from clusterkit_node.contract import compat
from clusterkit_node.contract.bundle_files import RULES_NAME, load_rules
from clusterkit_node.contract.console import EXIT_FAILED, UsageError
from clusterkit_node.image import nvidia_hook as hook
from clusterkit_node.image.image_env import read_nvidia_settings
from clusterkit_node.image.versions import inspect_image
from clusterkit_node.node.facts import gpu_facts


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("inspect", help="versions inside a .sqsh (CUDA, NCCL, aws-ofi-nccl, libfabric, EFA, "
                                       "PyTorch), each with its source, checked against the compatibility rules; "
                                       "its NVIDIA_* settings and what enroot's NVIDIA hook does with them here")
    p.add_argument("image", metavar="IMAGE.sqsh")
    p.add_argument("--rules", help=f"compatibility rules (default: {RULES_NAME} next to the zipapp)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def cmd_inspect(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.image):
        raise UsageError([f"{args.image}: no such file (an image of the store, e.g. /fsx/containers/<name>.sqsh)"])
    rules = load_rules(args.rules)
    try:
        found = inspect_image(args.image)
    except RuntimeError as exc:
        raise UsageError([f"{args.image}: not a readable squashfs image ({exc})"]) from None
    name = os.path.basename(args.image)
    findings = compat.check(rules, name, found.versions)
    doc: Dict[str, Any] = {
        "image": args.image,
        "versions": found.versions,
        "sources": {k: r.source for k, r in sorted(found.readings.items())},
        "notes": found.notes,
        "findings": [f.as_dict() for f in findings],
        "nvidia": nvidia_report(args.image),
    }
    if args.format == "json":
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        width = max((len(k) for k in doc["versions"]), default=0)
        print(f"{args.image}")
        for key, version in doc["versions"].items():
            print(f"  {key:<{width}}  {version:<14} {doc['sources'][key]}")
        if not doc["versions"]:
            print("  (no known component found)")
        for note in found.notes:
            print(f"  note: {note}")
        for f in findings:
            print(f"  {f.level}: {f.text()}")
        for line in nvidia_lines(doc["nvidia"]):
            print(f"  {line}")
    hook_error = doc["nvidia"].get("level") == "error"
    return EXIT_FAILED if hook_error or any(f.level == "error" for f in findings) else 0


def nvidia_report(image: str) -> Dict[str, Any]:
    """The image's NVIDIA_* settings, where they were read, the hook's plan and, on a node with a GPU, its verdict."""
    found = read_nvidia_settings(image)
    report: Dict[str, Any] = {"settings": found.settings, "settings_from": found.source}
    if found.settings is None:
        return report
    report["plan"] = hook.plan(found.settings).summary()
    gpus = gpu_facts(dict(os.environ))
    if gpus.driver is None:
        report["node"] = None
        report["no_driver"] = gpus.why
        return report
    verdict = hook.on_gpus(found.settings, gpus.hook_drivers())
    report["node"] = {"driver": gpus.driver, "cuda": gpus.cuda,
                      "gpus": [{"name": name, "compute_cap": arch} for name, arch in gpus.kinds()],
                      "outcome": verdict.outcome, "reason": verdict.reason, "variable": verdict.variable}
    report["level"] = hook.NODE_LEVELS[verdict.outcome]
    report["hint"] = hook.node_hint(verdict, hook.Driver(gpus.driver, gpus.cuda))
    return report


def nvidia_lines(report: Dict[str, Any]) -> List[str]:
    """The text form of nvidia_report."""
    settings = report["settings"]
    if settings is None:
        return [f"NVIDIA_*: unknown ({report['settings_from']})"]
    shown = " ".join(f"{k}={v}" for k, v in settings.items()) or "(none set)"
    lines = [f"NVIDIA_* ({report['settings_from']}): {shown}", f"NVIDIA hook plan: {report['plan']}"]
    node = report.get("node")
    if node is None:
        lines.append(f"NVIDIA hook here: no GPU driver answers ({report['no_driver']}): the plan above, not judged")
        return lines
    gpus = ", ".join(f"{g['name']} (compute capability {g['compute_cap'] or 'unknown'})" for g in node["gpus"])
    where = f"driver {node['driver']}, CUDA {node['cuda'] or 'unknown'}, {gpus}"
    if report["level"]:
        lines.append(f"{report['level']}: NVIDIA hook on this node ({where}): {node['reason']}; {report['hint']}")
    else:
        lines.append(f"NVIDIA hook on this node ({where}): {node['outcome']}: {node['reason']}")
    return lines
