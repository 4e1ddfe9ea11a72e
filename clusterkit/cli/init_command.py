"""``clusterkit init --name NAME``: a commented starter spec from a few flags, checked by the loader first.

The text is loaded by the same loader ``validate`` uses (from a scratch copy named ``<name>.yaml``, so the
name rule applies) before anything is written: init never writes a spec ``validate`` would refuse. It
never overwrites: the file is created exclusively, and an existing one is a one-line error. Default place:
the checkout's ``cluster_configs/<name>.yaml``, where a NAME argument of every command looks.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, get_args

from clusterkit import paths
from clusterkit.cli.boundary import EXIT_ENVIRONMENT
from clusterkit.spec.errors import ClusterKitError, SpecError
from clusterkit.spec.files import SPEC_SUFFIXES
from clusterkit.spec.model import OsName

DEFAULTS = {"region": "us-east-1", "instance_type": "p5.48xlarge", "max_nodes": 2, "os": "ubuntu2404"}


class InitRefused(ClusterKitError):
    """The target exists, or its name is not the cluster's: one line, nothing written."""


class InitCannotWrite(InitRefused):
    """The machine refused the write (missing directory, read-only, full): exit 3, as render and lock."""

    exit_code = EXIT_ENVIRONMENT


def add_parser(sub: Any) -> None:
    p = sub.add_parser("init")
    p.add_argument("--name", required=True, help="cluster name (also the file name: cluster_configs/NAME.yaml)")
    p.add_argument("--region", default=DEFAULTS["region"], help=f"AWS region (default {DEFAULTS['region']})")
    p.add_argument("--availability-zone", metavar="AZ", help="default: the region's first, e.g. us-east-1a")
    p.add_argument("--instance-type", default=DEFAULTS["instance_type"],
                   help=f"compute instance type (default {DEFAULTS['instance_type']})")
    p.add_argument("--max-nodes", type=int, default=DEFAULTS["max_nodes"],
                   help=f"most compute nodes (default {DEFAULTS['max_nodes']})")
    p.add_argument("--os", choices=get_args(OsName), default=DEFAULTS["os"], help=f"default {DEFAULTS['os']}")
    p.add_argument("-o", "--output", metavar="PATH", help="where to write: a directory (NAME.yaml in it; a trailing / "
                                                         "makes it) or a file named NAME.yaml (default "
                                                         "cluster_configs/NAME.yaml of the checkout)")
    p.set_defaults(run=run)


# The spec field a problem names -> the init flag that set it (the hint of a refused starter spec).
FLAG_OF_FIELD = {"name": "--name", "region": "--region", "availability_zone": "--availability-zone",
                 "os": "--os", ".instance_type": "--instance-type", ".max": "--max-nodes"}


def starter_text(*, name: str, region: str, availability_zone: str, instance_type: str, max_nodes: int,
                 os_name: str, target: Path) -> str:
    """The starter spec: the few choices made, everything else left to its documented default."""
    inside = target.resolve().is_relative_to(paths.ROOT)  # relative inside the checkout, as the shipped specs
    schema = os.path.relpath(paths.SPEC_SCHEMA, target.resolve().parent) if inside else str(paths.SPEC_SCHEMA)
    in_checkout = target.resolve() == (paths.CONFIG_DIR / f"{name}.yaml").resolve()
    ref = name if in_checkout else _shown(target)
    synth = f", `make synth CLUSTER={name}` builds it offline" if in_checkout else ""
    return f"""\
# yaml-language-server: $schema={schema if schema.startswith(("/", ".")) else "./" + schema}
# Written by `clusterkit init`. Every field not set here takes its default (docs/spec-reference.md);
# `clusterkit validate {ref}` checks it{synth}.
name: {name}
region: {region}
availability_zone: {availability_zone}   # the head node's and compute nodes' subnet
os: {os_name}   # the official ParallelCluster AMI

# network: a new VPC by default; `network: {{existing: {{...}}}}` reuses yours (docs/spec.md)
# head_node: {{instance_type: c6i.2xlarge}} by default
# storage: a new FSx for Lustre file system by default (`clusterkit cost {ref}` prices the cluster)

queues:
  - name: gpu
    compute_resources:
      - name: {_resource_name(instance_type)}
        instance_type: {instance_type}
        min: 0   # nodes kept running when idle
        max: {max_nodes}

# containers:
#   images:
#     - name: my-image
#       uri: public.ecr.aws/...:tag   # then `clusterkit lock {ref}` pins its digest
"""


def _resource_name(instance_type: str) -> str:
    """``p5.48xlarge`` -> ``p5``: compute resource names allow letters, digits and hyphens."""
    family = instance_type.split(".", 1)[0]
    return "".join(c if c.isalnum() or c == "-" else "-" for c in family) or "nodes"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _check(text: str, name: str, target: Path) -> None:
    """Load the text as ``validate`` would; problems point at the target file, which does not exist yet."""
    from clusterkit.pipeline.loader import load

    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / f"{name}.yaml"
        copy.write_text(text, encoding="utf-8")
        try:
            load(str(copy), check_lock=False)
        except SpecError as exc:
            raise SpecError([dataclasses.replace(p, file=_shown(target), hint=_hint(p.path, p.hint))
                             for p in exc.problems]) from None


def _hint(field: str, hint: str) -> str:
    """The loader's hint, then which flag to change: nothing was written."""
    flag = next((f for key, f in FLAG_OF_FIELD.items() if field == key or (key.startswith(".") and
                                                                            field.endswith(key))), None)
    fix = f"nothing written: change {flag}" if flag else "nothing written"
    return f"{hint}; {fix}" if hint else fix


def target_of(output: str | None, name: str) -> tuple[Path, bool]:
    """Where the spec goes, and whether its directory is to be made: a directory (existing, or named with a
    trailing /) gets ``<name>.yaml``; a file must be named ``<name>.yaml`` (validate refuses a spec whose name
    differs from its file name)."""
    if output is None:
        return paths.CONFIG_DIR / f"{name}.yaml", False
    path = Path(output)
    if output.endswith(("/", os.sep)) or path.is_dir():
        return path / f"{name}.yaml", not path.is_dir()
    if path.stem != name or path.suffix not in SPEC_SUFFIXES:
        raise InitRefused(f"{_shown(path)}: a spec's file is named after its cluster ({name}.yaml): validate refuses "
                          f"one whose name differs (use -o {_shown(path.parent / (name + '.yaml'))}, a directory, or "
                          f"--name {path.stem})")
    return path, False


def run(args: argparse.Namespace) -> int:
    target, make_dir = target_of(args.output, args.name)
    if target.exists() or target.is_symlink():
        raise InitRefused(f"{_shown(target)}: already exists; init never overwrites (pick another --name or -o PATH)")
    text = starter_text(name=args.name, region=args.region,
                        availability_zone=args.availability_zone or f"{args.region}a",
                        instance_type=args.instance_type, max_nodes=args.max_nodes, os_name=args.os, target=target)
    _check(text, args.name, target)
    try:
        if make_dir:
            target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("x", encoding="utf-8") as out:  # exclusive: never replaces a file made meanwhile
            out.write(text)
    except FileExistsError:
        raise InitRefused(f"{_shown(target)}: already exists; init never overwrites (pick another --name or -o "
                          "PATH)") from None
    except OSError as exc:
        raise InitCannotWrite(f"{_shown(target)}: cannot write: {exc.strerror} (choose a writable -o PATH)") from None
    ref = args.name if target.resolve() == (paths.CONFIG_DIR / f"{args.name}.yaml").resolve() else _shown(target)
    print(f"wrote {_shown(target)}; next: `clusterkit validate {ref}`, `clusterkit cost {ref}`", file=sys.stdout)
    return 0
