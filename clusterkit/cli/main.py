"""ClusterKit: containerized GPU training clusters on AWS ParallelCluster, from one reviewed spec.

User errors print one line each (file:line:col: path: problem (hint)) and exit 2; see docs/cli-output.md
for JSON output and exit codes."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from clusterkit.spec.errors import EXIT_USER_ERROR, Acknowledged, ClusterKitError, Problem

Command = Callable[[argparse.Namespace], int]


def _validate(args: argparse.Namespace) -> int:
    from clusterkit.cli.machine_output import github_annotations, validate_json
    from clusterkit.pipeline.loader import load_many

    # The problems hold no acknowledged warning (each Loaded keeps those): --strict fails on the rest, an
    # unused acknowledgement included. ParallelCluster's own warnings, which a spec cannot acknowledge
    # (warning_ids.NOT_ACKNOWLEDGEABLE), are added after and stay warnings.
    loaded, problems = load_many(args.names)
    if args.strict:
        problems = [dataclasses.replace(p, level="error") if p.level == "warning" else p for p in problems]
    errors = [p for p in problems if p.level == "error"]
    if not errors and args.pcluster:
        problems += _pcluster_problems(loaded)
        errors = [p for p in problems if p.level == "error"]
    acknowledged = [a for i in loaded for a in i.acknowledged]
    if args.format == "json":
        sys.stdout.write(validate_json([(i.spec.name, i.source.display_path) for i in loaded], problems,
                                       acknowledged))
    elif args.format == "github":
        sys.stdout.write(github_annotations(problems))
    else:
        for problem in problems:
            print(problem.render(), file=sys.stderr)
        if not errors:
            for item in loaded:
                print(f"{item.source.display_path}: ok ({item.spec.name}{_acknowledged_note(item.acknowledged)})")
    return EXIT_USER_ERROR if errors else 0


def _acknowledged_note(acknowledged: list[Acknowledged]) -> str:
    """``; 2 acknowledged warnings: image-fanout-slow`` for the ok line ("" when none): never silently quiet."""
    if not acknowledged:
        return ""
    ids = ", ".join(sorted({a.problem.id for a in acknowledged}))
    return f"; {len(acknowledged)} acknowledged warning{'s' if len(acknowledged) > 1 else ''}: {ids}"


def _pcluster_problems(loaded: list[Any]) -> list[Problem]:
    """ParallelCluster's own schema and validators on every rendered config, as problems."""
    from clusterkit import paths
    from clusterkit.pcluster.runner import run_check
    from clusterkit.render.rendered_files import rendered_path, rendered_text

    configs = [(i.spec.name, str(rendered_path(i).relative_to(paths.ROOT)), rendered_text(i), i.spec.region)
               for i in loaded]
    problems = []
    for result in run_check(configs, "validate"):
        found = [Problem(result["path"], error.get("line") or 0, (error.get("col") or 1) if error.get("line") else 0,
                         "", f"ParallelCluster {error['type']}: {error['message']}",
                         level="error" if error["level"] == "ERROR" else "warning",
                         id="" if error["level"] == "ERROR" else "pcluster-validator")
                 for error in result["errors"]]
        if not result["ok"] and not any(p.level == "error" for p in found):
            found.append(Problem(result["path"], 0, 0, "", "ParallelCluster refused the config"))
        problems += found
    return problems


def _render(args: argparse.Namespace) -> int:
    from clusterkit.render.rendered_files import render_all

    stale = render_all(args.names, check=args.check)
    if args.check and stale:
        for path in stale:
            print(f"{path}: stale (run `make render`)", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


def _lock(args: argparse.Namespace) -> int:
    from clusterkit.cli.lock_command import lock_all
    from clusterkit.cli.machine_output import lock_json

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    written = lock_all(args.names, offline=args.offline, progress=progress)
    if args.format == "json":
        sys.stdout.write(lock_json(written))
    else:
        for path, _ in written:
            print(f"wrote {path}")
    return 0


def _reference(args: argparse.Namespace) -> int:
    from clusterkit.render.spec_reference import spec_reference

    print(spec_reference(), end="")
    return 0


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clusterkit.deployed.export import export
    from clusterkit.pipeline.loader import load

    result = export(load(args.name), bucket=args.bucket, do_upload=args.upload)
    for uri in result.uploaded:
        print(f"uploaded {uri}", file=sys.stderr)
    if args.output:
        Path(args.output).write_text(result.text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(result.text, end="")
    return 0


def _expand(args: argparse.Namespace) -> int:
    import json

    import yaml

    from clusterkit.effective.expand import as_data, expand
    from clusterkit.pipeline.loader import load
    from clusterkit.render.rendered_files import NoAliasDumper

    data = as_data(expand(load(args.name)))
    if args.format == "json":
        print(json.dumps(data, indent=2))
    else:
        print(yaml.dump(data, Dumper=NoAliasDumper, sort_keys=False, default_flow_style=False, width=120), end="")
    return 0


def _summary(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clusterkit.cli.summary_command import summarize

    print("\n".join(summarize(Path(args.cdk_out), args.name)))
    return 0


def _cost(args: argparse.Namespace) -> int:
    from clusterkit.cost import estimate as cost
    from clusterkit.effective.expand import expand
    from clusterkit.pipeline.loader import load, lock_or_none

    loaded = load(args.name)
    effective = expand(loaded)
    unknown: list[str]
    book, unknown = cost.load_prices(), []
    if args.refresh:
        book, unknown = cost.refresh_ec2(book, effective.region, cost.instance_types(effective))
    estimate = cost.estimate(effective, lock_or_none(loaded.source.path), book)
    if args.format == "json":
        from clusterkit.cli.machine_output import cost_json

        sys.stdout.write(cost_json(estimate, book, unknown))
    else:
        print("\n".join(cost.report(estimate, book, unknown)))
    return 0


def _status(args: argparse.Namespace) -> int:
    from clusterkit.deployed.status_report import cloudformation_client, status_lines
    from clusterkit.pipeline.loader import load

    spec = load(args.name, check_lock=False).spec
    if args.format == "json":
        from clusterkit.deployed.status_report import report_json, status_report

        sys.stdout.write(report_json(status_report(spec, cloudformation_client(spec.region))))
    else:
        print("\n".join(status_lines(spec, cloudformation_client(spec.region))))
    return 0


class _Version(argparse.Action):
    """``--version``: computed only when asked (it reads package metadata and node_modules)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from clusterkit.cli.version_command import version_lines

        print("\n".join(version_lines()))
        parser.exit()


def _schema(args: argparse.Namespace) -> int:
    from clusterkit.render.spec_schema import schema_text

    sys.stdout.write(schema_text())
    return 0


def _completion(args: argparse.Namespace) -> int:
    from clusterkit.cli.completion_command import bash_script

    sys.stdout.write(bash_script(build_parser()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from clusterkit.diff.gate import FAIL_ON

    parser = argparse.ArgumentParser(prog="clusterkit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version,
                        help="print the ClusterKit, ParallelCluster and CDK versions, then exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands (`clusterkit COMMAND --help` for each)")

    p = sub.add_parser("validate", help="check specs (all of cluster_configs/*.yaml by default)")
    p.add_argument("names", nargs="*", metavar="NAME|PATH")
    p.add_argument("--pcluster", action="store_true", help="also run ParallelCluster's own schema and validators")
    p.add_argument("--strict", action="store_true",
                   help="treat the warnings a spec does not acknowledge (docs/spec.md) as errors")
    p.add_argument("--format", choices=("text", "json", "github"), default="text",
                   help="json: one document on stdout (docs/cli-output.md); github: workflow annotations")
    p.set_defaults(run=_validate)

    p = sub.add_parser("render", help="write cluster_configs/rendered/<name>.yaml")
    p.add_argument("names", nargs="*", metavar="NAME|PATH")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a rendered file is stale")
    p.set_defaults(run=_render)

    p = sub.add_parser("lock", help="resolve image digests into cluster_configs/<name>.images.lock")
    p.add_argument("names", nargs="*", metavar="NAME|PATH")
    p.add_argument("--offline", action="store_true",
                   help="no registry calls: lock only images the spec pins by digest (sizes unknown)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: what was locked, on stdout")
    p.set_defaults(run=_lock)

    p = sub.add_parser("export", help="concrete ParallelCluster YAML from the deployed stacks, for `pcluster`")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--bucket", required=True, help="S3 bucket for the node artifacts (under clusterkit/<name>/)")
    p.add_argument("--upload", action="store_true", help="upload the node artifacts (otherwise only print)")
    p.add_argument("-o", "--output", help="write the YAML here instead of stdout")
    p.set_defaults(run=_export)

    p = sub.add_parser("expand", help="print the effective spec: every default and derived value resolved")
    p.add_argument("name", metavar="NAME|PATH")
    p.add_argument("--format", choices=("yaml", "json"), default="yaml", help="output format (default: yaml)")
    p.set_defaults(run=_expand)

    p = sub.add_parser("summary")  # internal: `make synth` prints it; not listed in the help
    p.add_argument("name", nargs="?", default="demo")
    p.add_argument("--cdk-out", default="cdk.out")
    p.set_defaults(run=_summary)

    p = sub.add_parser("reference", help="print the spec reference (markdown)")
    p.set_defaults(run=_reference)

    p = sub.add_parser("schema", help="print the spec's JSON Schema (committed as cluster_configs/clusterkit-spec"
                                      ".schema.json, for editors)")
    p.set_defaults(run=_schema)

    p = sub.add_parser("cost", help="hourly and 30-day cost estimate from list prices (clusterkit/data/prices.json)")
    p.add_argument("name", metavar="NAME|PATH")
    p.add_argument("--refresh", action="store_true",
                   help="price the instance types with the AWS Price List API now (needs AWS credentials)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: the estimate as data")
    p.set_defaults(run=_cost)

    p = sub.add_parser("status", help="deployed stacks, TTL expiry, head node and SSM command (needs AWS credentials)")
    p.add_argument("name", metavar="NAME|PATH")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: the report as data")
    p.set_defaults(run=_status)

    p = sub.add_parser(
        "diff", help="review: semantic diff of specs, rendered configs and image locks against a git ref",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare every cluster's spec, committed rendered ParallelCluster config and image lock at\n"
                    "GIT_REF with the working tree: changed values by path, ParallelCluster's update impact\n"
                    "(most disruptive first), image digest changes and the cost delta.\n\n"
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
    p.add_argument("--repo", metavar="DIR", help="git work tree holding cluster_configs/ (default: this checkout)")
    p.set_defaults(run=_diff)

    p = sub.add_parser("completion", help="print a bash completion script: source <(clusterkit completion bash)")
    p.add_argument("shell", choices=("bash",), help="bash (zsh: run `autoload -U bashcompinit && bashcompinit` first)")
    p.set_defaults(run=_completion)
    return parser


def _diff(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clusterkit.diff.gate import verdict
    from clusterkit.diff.json_output import render_json
    from clusterkit.diff.report import REPO, build_report
    from clusterkit.diff.text import render, use_color

    report = build_report(Path(args.repo) if args.repo else REPO, args.base, args.names)
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except ClusterKitError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
