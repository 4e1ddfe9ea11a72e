"""``clusterkit validate``: every spec's problems, one line each with file:line:col, or JSON / GitHub annotations.

``--aws`` reads the spec's existing security groups (``network.security_groups``) read-only from its region and
checks the rules EFA and Lustre need (``clusterkit.pipeline.account_check``).

``--pcluster`` adds ParallelCluster's own schema and validators (run in ``.venv-pcluster``) on the rendered
configs, after ClusterKit's rules found no error. Its validators meet simulated AWS answers (moto), so each
rendered config also gets two lines: what existed only in the simulation, and what only a real account can
check (``clusterkit.pcluster.simulation``); JSON has them under ``pcluster``.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from clusterkit.spec.errors import EXIT_USER_ERROR, Acknowledged, Problem


def add_parser(sub: Any) -> None:
    p = sub.add_parser("validate")
    p.add_argument("names", nargs="*", metavar="NAME|PATH|DIR")
    p.add_argument("--pcluster", action="store_true", help="also run ParallelCluster's own schema and validators")
    p.add_argument("--aws", action="store_true",
                   help="also read the spec's existing security groups (network.security_groups) from AWS, read-only, "
                        "and check the rules EFA and Lustre need")
    p.add_argument("--strict", action="store_true",
                   help="treat the warnings a spec does not acknowledge (docs/spec.md) as errors")
    p.add_argument("--format", choices=("text", "json", "github"), default="text",
                   help="json: one document on stdout (docs/cli-output.md); github: workflow annotations")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from clusterkit.cli.machine_output import github_annotations, validate_json
    from clusterkit.pipeline.loader import load_many

    # The problems hold no acknowledged warning (each Loaded keeps those): --strict fails on the rest, an
    # unused acknowledgement included. ParallelCluster's own warnings, which a spec cannot acknowledge
    # (warning_ids.NOT_ACKNOWLEDGEABLE), are added after and stay warnings.
    loaded, problems = load_many(args.names)
    if args.strict:
        problems = [dataclasses.replace(p, level="error") if p.level == "warning" else p for p in problems]
    errors = [p for p in problems if p.level == "error"]
    simulation: list[Any] = []
    read_lines: list[str] = []
    if not errors and args.aws:
        found_aws, read_lines = _aws_check(loaded)
        problems += found_aws
        errors = [p for p in problems if p.level == "error"]
    if not errors and args.pcluster:
        found, simulation = _pcluster_check(loaded)
        problems += found
        errors = [p for p in problems if p.level == "error"]
    acknowledged = [a for i in loaded for a in i.acknowledged]
    if args.format == "json":
        sys.stdout.write(validate_json([(i.spec.name, i.source.display_path) for i in loaded], problems,
                                       acknowledged, [n.to_json() for n in simulation] if args.pcluster else None))
    elif args.format == "github":
        sys.stdout.write(github_annotations(problems))
    else:
        from clusterkit.cli.colour import ERROR, OK, WARNING, paint

        for problem in problems:
            print(paint(problem.render(), WARNING if problem.level == "warning" else ERROR, sys.stderr),
                  file=sys.stderr)
        if not errors:
            for item in loaded:
                line = (f"{item.source.display_path}: ok ({item.spec.name}{_gpu_nodes_note(item)}"
                        f"{_acknowledged_note(item.acknowledged)})")
                print(paint(line, OK, sys.stdout))
        for line in read_lines:  # an "ok" after --aws says what the account was asked
            print(line)
        for simulated in simulation:  # an "ok" from simulated answers says so, and what it could not check
            print(simulated.simulated_line())
            print(simulated.real_account_line())
    return EXIT_USER_ERROR if errors else 0


def _gpu_nodes_note(item: Any) -> str:
    """``; GPU nodes: nvidia-container-cli 1.18.2 (deb, via the store)`` for the ok line: what GPU queues' nodes
    install before they take jobs (docs/gpu.md); "" without GPU queues. From the spec, not a second expand: the
    loader already expanded it once."""
    from clusterkit.effective.expand import has_gpu, node_profiles, nvidia_container_cli

    spec = item.spec
    if not any(has_gpu([cr.instance_type for cr in q.compute_resources]) for q in spec.queues):
        return ""
    cli = nvidia_container_cli(spec)
    if cli == "off":
        return "; GPU nodes: no nvidia-container-cli install (install: false)"
    profile = node_profiles().get(spec.os)
    fmt = profile.package_format.value if profile else "OS"
    return f"; GPU nodes: nvidia-container-cli {cli} ({fmt}, via the store)"


def _acknowledged_note(acknowledged: list[Acknowledged]) -> str:
    """``; 2 acknowledged warnings: image-fanout-slow`` for the ok line ("" when none): never silently quiet."""
    if not acknowledged:
        return ""
    ids = ", ".join(sorted({a.problem.id for a in acknowledged}))
    return f"; {len(acknowledged)} acknowledged warning{'s' if len(acknowledged) > 1 else ''}: {ids}"


def _aws_check(loaded: list[Any]) -> tuple[list[Problem], list[str]]:
    """``--aws``: each spec's existing security groups read from its region and checked (one line per missing rule),
    and per spec that names groups the line saying they were read."""
    from clusterkit.pipeline.account_check import check_account

    problems: list[Problem] = []
    lines: list[str] = []
    for item in loaded:
        found, read = check_account(item.spec, item.source.marks)
        problems += found
        if read:
            lines.append(f"{item.source.display_path}: {read} existing security group{'s' if read > 1 else ''} read "
                         f"from {item.spec.region} (validate --aws): the EFA and Lustre rules checked")
    return problems, lines


def _pcluster_problems(loaded: list[Any]) -> list[Problem]:
    """ParallelCluster's own schema and validators on every rendered config, as problems."""
    return _pcluster_check(loaded)[0]


def _pcluster_check(loaded: list[Any]) -> tuple[list[Problem], list[Any]]:
    """ParallelCluster's own schema and validators on every rendered config, as problems, and per config what
    its validators met only in the simulation (``simulation.SimulationNote``)."""
    from clusterkit.pcluster import simulation
    from clusterkit.pcluster.runner import run_check
    from clusterkit.render.rendered_files import rendered_path, rendered_text
    from clusterkit.spec.files import display

    configs = [(i.spec.name, display(rendered_path(i)), rendered_text(i), i.spec.region)
               for i in loaded]
    problems = []
    results = run_check(configs, "validate")
    for result in results:
        found = [Problem(result["path"], error.get("line") or 0, (error.get("col") or 1) if error.get("line") else 0,
                         "", f"ParallelCluster {error['type']}: {error['message']}",
                         level="error" if error["level"] == "ERROR" else "warning",
                         id="" if error["level"] == "ERROR" else "pcluster-validator")
                 for error in result["errors"]]
        if not result["ok"] and not any(p.level == "error" for p in found):
            found.append(Problem(result["path"], 0, 0, "", "ParallelCluster refused the config"))
        problems += found
    return problems, simulation.notes(results, {i.spec.name: i.spec.region for i in loaded},
                                      {i.spec.name: i.source.path for i in loaded})
