"""The start-path decision, the node profiles it is checked against, and the self-test's image.

Real: clusterkit_node's decision on every combination of facts; the profiles file as shipped (parsed, and
checked against the OS list the spec and the nodes accept); /dev/fuse opened for real as ``nobody`` on device
nodes this test makes (char 10:229, the fuse device); the self-test's static programs EXECUTED (x86_64 natively,
aarch64 under qemu-aarch64, which `make test` installs) and read back by binutils' readelf.
The real-runtime tier (tests/real_runtime) runs both start paths through real enroot and pyxis.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from clusterkit.paths import NODE_PROFILES
from clusterkit.spec.model import OsName
from clusterkit_node.contract import profiles
from clusterkit_node.contract.settings import BY_KEY
from clusterkit_node.node.selftest_image import MESSAGE, rootfs_files, static_program
from clusterkit_node.node.start_path import EXTRACT, SQUASHFUSE, StartFacts, choose, fuse_for_users

FULL = StartFacts(pyxis="0.24.0", enroot="4.1.2", squashfuse=True, fuse_overlayfs=True, fuse_for_users=True,
                  multi_threaded_reader=True, reader="squashfuse_ll 0.6.2 (multi-threaded, /usr/bin/squashfuse_ll)")


def facts(**changes: object) -> StartFacts:
    return StartFacts(**{**FULL.__dict__, **changes})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- decision

def test_everything_there_starts_in_place():
    for full in (FULL, facts(fuse_overlayfs=False)):  # enroot 4 mounts kernel overlayfs itself
        assert (choose(full).path, choose(full).reasons) == (SQUASHFUSE, [])


@pytest.mark.parametrize("change, missing, reason", [
    ({"squashfuse": False}, ["squashfuse"], "squashfuse not installed"),
    ({"enroot": "3.4.1", "fuse_overlayfs": False}, ["fuse-overlayfs"], "fuse-overlayfs not installed"),
    ({"enroot": None, "fuse_overlayfs": False}, ["fuse-overlayfs"], "fuse-overlayfs not installed"),
    ({"squashfuse": False, "enroot": "3.4.1", "fuse_overlayfs": False}, ["squashfuse", "fuse-overlayfs"],
     "squashfuse and fuse-overlayfs not installed"),
    ({"fuse_for_users": False, "fuse_detail": "mode 0600"}, [], "/dev/fuse is not usable by unprivileged users "
                                                                 "(mode 0600)"),
    ({"pyxis": "0.20.0"}, [], "pyxis 0.20.0 extracts every image"),
    ({"pyxis": None}, [], "pyxis of unknown version extracts every image"),
])
def test_each_missing_piece_extracts_and_says_why(change, missing, reason):
    decided = choose(facts(**change))
    assert decided.path == EXTRACT and decided.missing == missing
    assert len(decided.reasons) == 1 and decided.reasons[0].startswith(reason), decided.reasons
    if missing:
        assert "pcluster build-image" in decided.reasons[0] and "ubuntu2204" in decided.reasons[0]
    assert decided.line().startswith("start path: extract (")


def test_a_single_threaded_reader_extracts_unless_the_spec_accepts_it():
    slow = facts(multi_threaded_reader=False, reader="squashfuse 0.1.104 (single-threaded, /usr/bin/squashfuse)")
    decided = choose(slow)
    assert (decided.path, decided.slow_reader, decided.missing) == (EXTRACT, True, [])
    assert decided.reasons[0].startswith("the squashfuse enroot runs here (squashfuse 0.1.104 (single-threaded")
    assert "single_threaded_in_place" in decided.reasons[0] and "ubuntu2404" in decided.reasons[0]
    assert choose(slow, single_threaded_ok=True).path == SQUASHFUSE
    # a node that cannot start in place at all says that, not the reader
    assert choose(facts(multi_threaded_reader=False, squashfuse=False)).slow_reader is False
    assert choose(slow, wanted=False).reasons == ["use_squashfuse is off in the spec"]


def test_the_spec_can_turn_it_off():
    assert choose(FULL, wanted=False).reasons == ["use_squashfuse is off in the spec"]


# ---------------------------------------------------------------------------------------------- profiles

def test_every_os_the_nodes_accept_has_a_profile_and_every_fact_a_source():
    shipped = profiles.load(str(NODE_PROFILES))
    node_os = set(re.findall(r"\w+", BY_KEY["CK_OS"].pattern))
    assert set(shipped.profiles) == node_os
    assert node_os <= set(OsName.__args__)  # type: ignore[attr-defined]
    for profile in shipped.profiles.values():
        assert set(profile.programs) == set(shipped.programs)
        for fact in profile.programs.values():  # what an AMI installs comes from the cookbook, never a guess
            assert "@" in fact.source and not fact.source.startswith("unsourced"), fact
        for fact in (profile.hooks_linked, profile.dev_fuse_mode, profile.python3):
            assert fact.source.strip() and fact.source != "unsourced", fact


def test_the_cookbook_facts_the_issue_turns_on():
    """enroot_alinux2023.rb installs no squashfuse/fuse-overlayfs; _enroot_debian.rb and enroot_redhat8.rb do."""
    shipped = profiles.load(str(NODE_PROFILES))
    assert shipped.profiles["alinux2023"].lacks() == ("fuse-overlayfs", "squashfuse")
    for os_name in ("ubuntu2204", "ubuntu2404", "rhel9"):
        assert shipped.profiles[os_name].lacks() == (), os_name
    assert shipped.profiles["ubuntu2204"].hooks_linked.value == ["50-slurm-pmi.sh", "50-slurm-pytorch.sh"]
    assert all(p.fuse_for_users for p in shipped.profiles.values())


@pytest.mark.parametrize("edit, problem", [
    (lambda d: d["profiles"]["alinux2023"]["programs"]["jq"].pop("source"), "every fact needs a source"),
    (lambda d: d["profiles"]["alinux2023"]["programs"].pop("jq"), "must list exactly the programs"),
    (lambda d: d["profiles"]["ubuntu2204"]["dev_fuse_mode"].update(value="rw"), "expected an octal mode"),
])
def test_a_broken_profiles_file_is_one_usage_line(tmp_path, edit, problem):
    doc = json.loads(NODE_PROFILES.read_text())
    edit(doc)
    path = tmp_path / "node_profiles.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(profiles.UsageError) as raised:
        profiles.load(str(path))
    (line,) = raised.value.lines
    assert line.startswith(f"{path}: ") and problem in line and "rebuild it with the CDK app" in line


# ------------------------------------------------------------------------------------ /dev/fuse for users

@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node and trying it as nobody needs root")
@pytest.mark.parametrize("mode, usable", [(0o666, True), (0o600, False)])
def test_fuse_is_tried_as_nobody_not_read_from_its_mode(mode, usable):
    root = Path(tempfile.mkdtemp(prefix="ck-fuse-", dir="/tmp"))  # a path nobody may traverse (pytest's is 0700)
    try:
        root.chmod(0o755)
        (root / "dev").mkdir(mode=0o755)
        os.mknod(root / "dev/fuse", mode | stat.S_IFCHR, os.makedev(10, 229))
        os.chmod(root / "dev/fuse", mode)  # mknod is subject to the umask
        ok, detail = fuse_for_users({"CK_ROOT": str(root)})
    finally:
        shutil.rmtree(root)
    assert ok is usable, detail
    assert detail == (f"mode {mode:04o}, opened read-write as nobody" if usable
                      else f"mode {mode:04o}, nobody cannot open it: Permission denied")


def test_no_fuse_device_is_said(tmp_path):
    assert fuse_for_users({"CK_ROOT": str(tmp_path)}) == (
        False, "/dev/fuse does not exist (fuse kernel module not loaded?)")


# ------------------------------------------------------------------------------ the self-test's programs

def _run_program(machine: str, path: Path) -> subprocess.CompletedProcess:
    native = {"x86_64": "x86_64", "aarch64": "aarch64"}[machine] == platform.machine()
    if native:
        return subprocess.run([str(path), "-c", 'exec "$@"', "sh", "/bin/sh"], capture_output=True, timeout=10)
    qemu = shutil.which(f"qemu-{machine}")
    assert qemu, f"qemu-{machine} is missing: `make test` installs qemu-user (Makefile DEB_PACKAGES)"
    return subprocess.run([qemu, str(path), "-c", 'exec "$@"', "sh", "/bin/sh"], capture_output=True, timeout=30)


@pytest.mark.parametrize("machine, elf_machine", [("x86_64", "Advanced Micro Devices X86-64"),
                                                  ("aarch64", "AArch64")])
def test_the_image_shell_runs_and_prints_one_line(tmp_path, machine, elf_machine):
    """enroot-switchroot runs `/bin/sh -c 'exec "$@"' sh CMD`: the image's /bin/sh must run with any argv."""
    program = tmp_path / "sh"
    program.write_bytes(static_program(machine))
    program.chmod(0o755)
    proc = _run_program(machine, program)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, MESSAGE, b"")
    header = subprocess.run(["readelf", "-h", "-l", str(program)], capture_output=True, text=True, check=True).stdout
    assert re.search(rf"Machine:\s+{elf_machine}", header) and "EXEC (Executable file)" in header
    assert header.count("LOAD") == 1 and "INTERP" not in header  # static: no dynamic loader to find


def test_the_image_is_deterministic_and_small():
    assert rootfs_files("x86_64") == rootfs_files("amd64")
    assert static_program("arm64") == static_program("aarch64")
    assert all(len(static_program(m)) < 512 for m in ("x86_64", "aarch64"))
    with pytest.raises(KeyError):
        static_program("ppc64le")
