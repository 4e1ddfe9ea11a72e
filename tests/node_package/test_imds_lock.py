"""imds-lock's files (the boot unit and what enabling it makes) and its refusals, with a recording iptables.

The rules themselves run against the real iptables in test_imds_lock_netns.py (system tier); here, what needs no
root: the unit text, the enable links written and removed
in the order that never leaves slurmd requiring a missing unit, and the one ERROR line without iptables.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterkit_node.node import imds_lock
from clusterkit_node.node.file_set import Changes, NodeProblem


class Recorder:
    """iptables as a fresh node answers: nothing hooked yet (-C fails), everything else succeeds."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.hooked: set[str] = set()

    def __call__(self, argv, stdin=""):
        argv = list(argv)
        self.calls.append(argv)
        tool, flag = Path(argv[0]).name, argv[1] if len(argv) > 1 else ""
        key = f"{tool} {' '.join(argv[2:])}"
        rc = 0
        if flag == "-C":
            rc = 0 if key in self.hooked else 1
        elif flag == "-I":
            self.hooked.add(key.replace(" 1 ", " ", 1).replace("OUTPUT 1", "OUTPUT"))
        elif flag == "-D":
            self.hooked.discard(key)
            rc = 0
        return subprocess.CompletedProcess(argv, rc, "", "")


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setenv("CK_ROOT", str(tmp_path))
    monkeypatch.setattr(imds_lock.shutil, "which", lambda name, path=None: f"/usr/sbin/{name}")
    return tmp_path


def test_root_only_writes_and_enables_the_boot_unit_once(node):
    runner = Recorder()
    first = Changes()
    imds_lock.apply(first, "root_only", "compute", True, runner)
    unit = node / imds_lock.UNIT_PATH.lstrip("/")
    assert unit.read_text() == imds_lock.unit_text()
    for link in imds_lock.ENABLE_LINKS:
        assert (node / link.lstrip("/")).readlink() == Path(imds_lock.UNIT_PATH)
    assert "@systemd-dirty" in first.lines and first.lines.count("@changed") == 2
    restores = [c for c in runner.calls if c[0].endswith("-restore")]
    assert [c[0] for c in restores] == ["/usr/sbin/iptables-restore", "/usr/sbin/ip6tables-restore"]
    again = Changes()
    imds_lock.apply(again, "root_only", "compute", True, runner)
    assert "@systemd-dirty" not in again.lines and "@changed" not in again.lines


def test_all_users_removes_the_links_before_the_unit(node, monkeypatch):
    imds_lock.apply(Changes(), "root_only", "compute", True, Recorder())
    removed: list[str] = []
    real_remove = imds_lock.remove_file
    monkeypatch.setattr(imds_lock, "remove_file", lambda ch, path: removed.append(path) or real_remove(ch, path))
    ch = Changes()
    imds_lock.apply(ch, "all_users", "compute", True, Recorder())
    assert removed == [*imds_lock.ENABLE_LINKS, imds_lock.UNIT_PATH]
    assert not (node / "etc/systemd/system" / imds_lock.UNIT).exists()
    assert "@systemd-dirty" in ch.lines and ch.lines[-1].startswith("WARN ")


def test_no_iptables_is_one_line_that_fails_the_boot(node, monkeypatch):
    monkeypatch.setattr(imds_lock.shutil, "which", lambda name, path=None: None)
    with pytest.raises(NodeProblem, match=r"^imds-lock: iptables not found: .*security.compute_imds: all_users"):
        imds_lock.apply(Changes(), "root_only", "compute", True, Recorder())
    ch = Changes()
    imds_lock.apply(ch, "all_users", "compute", True, Recorder())  # nothing to open where there is no iptables
    assert "@changed" not in ch.lines


def test_the_unit_runs_before_slurmd_and_is_required_by_it():
    text = imds_lock.unit_text()
    assert "Before=slurmd.service" in text and "RequiredBy=slurmd.service" in text
    assert f"ExecStart=/usr/bin/env python3 {imds_lock.ZIPAPP} imds-lock --mode root_only --role compute --no-unit" \
        in text
    assert imds_lock.ENABLE_LINKS[1] == "/etc/systemd/system/slurmd.service.requires/clusterkit-imds-lock.service"
