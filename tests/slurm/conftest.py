"""Session fixture: a real Slurm cluster on 127.0.0.1 plus the compiled stub SPANK plugin.

Skips (with the reason) when not root or when Slurm/munge/gcc are missing, EXCEPT when CI=true or
CK_REQUIRE_SLURM=1 is set: then it fails, so CI can never go green by silently skipping the only
real-Slurm evidence. `make test` installs the packages (Makefile DEB_PACKAGES) and CI runs as root.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from slurm_cluster import SlurmCluster, missing_binaries  # noqa: E402


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get("CK_REQUIRE_SLURM") == "1":
        pytest.fail(f"real Slurm tests required here but cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        _unavailable("needs root (munged/slurmd run as root with SlurmUser=root)")
    missing = missing_binaries()
    if missing or not Path("/usr/include/slurm/spank.h").exists():
        _unavailable(f"missing {' '.join(missing) or '/usr/include/slurm/spank.h'} "
                     "(apt-get install slurmctld slurmd slurm-client munge libslurm-dev gcc)")
    root = tmp_path_factory.mktemp("slurm")
    cluster = SlurmCluster(root)
    try:
        cluster.start()
    except Exception:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def stub_plugin(slurm_cluster: SlurmCluster) -> tuple[Path, Path]:
    """Compile stub_pyxis.c against libslurm-dev's <slurm/spank.h>; returns (.so, record file)."""
    out = slurm_cluster.root / "plugin"
    out.mkdir(exist_ok=True)
    so, record = out / "stub_pyxis.so", out / "record.log"
    subprocess.run(["gcc", "-std=gnu99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    f'-DSTUB_RECORD_FILE="{record}"', "-o", str(so), str(HERE / "stub_pyxis.c")],
                   check=True, capture_output=True, text=True, timeout=60)
    return so, record
