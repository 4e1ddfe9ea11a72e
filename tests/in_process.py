"""``clusterkit ARGS`` run in this interpreter, as the unit tier runs the CLI: it imports, never spawns.

A spawned ``python -m clusterkit`` cost each call a fresh interpreter and ClusterKit's imports (about 0.4 s of CPU
on the 2-core machine); the unit tier made hundreds of them. ``clusterkit.cli.main.main(argv)`` is the whole
command, error boundary and exit codes included (``python -m clusterkit`` is ``sys.exit(main())``), so the same
assertions hold. What only a separate process shows (the console script, signals, a terminal, a fresh interpreter's
hash seed or imports) stays in the ``process`` tier (tests/tiers.py).
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from clusterkit.cli.main import main


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def clusterkit(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    """What ``clusterkit ARGS`` run in ``cwd`` with ``env`` added prints and exits with (stdout and stderr are not
    terminals: no colour)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd or Path.cwd()), _environment(env or {}), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's --help and usage errors, as the interpreter would end
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return subprocess.CompletedProcess(["clusterkit", *args], code, out.getvalue(), err.getvalue())
