"""The first moments of a ClusterKit process (``clusterkit``, ``python -m clusterkit``, app.py): Ctrl-C before
the error boundary (clusterkit.cli.boundary) runs.

Why: what comes first, the imports (argparse and a command's module; aws_cdk and jsii's node kernel for app.py),
is most of a short run, and a KeyboardInterrupt there is a traceback out of the import machinery. From
``catch_interrupts`` on, Ctrl-C outside ``guarded`` writes the boundary's one line and leaves with 130 at once:
nothing has begun that needs undoing. ``guarded`` puts its own handler in while its body runs (there Ctrl-C
unwinds, so what was half written is cleaned up) and this one back after, for the interpreter's exit.

Stdlib only (os, signal) and imported first: what stays uncovered is the interpreter's own start-up (site and its
.pth files, docs/cli-output.md), before ClusterKit's first line runs.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from types import FrameType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a program Ctrl-C stopped


def interrupted_line(program: str) -> str:
    """What Ctrl-C prints, wherever it comes: ``clusterkit validate: interrupted``."""
    return f"{program}: interrupted"


def command_word(words: Sequence[str]) -> str:
    """The word naming the command, as argparse picks it: the first that is not an option (clusterkit's own
    options take no value); "" when there is none."""
    return next((word for word in words if not word.startswith("-")), "")


class _LeaveAtOnce:
    """The SIGINT handler ``catch_interrupts`` installs: the line is ready-made bytes and goes out with one
    ``os.write`` (a handler that prints could land inside a write to sys.stderr, which refuses reentry)."""

    def __init__(self, program: str) -> None:
        self.line = (interrupted_line(program) + "\n").encode()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        try:
            os.write(2, self.line)
        except OSError:
            pass  # stderr itself is gone; the exit code still says it
        os._exit(EXIT_INTERRUPTED)


def catch_interrupts(*, program: str) -> None:
    """From now until the process ends, Ctrl-C outside ``guarded`` is one line and exit 130. Only for a process
    that is ``program`` (never on import: pytest and other hosts keep their own Ctrl-C), and only where SIGINT is
    Python's default: ignored (a job a shell started in the background) or someone else's handler stays so."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    try:
        signal.signal(signal.SIGINT, _LeaveAtOnce(program))
    except ValueError:  # not the main thread: its host owns the signals
        pass


def is_start_handler(handler: object) -> bool:
    """Whether ``handler`` is the one ``catch_interrupts`` installed (``guarded`` replaces it while it runs)."""
    return isinstance(handler, _LeaveAtOnce)
