"""The one error boundary of ``clusterkit`` and ``app.py``: what a user or the machine can cause ends in one line
on stderr and an exit code (docs/cli-output.md "Exit codes"), never a traceback.

Only bugs keep their traceback: they are ours to fix, and the traceback is how a report reaches us.
"""
from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from clusterkit.cli.start import EXIT_INTERRUPTED, interrupted_line, is_start_handler
from clusterkit.spec.errors import EXIT_USER_ERROR, ClusterKitError

EXIT_ENVIRONMENT = 3  # a file could not be read or written, or a registry did not answer: the spec is fine
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`'s `yes`


@dataclass(frozen=True, kw_only=True)
class Boundary:
    """Who is speaking (``clusterkit lock``, ``app.py``) and the command that runs it again (the hints say it)."""

    program: str
    rerun: str
    # app.py: after Ctrl-C, leave at once (os._exit) once the line is out, so that nothing jsii's dying node kernel
    # still relays to stderr, and none of jsii's exit handlers (a broken pipe to that kernel), comes after it
    leave_at_once: bool = False


def guarded(body: Callable[[], int], *, boundary: Boundary) -> int:
    """``body()``'s exit code, or the exit code of the one line printed for what stopped it."""
    interrupted, previous = _catch_sigint()
    try:
        code = body()
        sys.stdout.flush()  # inside the boundary: a closed pipe raises here, not in the interpreter's exit
        return code
    except SystemExit:  # argparse's --help and usage errors: their output may meet a closed pipe too
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _stdout_closed()
        raise
    except KeyboardInterrupt:
        return _interrupted(boundary)
    except BrokenPipeError:
        return _stdout_closed()
    except ClusterKitError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        code = getattr(exc, "exit_code", EXIT_USER_ERROR)
        return code if isinstance(code, int) else EXIT_USER_ERROR
    except OSError as exc:
        if _interrupt_pending(interrupted):  # Ctrl-C reached a child first (jsii's node kernel), its pipe broke
            return _interrupted(boundary)
        return _say(os_error_line(exc, rerun=boundary.rerun), EXIT_ENVIRONMENT)
    except Exception:
        if _interrupt_pending(interrupted):  # e.g. jsii's error for a kernel that Ctrl-C killed
            return _interrupted(boundary)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _interrupt_pending(seen: list[bool]) -> bool:
    """Whether Ctrl-C is behind this error. The child (jsii's node kernel) may die of it and break our pipe
    before Python runs its own handler for the same signal: give that handler a moment to run and mark it."""
    if not seen:
        try:
            time.sleep(0.2)
        except KeyboardInterrupt:
            pass
    return bool(seen)


def os_error_line(exc: OSError, *, rerun: str) -> str:
    """``PATH: what the system said (hint naming the command to run again)``, errno by errno."""
    path = Path(exc.filename2 or exc.filename) if (exc.filename2 or exc.filename) else None
    shown = _shown(path) if path is not None else ""
    folder = _shown(path.parent) if path is not None else "the folder"
    code = exc.errno
    if code == errno.EROFS:
        said = "read-only file system"
        hint = f"remount {folder} read-write or work in a writable copy, then run `{rerun}`"
    elif code in (errno.EACCES, errno.EPERM):
        said = "permission denied"
        hint = f"`ls -ld {folder}` shows who may write there: fix its owner or mode, then run `{rerun}`"
    elif code in (errno.ENOSPC, errno.EDQUOT):
        said = "no space left on device" if code == errno.ENOSPC else "disk quota exceeded"
        hint = f"free space where {folder} lives (`df -h {folder}`), then run `{rerun}`"
    elif code == errno.ENOENT and path is not None and not path.parent.is_dir():
        said = f"no such directory {folder}"
        hint = f"create it with `mkdir -p {folder}` and run `{rerun}` again, or name another path"
    elif code == errno.ENOENT:
        said = "no such file"
        hint = f"check the path, then run `{rerun}`"
    elif code == errno.EISDIR:
        said = "is a directory"
        hint = f"name a file, not a folder, then run `{rerun}`"
    elif code == errno.ENOTDIR:
        said = "a part of the path is a file, not a directory"
        hint = f"check the path, then run `{rerun}`"
    else:
        said = (exc.strerror or str(exc)).lower()
        hint = f"run `{rerun}` again once that is fixed"
    return f"{shown}: {said} ({hint})" if shown else f"{said} ({hint})"


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (what a user typed or can type)."""
    absolute = Path(os.path.abspath(path))
    cwd = Path.cwd()
    return str(absolute.relative_to(cwd)) if absolute.is_relative_to(cwd) and absolute != cwd else str(path)


def _interrupted(boundary: Boundary) -> int:
    code = _say(interrupted_line(boundary.program), EXIT_INTERRUPTED)
    if boundary.leave_at_once:
        os._exit(code)
    return code


def _say(line: str, code: int) -> int:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass  # stderr itself is gone; the exit code still says it
    return code


def _stdout_closed() -> int:
    """The reader of stdout went away (``clusterkit reference | head -1``): stop quietly.

    Python's docs (signal module, "Note on SIGPIPE"): point stdout at devnull so the interpreter's final flush
    of what is still buffered does not raise again at exit."""
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): nothing to flush at exit
        return EXIT_BROKEN_PIPE
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    return EXIT_BROKEN_PIPE


def _catch_sigint() -> tuple[list[bool], signal.Handlers | Callable[..., object] | int | None]:
    """Ctrl-C raises KeyboardInterrupt as before, and leaves a mark: a child in the same process group (jsii's
    node kernel) dies of the same Ctrl-C, and what breaks because of that is the interrupt too. Returns the mark
    and the handler to put back (None: nothing was changed); the start-up handler (clusterkit.cli.start) is
    replaced for the body's run and comes back after it."""
    seen: list[bool] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler and not is_start_handler(previous):
        return seen, None  # SIGINT ignored or handled by whoever runs us: leave it so

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        seen.append(True)
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: signals go to the main thread's handler anyway
        return seen, None
    return seen, previous
