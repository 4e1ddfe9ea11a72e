"""``python3 clusterkit_node.pyz COMMAND ...`` (the bundle's zipapp) and ``python -m clusterkit_node`` (a checkout).

Two kinds of caller, one file: the node scripts and the image-sync unit run the image store and node commands
(``sync``, ``status``, ``verify``, ``fingerprint``, ``drift``, ``start-path``, ``selftest``; jobs ``nccl-check``:
commands.py), and pyxis runs the zipapp itself
as its ``importer=`` (``get URI`` / ``release``: pyxis_importer.py), per container step, as the job's
user. The importer's words, and the Slurm prolog's ``user-dirs --prolog`` (every job, every node), are dispatched
before anything else is imported, so a job or container start pays only for the modules it uses.
"""
from __future__ import annotations

import sys
from typing import Iterable, Optional

IMPORTER_COMMANDS = ("get", "release")  # pyxis' importer protocol (pyxis 0.24.0 importers/README.md)
PROLOG_WORDS = ["user-dirs", "--prolog"]  # what the Slurm prolog runs (node/slurm_prolog.py), every job on every node


def main(argv: Optional[Iterable[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] and args[0] in IMPORTER_COMMANDS:
        from clusterkit_node.node import pyxis_importer
        return pyxis_importer.main(args)
    if args == PROLOG_WORDS:  # the prolog's exact words skip argparse and the command table too
        from clusterkit_node.node import user_dirs
        return user_dirs.prolog()
    from clusterkit_node import commands
    return commands.main(args)


if __name__ == "__main__":
    sys.exit(main())
