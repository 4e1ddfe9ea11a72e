"""``clusterkit diff``: the review diff of specs, rendered configs and locks against a git ref (clusterkit.diff)."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from clusterkit.diff.report import RenderNow


def add_parser(sub: Any) -> None:
    from clusterkit.diff.gate import FAIL_ON

    p = sub.add_parser(
        "diff",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare every cluster's spec, committed rendered ParallelCluster config and image lock at\n"
                    "GIT_REF with the working tree: changed values by path, ParallelCluster's update impact\n"
                    "(most disruptive first), image digest changes and the cost delta; a changed platform file\n"
                    "(cluster_configs/platforms/) with what CloudFormation does and every cluster on it.\n\n"
                    "Exit codes: 0 the diff was made (and, with --fail-on/--exit-code, nothing reaches the\n"
                    "level); 1 a change reaches the --fail-on level; 2 bad ref, unknown cluster or no git\n"
                    "work tree. Levels, most disruptive first:\n"
                    + "".join(f"  {name:<10} {text}\n" for name, text in FAIL_ON.items()))
    p.add_argument("names", nargs="*", metavar="NAME", help="clusters to compare (default: all)")
    p.add_argument("--base", metavar="GIT_REF",
                   help="what to compare against (default: the merge base of HEAD and origin/main, else of HEAD "
                        "and main, else HEAD, so a branch shows only its own changes)")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="markdown: a pull-request comment; json: the report as data (default: text)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="ANSI colour in text output (auto: on a TTY unless NO_COLOR is set)")
    gate = p.add_mutually_exclusive_group()
    gate.add_argument("--fail-on", choices=tuple(FAIL_ON), metavar="LEVEL",
                      help="exit 1 when a change reaches LEVEL: " + ", ".join(FAIL_ON))
    gate.add_argument("--exit-code", action="store_true", help="exit 1 when anything changed (--fail-on any)")
    p.add_argument("--repo", metavar="DIR",
                   help="git work tree holding cluster_configs/ (default: this checkout; only this checkout's "
                        "rendered configs are compared as `make render` would write them, another's as committed)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clusterkit.diff.gate import verdict
    from clusterkit.diff.json_output import render_json
    from clusterkit.diff.report import REPO, build_report
    from clusterkit.diff.text import render, use_color

    root = Path(args.repo) if args.repo else REPO
    report = build_report(root, args.base, args.names, render_now=_render_now(root))
    if args.format == "json":
        sys.stdout.write(render_json(report))
    else:
        sys.stdout.write(render(report, args.format, use_color(args.color, sys.stdout)))
    fail_on = "any" if args.exit_code else args.fail_on
    if fail_on is None:
        return 0
    code, line = verdict(report, fail_on)
    sys.stdout.flush()
    print(line, file=sys.stderr)
    return code


def _render_now(root: Path) -> RenderNow | None:
    """For this checkout, what ``render`` would write for a cluster (the diff compares that, so a spec edit
    left unrendered still shows its update impact); None for another work tree, whose renders come from its
    own code and bootstrap scripts."""
    from clusterkit import paths
    from clusterkit.diff.report import RenderedNow
    from clusterkit.pipeline.loader import load
    from clusterkit.render.rendered_files import rendered_text
    from clusterkit.spec.errors import ClusterKitError

    if root.resolve() != paths.ROOT.resolve():
        return None

    def render_now(name: str) -> RenderedNow:
        try:
            return RenderedNow(rendered_text(load(name)))
        except ClusterKitError as exc:
            count = len(exc.lines())
            return RenderedNow(None, f"{count} error{'s' if count > 1 else ''}: run `clusterkit validate {name}`")

    return render_now
