"""app.py's error boundary (clusterkit/cli/boundary.py) as cdk.json runs it (`.venv/bin/python app.py`), directly and
under the real CDK CLI: Ctrl-C while synth runs through jsii, and an unwritable cloud assembly folder.

Ctrl-C is sent as a terminal sends it, to the whole process group (the CDK CLI, app.py and jsii's node kernel),
as soon as synth has staged its first asset into the output folder: app.py is then inside jsii calls, seconds
before it would finish.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv/bin/python"
CDK = REPO / "node_modules/.bin/cdk"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path), "PYTHONPATH": str(REPO), **extra}


def _terminal_sigint() -> None:
    """Ctrl-C's default disposition, as a terminal's foreground job has it (a test run started in the background
    inherits SIGINT ignored, and Python then keeps ignoring it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_once_synth_stages(argv: list[str], *, out: Path, env: dict[str, str]) -> tuple[int, str]:
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, preexec_fn=_terminal_sigint)
    try:
        deadline = time.monotonic() + 240
        while not (out.is_dir() and any(out.glob("asset.*"))):
            assert process.poll() is None, f"exited {process.returncode} before synth staged an asset"
            assert time.monotonic() < deadline, "synth staged no asset in 240 s"
            time.sleep(0.02)
        assert not (out / "manifest.json").exists(), "synth finished before the interrupt"
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, err


def test_ctrl_c_during_synth_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, err = _interrupt_once_synth_stages([str(PYTHON), "app.py"], out=out,
                                             env=_env(tmp_path, CDK_OUTDIR=str(out)))
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert (code, err.splitlines()[-1]) == (130, "app.py: interrupted")
    assert err.count("interrupted") == 1


def test_ctrl_c_during_cdk_synth_is_one_line(tmp_path: Path) -> None:
    """The CDK CLI dies of the same Ctrl-C (its own way, no output); what app.py says is one line."""
    out = tmp_path / "out"
    code, err = _interrupt_once_synth_stages([str(CDK), "synth", "--quiet", "-o", str(out)], out=out,
                                             env=_env(tmp_path))
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert code in (-signal.SIGINT, 130) and "app.py: interrupted" in err.splitlines(), err
    assert err.count("interrupted") == 1


def test_read_only_cloud_assembly_folder_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = f'mount --bind -o ro {out} {out}\nexec "$@"'
    argv = ["unshare", "-m", "sh", "-ec", script, "sh", str(PYTHON), "app.py"]
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], check=False).returncode:
        pytest.skip("needs root's `unshare -m` for a read-only bind mount")
    done = subprocess.run(argv, cwd=REPO, env=_env(tmp_path, CDK_OUTDIR=str(out)), capture_output=True, text=True,
                          timeout=300, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1] == (
        f"{out}/.clusterkit-staging: read-only file system (remount {out} read-write or work in a writable copy, "
        "then run `make synth`)")
