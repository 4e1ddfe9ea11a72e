"""What the ParallelCluster AMI must already provide before a node is configured: ClusterKit never compiles or
downloads software on a node, so a missing piece fails the node with one line naming every piece and the PC
release that ships it (``require-enroot``; the head node adds pyxis and PC's example configs)."""
from __future__ import annotations

import argparse
import os
import shutil
from typing import List, Optional

from clusterkit_node.node.file_set import Changes, NodeProblem, report, root

MIN_PC_VERSION = "3.11.1"
PYXIS_SO = "/usr/local/lib/slurm/spank_pyxis.so"
PC_EXAMPLES = (
    "/opt/parallelcluster/examples/enroot/enroot.conf",
    "/opt/parallelcluster/examples/spank/plugstack.conf",
    "/opt/parallelcluster/examples/pyxis/pyxis.conf",
)


def missing(with_pyxis: bool, path: Optional[str] = None) -> List[str]:
    """What is absent; enroot is looked up on ``path`` (the node script's PATH) when given."""
    found = [] if shutil.which("enroot", path=path) else ["enroot binary (not on PATH)"]
    if with_pyxis:
        found += [] if os.path.isfile(root() + PYXIS_SO) else [f"Pyxis SPANK plugin {PYXIS_SO}"]
        found += [p for p in PC_EXAMPLES if not os.path.isfile(root() + p)]
    return found


def require_enroot(ch: Changes, with_pyxis: bool, path: Optional[str] = None) -> None:
    absent = missing(with_pyxis, path)
    if absent:
        raise NodeProblem(f"Enroot/Pyxis not found: missing {'; '.join(absent)} (official ParallelCluster AMIs >= "
                          f"{MIN_PC_VERSION} ship them pre-installed; use such an AMI - ClusterKit never compiles "
                          "or downloads software on nodes)")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("require-enroot", help="exit 1 naming every missing piece: enroot (and pyxis with PC's "
                                              "example configs: --with-pyxis)")
    p.add_argument("--with-pyxis", action="store_true")
    p.add_argument("--path", help="the PATH to find enroot on (the node script's; default: this process's)")


def cmd_require_enroot(a: argparse.Namespace) -> int:
    return report(lambda ch: require_enroot(ch, a.with_pyxis, a.path))
