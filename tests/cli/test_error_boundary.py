"""The CLI's one error boundary (clusterkit/cli/boundary.py), driven through the real entry points.

Real: the console script ``.venv/bin/clusterkit`` and ``python -m clusterkit`` as processes, the kernel's own
errors (a read-only bind mount: EROFS; a folder of mode 0555 for a root without CAP_DAC_OVERRIDE: EACCES; a full
tmpfs: ENOSPC), a closed pipe, a TCP listener that accepts and never answers (a hung registry), SIGINT. The mounts
live in a private mount namespace (``unshare -m``) of the command alone: the checkout is never changed.
app.py's boundary (Ctrl-C inside synth, under the CDK CLI too) is tests/app/test_app_interrupt.py.
"""
from __future__ import annotations

import errno
import http.server
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.cli.boundary import Boundary, guarded, os_error_line
from clusterkit.paths import ROOT

CONSOLE_SCRIPT = Path(sys.executable).parent / "clusterkit"
# The checkout under test first: the editable install may point at another checkout of the same project.
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
ENTRY_POINTS = {"console-script": [str(CONSOLE_SCRIPT)], "python-m": [sys.executable, "-m", "clusterkit"]}


def _run(argv: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=timeout, check=False)


def _in_namespace(setup: str, argv: list[str], *, drop_dac: bool = False) -> list[str]:
    """``argv`` in a private mount namespace after the shell ``setup`` (mounts seen by this command only);
    ``drop_dac``: without CAP_DAC_OVERRIDE, so file modes bind root as they bind everyone else."""
    run = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *argv] if drop_dac else argv
    return ["unshare", "-m", "sh", "-ec", f'{setup}\nexec "$@"', "sh", *run]


@pytest.fixture(scope="module")
def namespaces() -> None:
    """Root's private mount namespaces (this machine runs the suite as root); elsewhere these cases cannot run."""
    probe = subprocess.run(_in_namespace("mount -t tmpfs none /mnt", ["true"]), capture_output=True, check=False)
    if probe.returncode != 0 or shutil.which("setpriv") is None:
        pytest.skip(f"needs root's `unshare -m` and setpriv: {probe.stderr.decode().strip()}")


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _stale_copy_of_rendered(tmp_path: Path) -> Path:
    """A copy of cluster_configs/rendered whose demo.yaml is stale, so `render demo` has to write it (still render's
    own file: its generated header stays, or render would refuse to overwrite it at all)."""
    copy = tmp_path / "rendered"
    shutil.copytree(ROOT / "cluster_configs/rendered", copy)
    stale = copy / "demo.yaml"
    stale.write_text(stale.read_text(encoding="utf-8") + "# stale\n", encoding="utf-8")
    return copy


# -- OSError: read-only, permission, full, missing ------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_render_into_read_only_rendered_is_one_line(namespaces: None, tmp_path: Path, entry: str) -> None:
    copy = _stale_copy_of_rendered(tmp_path)
    before = (ROOT / "cluster_configs/rendered/demo.yaml").read_bytes()
    done = _run(_in_namespace(f"mount --bind -o ro {copy} cluster_configs/rendered",
                              [*ENTRY_POINTS[entry], "render", "demo"]))
    assert done.returncode == 3
    assert _one_line(done) == ("cluster_configs/rendered/demo.yaml: read-only file system (remount "
                               "cluster_configs/rendered read-write or work in a writable copy, then run "
                               "`clusterkit render demo`)")
    assert (ROOT / "cluster_configs/rendered/demo.yaml").read_bytes() == before


def test_render_into_a_folder_root_may_not_write_is_one_line(namespaces: None, tmp_path: Path) -> None:
    copy = _stale_copy_of_rendered(tmp_path)
    copy.chmod(0o555)
    done = _run(_in_namespace(f"mount --bind {copy} cluster_configs/rendered",
                              [str(CONSOLE_SCRIPT), "render", "demo"], drop_dac=True))
    assert done.returncode == 3
    assert _one_line(done) == ("cluster_configs/rendered/demo.yaml: permission denied (`ls -ld "
                               "cluster_configs/rendered` shows who may write there: fix its owner or mode, then "
                               "run `clusterkit render demo`)")


def test_render_onto_a_full_disk_is_one_line(namespaces: None) -> None:
    fill = "dd if=/dev/zero of=cluster_configs/rendered/.fill bs=4k count=64 2>/dev/null || true"
    done = _run(_in_namespace(f"mount -t tmpfs -o size=64k none cluster_configs/rendered\n{fill}",
                              [str(CONSOLE_SCRIPT), "render", "demo"]))
    assert done.returncode == 3
    assert _one_line(done) == ("cluster_configs/rendered/demo.yaml: no space left on device (free space where "
                               "cluster_configs/rendered lives (`df -h cluster_configs/rendered`), then run "
                               "`clusterkit render demo`)")


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_offline_lock_into_read_only_cluster_configs_is_one_line(namespaces: None, entry: str, tmp_path: Path) -> None:
    """The atomic write's cleanup (removing a temporary the read-only disk never let exist) used to raise a
    second and third time; now the one error names the lock, not the temporary. (A read-only copy whose demo lock
    is stale: `lock` leaves a lock that would not change alone.)"""
    copy = tmp_path / "cluster_configs"
    shutil.copytree(ROOT / "cluster_configs", copy)
    stale = copy / "demo.images.lock"
    stale.write_text(stale.read_text(encoding="utf-8").replace('"lock_version": 1', '"lock_version": 1 '),
                     encoding="utf-8")
    done = _run(_in_namespace(f"mount --bind -o ro {copy} cluster_configs",
                              [*ENTRY_POINTS[entry], "lock", "--offline", "demo"]))
    assert done.returncode == 3
    assert _one_line(done) == ("cluster_configs/demo.images.lock: read-only file system (remount cluster_configs "
                               "read-write or work in a writable copy, then run `clusterkit lock --offline demo`)")
    assert not list((ROOT / "cluster_configs").glob(".*.tmp-*"))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_summary_of_a_missing_cdk_out_is_one_line(entry: str, tmp_path: Path) -> None:
    done = _run([*ENTRY_POINTS[entry], "summary", "--cdk-out", "/nonexistent"], cwd=tmp_path)
    assert done.returncode == 2
    assert _one_line(done) == ("/nonexistent/manifest.json: no cloud assembly here (run `make synth CLUSTER=demo` "
                               "to write one, or pass --cdk-out DIR where `cdk synth -o DIR` wrote it)")


# -- export -o: the path first, before any AWS call ----------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """An AWS endpoint stand-in that records every request and refuses it."""

    seen: list[str] = []

    def _refuse(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def aws_endpoint() -> Iterator[tuple[str, list[str]]]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("output, said", ids=["missing-folder", "a-folder"], argvalues=[
    ("missing/out.yaml", "missing/out.yaml: no such directory missing (create it with `mkdir -p missing` and run "
                         "`clusterkit export demo --bucket b -o missing/out.yaml` again, or name another path)"),
    (".", ".: is a directory (name a file, not a folder, then run `clusterkit export demo --bucket b -o .`)"),
])
def test_export_checks_its_output_path_before_any_aws_call(aws_endpoint: tuple[str, list[str]], tmp_path: Path,
                                                           output: str, said: str) -> None:
    url, seen = aws_endpoint
    env = {**ENV, "AWS_ENDPOINT_URL": url, "AWS_MAX_ATTEMPTS": "1"}
    done = _run([str(CONSOLE_SCRIPT), "export", "demo", "--bucket", "b", "-o", output], cwd=tmp_path, env=env)
    assert (done.returncode, seen) == (3, [])
    assert _one_line(done) == said


def test_export_into_a_read_only_folder_fails_before_any_aws_call(
        namespaces: None, aws_endpoint: tuple[str, list[str]], tmp_path: Path) -> None:
    url, seen = aws_endpoint
    env = {**ENV, "AWS_ENDPOINT_URL": url, "AWS_MAX_ATTEMPTS": "1"}
    (tmp_path / "out").mkdir()
    done = _run(_in_namespace(f"mount --bind -o ro {tmp_path / 'out'} {tmp_path / 'out'}",
                              [str(CONSOLE_SCRIPT), "export", "demo", "--bucket", "b", "-o", "out/x.yaml"]),
                cwd=tmp_path, env=env)
    assert (done.returncode, seen) == (3, [])
    assert _one_line(done).startswith("out/x.yaml: read-only file system (remount out read-write")


# -- a closed stdout ------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_closed_stdout_ends_quietly(entry: str) -> None:
    """`clusterkit reference | head -1` where head has already gone: no traceback, 141 as for any program
    SIGPIPE stops (the pipe's read end is closed before the command writes, so the write always fails)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*ENTRY_POINTS[entry], "reference"], cwd=ROOT, env=ENV, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_reference_into_head_through_a_shell() -> None:
    done = _run(["bash", "-c", f"set -o pipefail; {CONSOLE_SCRIPT} reference | head -1; echo \"exit $?\" >&2"])
    assert done.stdout.count("\n") == 1 and done.stderr in ("exit 0\n", "exit 141\n"), done.stderr


# -- a registry that never answers ------------------------------------------------------------------------


@pytest.fixture
def silent_registry(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A TCP listener that completes handshakes and never answers, and a spec whose images live there."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    host = f"127.0.0.1:{listener.getsockname()[1]}"
    text = (ROOT / "cluster_configs/demo.yaml").read_text(encoding="utf-8").replace("name: demo", "name: hang", 1)
    spec = tmp_path / "hang.yaml"
    spec.write_text(re.sub(r"uri: \S+", f"uri: {host}/team/app:v1", text), encoding="utf-8")
    try:
        yield host, spec
    finally:
        listener.close()


def test_lock_says_which_registry_it_waits_for_and_stops_on_ctrl_c(silent_registry: tuple[str, Path]) -> None:
    host, spec = silent_registry
    process = subprocess.Popen([str(CONSOLE_SCRIPT), "lock", spec.name], cwd=spec.parent, env=ENV, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               # Ctrl-C's default disposition, as a terminal gives it (a run started in the
                               # background inherits SIGINT ignored)
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stderr is not None
    try:
        waiting = process.stderr.readline()  # blocks until the notice: the registry has not answered for 5 s
        assert waiting == (f"waiting for {host} ({host}/team/app:v1): no answer after 5 s; gives up at 30 s "
                           "(Ctrl-C stops)\n")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
    assert (process.returncode, out, err) == (130, "", "clusterkit lock: interrupted\n")
    assert not (spec.parent / "hang.images.lock").exists()


def test_lock_gives_up_on_a_silent_registry_with_one_line_per_image(silent_registry: tuple[str, Path]) -> None:
    host, spec = silent_registry
    started = time.monotonic()
    done = _run([sys.executable, "-m", "clusterkit", "lock", "--timeout", "1", spec.name], cwd=spec.parent)
    assert time.monotonic() - started < 60
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"image '{name}': {host}/team/app:v1: no answer from {host} within 1 s (is the registry up and reachable? "
        "retry, or wait longer: clusterkit lock --timeout SECONDS)" for name in ("nccl-tests", "pytorch")]


# -- the lines themselves, errno by errno ----------------------------------------------------------------


@pytest.mark.parametrize("code, said", [
    (errno.ENOENT, "x/there.yaml: no such file (check the path, then run `clusterkit validate x/there.yaml`)"),
    (errno.ENOTDIR, "x/there.yaml: a part of the path is a file, not a directory (check the path, then run "
                    "`clusterkit validate x/there.yaml`)"),
    (errno.EDQUOT, "x/there.yaml: disk quota exceeded (free space where x lives (`df -h x`), then run "
                   "`clusterkit validate x/there.yaml`)"),
    (errno.EIO, "x/there.yaml: input/output error (run `clusterkit validate x/there.yaml` again once that is "
                "fixed)"),
])
def test_os_error_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, said: str) -> None:
    (tmp_path / "x").mkdir()
    monkeypatch.chdir(tmp_path)
    error = OSError(code, os.strerror(code), str(tmp_path / "x/there.yaml"))
    assert os_error_line(error, rerun="clusterkit validate x/there.yaml") == said


def test_the_boundary_puts_the_sigint_handler_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    assert guarded(lambda: 0, boundary=Boundary(program="clusterkit x", rerun="clusterkit x")) == 0
    assert signal.getsignal(signal.SIGINT) is before
