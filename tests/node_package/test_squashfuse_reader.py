"""squashfuse_reader: which squashfuse enroot runs, judged from the binary itself, and the wrapper that makes it the
node's multi-threaded squashfuse_ll.

Real: Debian 12's own squashfuse 0.1.104 binaries (`make test` installs the package) probed as they are, their ELF
imports read and their --help run; the wrapper run by /bin/sh and checked by shellcheck; the files written into a
temp node root (CK_ROOT). The multi-threaded squashfuse_ll 0.6.2 built from ../shared/vendor is probed, and serves
users' jobs, in tests/real_runtime/test_inplace_reader.py.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit_node.node import squashfuse_reader as sr
from clusterkit_node.node.file_set import Changes, NodeProblem
from tests.node.test_node_shellcheck import shellcheck

DEBIAN_LL, DEBIAN_HL = "/usr/bin/squashfuse_ll", "/usr/bin/squashfuse"


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A node root whose PATH has its own /usr/local/bin first, then a bin dir for test binaries, then the host's
    (in the process environment too: the node's file writes read CK_ROOT there)."""
    (tmp_path / "usr/local/bin").mkdir(parents=True)
    (tmp_path / "opt/bin").mkdir(parents=True)
    values = {"CK_ROOT": str(tmp_path), "PATH": f"{tmp_path}/usr/local/bin:{tmp_path}/opt/bin:/usr/bin:/bin"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def test_debians_squashfuse_binaries_are_judged_single_threaded_from_what_they_import(env):
    ll = sr.probe(DEBIAN_LL, env)
    hl = sr.probe(DEBIAN_HL, env)
    assert ll == sr.Reader(DEBIAN_LL, sr.LOW_LEVEL, "0.1.104", False, False)
    assert hl == sr.Reader(DEBIAN_HL, sr.HIGH_LEVEL, "0.1.104", False, True)
    assert not ll.serves_in_place and not hl.serves_in_place
    assert "older than 0.2.0, it rejects enroot's -o uid=,gid=" in sr.why_not(ll)
    # the help text lists libfuse's multi-thread options all the same: it is not what decides
    shown = subprocess.run([DEBIAN_LL, "--help"], capture_output=True, text=True)
    assert "disable multi-threaded operation" in shown.stdout + shown.stderr


def test_a_file_that_is_not_a_program_is_no_reader(env, tmp_path):
    script = tmp_path / "opt/bin/squashfuse_ll"
    script.write_text("#!/bin/sh\necho squashfuse 9.9.9\n")
    script.chmod(0o755)
    assert sr.probe(str(script), env) == sr.Reader(str(script), sr.HIGH_LEVEL, "9.9.9", False, True)
    assert sr.probe(str(tmp_path / "missing"), env) is None


def test_the_wrapper_runs_its_target_with_one_malloc_arena_and_reads_back(tmp_path):
    text = sr.wrapper_text("/usr/bin/squashfuse_ll")
    path = tmp_path / "squashfuse"
    path.write_text(text)
    assert sr.wrapper_target(str(path)) == "/usr/bin/squashfuse_ll"
    r = subprocess.run([shellcheck(), "--severity=style", "--shell=sh", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    # run by sh: the target gets the arguments unchanged and the tunable after the caller's own
    probe = tmp_path / "target"
    probe.write_text('#!/bin/sh\nprintf "%s|" "$GLIBC_TUNABLES" "$@"\n')
    probe.chmod(0o755)
    path.write_text(sr.wrapper_text(str(probe)))
    out = subprocess.run(["sh", str(path), "-f", "-o", "uid=1,gid=2", "a b.sqsh", "/m"], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "GLIBC_TUNABLES": "glibc.x=1"}).stdout
    assert out == "glibc.x=1:glibc.malloc.arena_max=1|-f|-o|uid=1,gid=2|a b.sqsh|/m|"
    out = subprocess.run(["sh", str(path)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
    assert out == "glibc.malloc.arena_max=1|"


@pytest.mark.parametrize("target", ["/usr/bin/squash fuse", "/usr/bin/$(id)", "relative/ll", "/a/../b", "/a\n/b"])
def test_no_path_reaches_the_wrapper_unchecked(target):
    with pytest.raises(NodeProblem, match="refusing to write a wrapper"):
        sr.wrapper_text(target)


def test_no_multi_threaded_squashfuse_ll_nothing_written_and_it_says_so(env, tmp_path):
    ch = Changes()
    serving = sr.set_reader(env, ch)
    assert serving is not None and serving.path == DEBIAN_HL
    assert not (tmp_path / "usr/local/bin/squashfuse").exists()
    assert ch.lines == [
        f"INFO squashfuse-reader: not using squashfuse_ll 0.1.104 (single-threaded, {DEBIAN_LL}): older than 0.2.0, "
        "it rejects enroot's -o uid=,gid= (squashfuse NEWS 0.2.0) and would fail every in-place start",
        f"INFO squashfuse-reader: enroot runs squashfuse 0.1.104 (single-threaded, {DEBIAN_HL}): no multi-threaded "
        "squashfuse_ll >= 0.3.0 here, so images are extracted unless the spec allows single-threaded in-place starts "
        "(containers.pyxis.single_threaded_in_place)"]


def test_a_wrapper_of_ours_goes_when_its_binary_no_longer_serves_and_a_foreign_file_stays(env, tmp_path):
    link = tmp_path / "usr/local/bin/squashfuse"
    link.write_text(sr.wrapper_text("/opt/bin/squashfuse_ll"))  # an earlier boot's, its binary since replaced
    ch = Changes()
    sr.set_reader(env, ch)
    assert not link.exists()
    assert ch.lines[:2] == ["INFO removed /usr/local/bin/squashfuse",
                            "WARN squashfuse-reader: removed ClusterKit's /usr/local/bin/squashfuse: its squashfuse_ll "
                            f"no longer serves (squashfuse_ll 0.1.104 (single-threaded, {DEBIAN_LL}): older than "
                            "0.2.0, it rejects enroot's -o uid=,gid= (squashfuse NEWS 0.2.0) and would fail every "
                            "in-place start)"]
    shutil.copy(DEBIAN_HL, link)  # a custom AMI's own squashfuse there
    ch = Changes()
    sr.set_reader(env, ch)
    assert link.read_bytes() == Path(DEBIAN_HL).read_bytes()
    assert ch.lines == ["INFO squashfuse-reader: /usr/local/bin/squashfuse is not ClusterKit's (a custom AMI's?): left "
                        f"alone; enroot runs squashfuse 0.1.104 (single-threaded, {link})"]


def test_the_command_reports_a_file_system_it_cannot_write(env, tmp_path, monkeypatch, capsys):
    """Something in the way of the wrapper (here a file where /usr/local/bin should be): one ERROR line, exit 1."""
    fake = sr.Reader(str(tmp_path / "opt/bin/squashfuse_ll"), sr.LOW_LEVEL, "0.6.2", True, True)
    monkeypatch.setattr(sr, "low_level_candidate", lambda env: fake)
    shutil.rmtree(tmp_path / "usr/local/bin")
    (tmp_path / "usr/local/bin").write_text("in the way\n")
    assert sr.cmd_squashfuse_reader(None) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("ERROR squashfuse-reader: cannot write /usr/local/bin/squashfuse: "), line
