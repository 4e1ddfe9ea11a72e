"""Ctrl-C at every moment of a short run, started the ways a user starts ClusterKit: the console script,
``python -m clusterkit``, app.py as cdk.json runs it, directly and under the CDK CLI (``make synth``); and what a
run imports (only the command it runs).

Why: imports are most of a short run (aws_cdk and jsii's node kernel: seconds), and they used to run before the
error boundary, so Ctrl-C then was a 20-line traceback. Real: the installed console script, the venv's python and
app.py as processes, Ctrl-C sent as a terminal sends it (SIGINT to the process group). Each moment is an import:
a test-only finder, loaded as sitecustomize from a PYTHONPATH entry of the test's own, stops the process when it
is about to import the named module, says so in a file, and waits there; the test sends Ctrl-C once the file is
there. No sleeps decide a moment, so a loaded machine gets the same moments.

In the synth tier with app.py's other interrupt test (test_app_interrupt.py, Ctrl-C mid-synth): these start
processes, and app.py's moments import aws_cdk and start jsii's kernel.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv/bin/python"
CONSOLE_SCRIPT = REPO / ".venv/bin/clusterkit"
CDK = REPO / "node_modules/.bin/cdk"

# Stops the process the first time it imports $CK_STOP_AT, writes $CK_STOPPED, and waits for the test's Ctrl-C.
STOP_HOOK = '''\
import os, sys, time

class _StopAt:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["CK_STOP_AT"]:
            sys.meta_path.remove(self)
            with open(os.environ["CK_STOPPED"], "w"):
                pass
            while True:
                time.sleep(0.01)
        return None

sys.meta_path.insert(0, _StopAt())
'''

# A spec's run in the order its moments come: the first import after the first line, the boundary, the parser,
# the command's module, the loader (inside the command's run), the colours of its output lines (after the load).
CLI_MOMENTS = ("shlex", "clusterkit.cli.boundary", "argparse", "clusterkit.cli.validate_command",
               "clusterkit.pipeline.loader", "clusterkit.cli.colour")
CLI_ENTRIES = {"console-script": [str(CONSOLE_SCRIPT)], "python-m": [str(PYTHON), "-m", "clusterkit"]}
# app.py: jsii before its kernel starts, aws_cdk's assemblies loading in the kernel, cdk-nag once aws_cdk is in,
# the spec loader after every CDK import.
APP_MOMENTS = ("jsii", "constructs", "cdk_nag", "clusterkit.pipeline.loader")


def _terminal_sigint() -> None:
    """Ctrl-C's default disposition, as a terminal's foreground job has it (a test run started in the background
    inherits SIGINT ignored, and Python then keeps ignoring it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTHON"))}
    return {**env, "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path), "NO_COLOR": "1", **extra}


def _ctrl_c_at(module: str, argv: list[str], tmp_path: Path, **env: str) -> tuple[int, str]:
    """Run ``argv`` until it is about to import ``module``, send Ctrl-C; its exit code and stderr."""
    hook, stopped = tmp_path / "hook", tmp_path / "stopped"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(STOP_HOOK)
    stopped.unlink(missing_ok=True)
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=_env(tmp_path, PYTHONPATH=f"{hook}:{REPO}", CK_STOP_AT=module,
                                        CK_STOPPED=str(stopped), **env),
                               start_new_session=True, preexec_fn=_terminal_sigint)
    try:
        deadline = time.monotonic() + 300  # a bound for a hung run, not a timing: the moment is the import
        while not stopped.exists():
            if process.poll() is not None:
                pytest.fail(f"exited {process.returncode} without importing {module}: {process.stderr.read()}")
            assert time.monotonic() < deadline, f"{module} not imported in 300 s"
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, err


@pytest.mark.parametrize("module", CLI_MOMENTS)
@pytest.mark.parametrize("entry", CLI_ENTRIES)
def test_ctrl_c_while_validate_starts_is_one_line(tmp_path: Path, entry: str, module: str) -> None:
    code, err = _ctrl_c_at(module, [*CLI_ENTRIES[entry], "validate", "demo"], tmp_path)
    assert (code, err) == (130, "clusterkit validate: interrupted\n")


@pytest.mark.parametrize("module", APP_MOMENTS)
def test_ctrl_c_while_app_py_imports_is_one_line(tmp_path: Path, module: str) -> None:
    code, err = _ctrl_c_at(module, [str(PYTHON), "app.py"], tmp_path, CDK_OUTDIR=str(tmp_path / "out"))
    assert (code, err) == (130, "app.py: interrupted\n")


@pytest.mark.parametrize("module", ["jsii", "cdk_nag"])
def test_ctrl_c_while_cdk_synth_starts_app_py_is_one_line(tmp_path: Path, module: str) -> None:
    """``make synth``'s way: the CDK CLI runs app.py (cdk.json); Ctrl-C reaches both, the CLI dies of it silently."""
    code, err = _ctrl_c_at(module, [str(CDK), "synth", "--quiet", "-o", str(tmp_path / "out")], tmp_path)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert code in (-signal.SIGINT, 130) and err.splitlines() == ["app.py: interrupted"], err


def _imported_by(argv: list[str], tmp_path: Path) -> list[str]:
    """The modules loaded once ``main(argv)`` returned, in a fresh interpreter."""
    code = ("import json, sys\n"
            "from clusterkit.cli.main import main\n"
            "try:\n"
            f"    main({argv!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([str(PYTHON), "-c", code], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300, check=True)
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def _command_modules(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m.startswith("clusterkit.cli.") and m.endswith("_command")]


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_no_command(tmp_path: Path, argv: list[str]) -> None:
    """``--help`` still lists every command (tests/cli/test_lazy_parser.py) from the table alone."""
    loaded = _imported_by(argv, tmp_path)
    assert _command_modules(loaded) == ["clusterkit.cli.version_command"]
    assert not [m for m in loaded if m.startswith(("clusterkit.spec.model", "clusterkit.pipeline", "yaml"))], loaded


def test_a_command_imports_only_its_own_module(tmp_path: Path) -> None:
    loaded = _imported_by(["validate", "demo"], tmp_path)
    assert _command_modules(loaded) == ["clusterkit.cli.validate_command", "clusterkit.cli.version_command"]
    assert "clusterkit.pipeline.loader" in loaded  # it ran


def test_interpreter_exit_is_covered_too(tmp_path: Path) -> None:
    """Ctrl-C after the command's work, while the interpreter exits (an atexit handler of the test's own stands
    for the interpreter's): the start-up handler is back in place, one line."""
    hook = tmp_path / "hook"
    hook.mkdir()
    stopped = tmp_path / "stopped"
    (hook / "sitecustomize.py").write_text(
        "import atexit, os, time\n"
        "def _wait():\n"
        "    open(os.environ['CK_STOPPED'], 'w').close()\n"
        "    while True:\n"
        "        time.sleep(0.01)\n"
        "atexit.register(_wait)\n")
    process = subprocess.Popen([str(CONSOLE_SCRIPT), "validate", "demo"], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_terminal_sigint,
                               env=_env(tmp_path, PYTHONPATH=str(hook), CK_STOPPED=str(stopped)))
    try:
        deadline = time.monotonic() + 300
        while not stopped.exists():
            assert process.poll() is None and time.monotonic() < deadline, process.returncode
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert (process.returncode, err.splitlines()[-1]) == (130, "clusterkit validate: interrupted"), err
    assert "Traceback" not in err and err.count("interrupted") == 1, err  # before it: the spec's warning
    assert out.startswith("cluster_configs/demo.yaml: ok (demo"), out  # the work was done and its output is out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
