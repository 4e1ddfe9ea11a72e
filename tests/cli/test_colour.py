"""Colour on a terminal only: ``validate`` paints its ok lines and problems when the stream is a TTY, and
never in a pipe or with NO_COLOR set (the rule of tests/diff/test_diff_cli.py::test_colour_on_a_terminal_only,
the same pty technique)."""
from __future__ import annotations

import os
import pty
import subprocess
import sys

from clusterkit.paths import ROOT

ANSI = "\x1b["


def on_terminal(*args: str, stream: str, env: dict[str, str] | None = None) -> str:
    """What ``python -m clusterkit ARGS`` writes to ``stream`` (stdout or stderr) when it is a terminal."""
    primary, secondary = pty.openpty()
    other = subprocess.PIPE
    try:
        done = subprocess.run([sys.executable, "-m", "clusterkit", *args], cwd=ROOT,
                              stdout=secondary if stream == "stdout" else other,
                              stderr=secondary if stream == "stderr" else other,
                              env={**os.environ, "TERM": "xterm", **(env or {})}, timeout=120, check=False)
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(primary)
    assert done.returncode in (0, 2)
    return b"".join(chunks).decode()


def piped(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_ok_lines_are_green_on_a_terminal_only() -> None:
    assert (f"{ANSI}32mcluster_configs/p4d-existing.yaml: ok (p4d-existing; GPU nodes: "
            "nvidia-container-cli 1.18.2 (deb, via the store))") in on_terminal(
        "validate", "p4d-existing", stream="stdout")
    assert ANSI not in piped("validate", "p4d-existing").stdout
    assert ANSI not in on_terminal("validate", "p4d-existing", stream="stdout", env={"NO_COLOR": "1"})


def test_errors_are_red_on_a_terminal_only() -> None:
    on_tty = on_terminal("validate", "no-such-cluster", stream="stderr")
    assert on_tty.startswith(f"{ANSI}1;31m") and "no-such-cluster.yaml: no such spec file" in on_tty
    error = piped("validate", "no-such-cluster")
    assert error.returncode == 2 and ANSI not in error.stderr and "no such spec file" in error.stderr
