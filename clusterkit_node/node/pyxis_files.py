"""``pyxis-files``: the head node's plugstack.conf (including plugstack.conf.d/*) and pyxis.conf in it, rendered by
pyxis_conf.py; /opt/slurm is NFS-shared, so every node loads these two files.

Why it refuses an absent plugin: a ``required`` line for a plugin that is not there stops slurmd and every
srun/sbatch. pyxis.conf's temp file lives in Slurm's etc dir, never in plugstack.conf.d, so no node ever includes
a half-written or temp file (aws-parallelcluster#6459). A site's own plugstack.conf is kept, with the include line
added. Prints ``@plugstack-changed`` when either file changed (the script then runs ``scontrol reconfigure``).
"""
from __future__ import annotations

import argparse
import os
from typing import Dict

from clusterkit_node.node import args as node_args
from clusterkit_node.node.file_set import Changes, NodeProblem, ensure_dir, report, root, write_file
from clusterkit_node.node.pyxis_conf import options, plugstack, render_conf


def install(ch: Changes, values: Dict[str, str], etc: str, so: str) -> None:
    if not os.path.isfile(root() + so):
        raise NodeProblem(f"refusing to install a 'required' plugstack line: plugin {so} not found (it would stop "
                          "slurmd and every srun/sbatch)")
    ensure_dir(ch, f"{etc}/plugstack.conf.d", "0755")
    path = f"{etc}/plugstack.conf"
    existing = None
    if os.path.isfile(root() + path):
        with open(root() + path, encoding="utf-8", errors="surrogateescape") as fh:
            existing = fh.read()
    changed = write_file(ch, path, "0644", os.fsencode(plugstack(existing, etc)))
    words, events = options(values, so)
    for level, message in events:
        ch.log(level, message)
    changed = write_file(ch, f"{etc}/plugstack.conf.d/pyxis.conf", "0644", os.fsencode(render_conf(so, words)),
                         tmpdir=etc) or changed
    if changed:
        ch.mark("plugstack-changed")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("pyxis-files", help="head node: write plugstack.conf and plugstack.conf.d/pyxis.conf for the "
                                           "installed pyxis and the node's Args; prints what changed")
    p.add_argument("--etc", required=True, help="Slurm's etc directory")
    p.add_argument("--so", required=True, help="the pyxis plugin")
    node_args.add_role_arguments(p)


def cmd_pyxis_files(a: argparse.Namespace) -> int:
    values = node_args.parsed_or_reported(a, "ERROR ")
    if values is None:
        return node_args.EXIT_BAD_ARGS
    return report(lambda ch: install(ch, values, a.etc, a.so))
