"""``clusterkit summary``: the short report ``make synth`` prints: stacks, resource counts, where the rendered
config is, the cost. Internal: not listed in the help."""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from clusterkit.spec.errors import ClusterKitError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("summary")  # internal: `make synth` prints it; not listed in the help
    p.add_argument("name", nargs="?", default="demo")
    p.add_argument("--cdk-out", default="cdk.out")
    p.add_argument("--platform", action="store_true", help="NAME is a platform (`make synth PLATFORM=...`)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.platform:
        print("\n".join(summarize_platform(Path(args.cdk_out), args.name)))
    else:
        print("\n".join(summarize(Path(args.cdk_out), args.name)))
    return 0


def _manifest(cdk_out: Path, make: str) -> dict[str, Any]:
    manifest_file = cdk_out / "manifest.json"  # what `cdk synth` writes last: no manifest, no cloud assembly
    if not manifest_file.is_file():
        raise ClusterKitError(f"{manifest_file}: no cloud assembly here (run `{make}` to write "
                              "one, or pass --cdk-out DIR where `cdk synth -o DIR` wrote it)")
    manifest: dict[str, Any] = json.loads(manifest_file.read_text())
    return manifest


def summarize_platform(cdk_out: Path, name: str) -> list[str]:
    from clusterkit.cost import estimate as cost
    from clusterkit.cost import platform_cost
    from clusterkit.pipeline.platform import load_checked
    from clusterkit.spec.files import cost_command

    loaded, _ = load_checked(name)
    manifest = _manifest(cdk_out, f"make synth PLATFORM={name}")
    p = loaded.spec
    users = [m.spec.name for m in loaded.members]
    lines = [f"platform {p.name} ({p.region}/{p.availability_zone}); clusters naming it: {', '.join(users) or 'none'}"]
    lines += _stacks(cdk_out, manifest)
    lines.append(f"  templates: {cdk_out}/")
    estimate = platform_cost.load_estimate(loaded.path, cost.load_prices())
    lines.append(f"  {cost.one_line(estimate, whole=cost_command(loaded.path))}")
    return lines


def _stacks(cdk_out: Path, manifest: dict[str, Any]) -> list[str]:
    lines = []
    for artifact_id, artifact in sorted(manifest["artifacts"].items()):
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        template = json.loads((cdk_out / artifact["properties"]["templateFile"]).read_text())
        kinds = Counter(r["Type"] for r in template.get("Resources", {}).values())
        top = ", ".join(f"{n} {t.removeprefix('AWS::')}"
                        for t, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:5])
        lines.append(f"  {artifact_id:<28} {sum(kinds.values()):>3} resources  ({top})")
    return lines


def summarize(cdk_out: Path, name: str) -> list[str]:
    from clusterkit.cost import estimate as cost
    from clusterkit.cost import platform_cost
    from clusterkit.effective.expand import expand
    from clusterkit.pipeline.loader import load, lock_or_none
    from clusterkit.render.rendered_files import render_state, rendered_path
    from clusterkit.spec.files import cost_command

    loaded = load(name)
    manifest = _manifest(cdk_out, f"make synth CLUSTER={name}")
    lines = [f"cluster {loaded.spec.name} ({loaded.spec.region}/{loaded.spec.availability_zone}), "
             f"ParallelCluster {loaded.spec.parallelcluster_version}, {loaded.spec.os}"]
    lines += _stacks(cdk_out, manifest)
    if loaded.spec.platform is not None:
        names = expand(loaded).names
        lines.append(f"  on platform {loaded.spec.platform}: network and storage in {names.network_stack} and "
                     f"{names.storage_stack} (`make synth PLATFORM={loaded.spec.platform}` builds them)")
    rendered = rendered_path(loaded)
    shown = rendered.relative_to(Path.cwd()) if rendered.is_relative_to(Path.cwd()) else rendered
    state = render_state(loaded)
    lines.append(f"  rendered ParallelCluster config: {shown}{f' ({state})' if state else ''}")
    lines.append(f"  templates: {cdk_out}/")
    book = cost.load_prices()
    share = platform_cost.share_of(loaded, book)
    estimate = cost.estimate(expand(loaded), lock_or_none(loaded.source.path), book, share)
    lines.append(f"  {cost.one_line(estimate, whole=cost_command(loaded.source.path))}")
    return lines
