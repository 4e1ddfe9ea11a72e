"""``user-dirs`` (clusterkit_node/node/user_dirs.py) as the Slurm prolog runs it: as root, in a throwaway node root
(CK_ROOT), reading the enroot.conf the node tools render. The prolog never exits non-zero (a failing prolog drains
the node), whatever it finds; the real enroot + pyxis + Slurm run of it is tests/real_runtime/test_multi_tenant.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit_node.node import args
from clusterkit_node.node.enroot_conf import Layout, render
from clusterkit_node.node.user_dirs import parents

REPO = Path(__file__).resolve().parents[2]
LAYOUT = Layout("test", "/run/enroot", "/var/tmp/enroot/data", "/var/tmp/enroot/cache", "/var/tmp/enroot/tmp")
UID, GID = 27002, 27000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes directories of other uids: needs root")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    conf = render(args.parse("compute", ["CK_CLUSTER=demo", "CK_OS=alinux2023"], "x.sh"), LAYOUT)
    (tmp_path / "etc/enroot").mkdir(parents=True)
    (tmp_path / "etc/enroot/enroot.conf").write_text(conf)
    for parent in ("run/enroot", "var/tmp/enroot/data", "var/tmp/enroot/cache"):
        (tmp_path / parent).mkdir(parents=True)
        (tmp_path / parent).chmod(0o755)
    return tmp_path


def prolog(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    job = {"SLURM_JOB_UID": str(UID), "SLURM_JOB_GID": str(GID), "SLURM_JOB_ID": "42"}
    return subprocess.run([sys.executable, "-m", "clusterkit_node", "user-dirs", "--prolog"], cwd=REPO, text=True,
                          capture_output=True, timeout=60, env={**os.environ, "CK_ROOT": str(root), **job, **env})


def test_the_parents_are_read_from_the_enroot_conf_the_node_tools_render() -> None:
    conf = render(args.parse("compute", ["CK_CLUSTER=demo", "CK_OS=alinux2023"], "x.sh"), LAYOUT)
    assert parents(conf) == ["/run/enroot", "/var/tmp/enroot/data", "/var/tmp/enroot/cache"]
    assert parents("ENROOT_DATA_PATH $(evil)/user-$(id -u)\nENROOT_CACHE_PATH /a/../b/user-$(id -u)\n") == []


def test_makes_each_dir_theirs_and_private_once(root: Path) -> None:
    first = prolog(root)
    assert first.returncode == 0, first.stderr
    for parent in ("run/enroot", "var/tmp/enroot/data", "var/tmp/enroot/cache"):
        st = (root / parent / f"user-{UID}").lstat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (UID, GID, 0o700)
    again = prolog(root)
    assert again.returncode == 0 and "made" not in again.stdout  # idempotent: nothing to do the second time
    log = (root / "var/log/clusterkit/user-dirs.log").read_text()
    assert log.count(" made ") == 3


@pytest.mark.parametrize(("plant", "why"), [
    (lambda p: (p.mkdir(), os.chown(p, 27001, GID)), "owned by uid 27001"),
    (lambda p: p.symlink_to("/tmp"), "a symlink"),
    (lambda p: p.write_text("x"), "not a directory"),
    (lambda p: (p.mkdir(mode=0o777), os.chown(p, UID, GID), p.chmod(0o777)), "writable by others (mode 0777)"),
])
def test_anything_else_in_the_way_is_quarantined(root: Path, plant, why: str) -> None:
    target = root / "var/tmp/enroot/data" / f"user-{UID}"
    plant(target)
    proc = prolog(root)
    assert proc.returncode == 0
    assert f"WARN /var/tmp/enroot/data/user-{UID} was {why}: moved to /var/tmp/enroot/data/.clusterkit-quarantine/" \
           f"user-{UID}.job42 (not used; inspect and delete it) and made anew for uid {UID}" in proc.stdout
    st = target.lstat()
    assert (st.st_uid, st.st_mode & 0o7777) == (UID, 0o700) and target.is_dir() and not target.is_symlink()
    quarantine = root / "var/tmp/enroot/data/.clusterkit-quarantine"
    assert quarantine.lstat().st_uid == 0 and quarantine.lstat().st_mode & 0o7777 == 0o700
    assert os.path.lexists(quarantine / f"user-{UID}.job42")


def test_a_world_writable_parent_is_refused_and_the_prolog_still_exits_0(root: Path) -> None:
    (root / "var/tmp/enroot/data").chmod(0o1777)
    proc = prolog(root)
    assert proc.returncode == 0
    assert ("ERROR /var/tmp/enroot/data: mode 1777 lets users make other users' directories in it; not making user "
            "dirs in it (re-run the node's bootstrap: enroot.sh makes it root's, mode 0755)") in proc.stdout
    assert not (root / "var/tmp/enroot/data" / f"user-{UID}").exists()
    assert (root / "var/tmp/enroot/cache" / f"user-{UID}").is_dir()  # the others are still made


@pytest.mark.parametrize("env", [{"SLURM_JOB_UID": ""}, {"SLURM_JOB_UID": "0; rm -rf /"}, {"SLURM_JOB_ID": "x"}])
def test_a_prolog_without_slurms_environment_makes_nothing_and_exits_0(root: Path, env: dict[str, str]) -> None:
    proc = prolog(root, **env)
    assert proc.returncode == 0 and "nothing made" in proc.stdout and "Traceback" not in proc.stderr


def test_a_missing_enroot_conf_is_one_line_and_exit_0(root: Path) -> None:
    (root / "etc/enroot/enroot.conf").unlink()
    proc = prolog(root)
    assert proc.returncode == 0 and "/etc/enroot/enroot.conf: No such file or directory" in proc.stdout
    assert "Traceback" not in proc.stderr
