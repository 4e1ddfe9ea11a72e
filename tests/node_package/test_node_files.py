"""The node's file set as the node tools write it (clusterkit_node/node/: file_set, enroot_files, preflight,
slurm_prolog, pyxis_files, pyxis_conf's compute checks), in a throwaway node root (CK_ROOT).

Real: the modules and the file system effects. What every node script logs from these lines, in which order and
with which bytes, is tests/node/test_node_golden.py's; these pin each step's rules (idempotence, modes, what is
refused) where a failure names the module.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from clusterkit_node.node import args, enroot_files, file_set, preflight, pyxis_conf, pyxis_files, slurm_prolog
from clusterkit_node.node.file_set import Changes, NodeProblem

REPO = Path(__file__).resolve().parents[2]
SO = "/usr/local/lib/slurm/spank_pyxis.so"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CK_ROOT", str(tmp_path))
    return tmp_path


def mode(path: Path) -> str:
    return f"{stat.S_IMODE(path.stat().st_mode):04o}"


def values(*extra: str, role: str = "compute") -> Dict[str, str]:
    return args.parse(role, ["CK_CLUSTER=demo", "CK_OS=rhel9", *extra], "test.sh")


def provide_hooks(root: Path, names: List[str] = list(enroot_files.HOOKS)) -> None:
    for name in names:
        p = root / "usr/share/enroot/hooks.d" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# hook {name}\n")


# --- file_set: atomic, write-only-if-changed ------------------------------------------------------------------

def test_write_file_is_idempotent_and_fixes_only_the_mode(root: Path) -> None:
    ch = Changes()
    (root / "etc").mkdir()
    assert file_set.write_file(ch, "/etc/x.conf", "0644", b"a")
    assert (root / "etc/x.conf").read_bytes() == b"a\n" and mode(root / "etc/x.conf") == "0644"
    assert not file_set.write_file(ch, "/etc/x.conf", "0644", b"a\n")
    before = (root / "etc/x.conf").stat().st_ino
    assert file_set.write_file(ch, "/etc/x.conf", "0600", b"a")
    assert (root / "etc/x.conf").stat().st_ino == before and mode(root / "etc/x.conf") == "0600"
    assert ch.lines == ["INFO wrote /etc/x.conf (mode 0644)", "INFO fixed mode of /etc/x.conf to 0600"]
    assert sorted(p.name for p in (root / "etc").iterdir()) == ["x.conf"]  # no temp file left


def test_write_file_replaces_a_symlink_and_uses_the_given_temp_dir(root: Path, monkeypatch) -> None:
    (root / "etc/d").mkdir(parents=True)
    (root / "etc/d/f").symlink_to("/etc/passwd")
    made = []
    real = file_set.tempfile.mkstemp
    monkeypatch.setattr(file_set.tempfile, "mkstemp", lambda **kw: made.append(kw["dir"]) or real(**kw))
    assert file_set.write_file(Changes(), "/etc/d/f", "0644", b"mine", tmpdir="/etc")
    assert made == [f"{root}/etc"]
    assert not (root / "etc/d/f").is_symlink() and (root / "etc/d/f").read_text() == "mine\n"


def test_ensure_dir_and_remove_file(root: Path) -> None:
    ch = Changes()
    file_set.ensure_dir(ch, "/var/tmp/enroot/tmp", "1777")
    file_set.ensure_dir(ch, "/var/tmp/enroot/tmp", "1777")
    (root / "var/tmp/enroot/tmp").chmod(0o700)
    file_set.ensure_dir(ch, "/var/tmp/enroot/tmp", "1777")
    assert mode(root / "var/tmp/enroot/tmp") == "1777" and mode(root / "var/tmp/enroot") == "0755"
    assert not file_set.remove_file(ch, "/etc/none")
    (root / "gone").write_text("x")
    assert file_set.remove_file(ch, "/gone") and not (root / "gone").exists()
    assert ch.lines == ["INFO created /var/tmp/enroot/tmp (mode 1777)",
                        "INFO fixed mode of /var/tmp/enroot/tmp to 1777", "INFO removed /gone"]


def test_report_ends_with_one_error_line(root: Path, capsys) -> None:
    def step(ch: Changes) -> None:
        ch.log("INFO", "first")
        (root / "etc").write_text("a file where a directory must be")
        file_set.ensure_dir(ch, "/etc/enroot", "0755")
    assert file_set.report(step) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "INFO first" and out[1].startswith("ERROR ") and len(out) == 2


def test_node_file_command_reads_stdin_and_marks_changes(root: Path) -> None:
    def run(*argv: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "clusterkit_node", "node-file", *argv], cwd=REPO, text=True,
                              input=stdin, capture_output=True, timeout=60, env={**os.environ, "CK_ROOT": str(root)})
    assert run("dir", "/etc/u", "0755").stdout == "INFO created /etc/u (mode 0755)\n"
    assert run("write", "/etc/u/a", "0644", stdin="x\n").stdout == "INFO wrote /etc/u/a (mode 0644)\n@changed\n"
    assert run("write", "/etc/u/a", "0644", stdin="x").stdout == ""
    assert run("remove", "/etc/u/a").stdout == "INFO removed /etc/u/a\n@changed\n"
    bad = run("write", "etc/relative", "0644")
    assert bad.returncode == 2 and bad.stdout.startswith("ERROR node-file write: needs an absolute path")


# --- enroot_files: the enroot file set of every node ----------------------------------------------------------

def test_enroot_files_without_nvme_recreate_the_run_parent_at_boot(root: Path) -> None:
    provide_hooks(root)
    ch = Changes()
    enroot_files.apply(ch, values(), "compute", scratch_mounted=False, service="slurmd")
    assert mode(root / "var/tmp/enroot/tmp") == "1777" and mode(root / "run/enroot") == "0755"
    assert (root / "etc/tmpfiles.d/clusterkit-enroot.conf").read_text().splitlines()[-1] == \
        "d /run/enroot 0755 root root -"
    assert "WARN no NVMe at /scratch: container rootfs unpack into /var/tmp/enroot/data on the root volume; size " \
           "RootVolume for the largest image" in ch.lines
    assert ch.lines[-2:] == ["@systemd-dirty", "INFO slurmd: PATH drop-in takes effect at the service's next (re)start"]
    assert "ENROOT_DATA_PATH /var/tmp/enroot/data/user-$(id -u)" in (root / "etc/enroot/enroot.conf").read_text()
    again = Changes()
    enroot_files.apply(again, values(), "compute", scratch_mounted=False, service="slurmd")
    assert [line for line in again.lines if not line.startswith("WARN")] == \
        ["INFO enroot working dirs on tmpfs (/run) + root volume (/var/tmp)"]
    enroot_files.apply(Changes(), values(), "compute", scratch_mounted=True, service=None)
    assert not (root / "etc/tmpfiles.d/clusterkit-enroot.conf").exists()


def test_missing_required_hook_is_one_line_and_optional_hook_is_enabled_when_shipped(root: Path) -> None:
    provide_hooks(root, ["50-slurm-pytorch.sh", "50-slurm-pmix.sh"])
    with pytest.raises(NodeProblem, match=r"enroot hook 50-slurm-pmi.sh not found in /usr/share/enroot/hooks.d "
                                          r"/opt/parallelcluster/examples/enroot/hooks.d \(shipped with enroot on "
                                          r"ParallelCluster AMIs >= 3.11.1\)"):
        enroot_files.install_hooks(Changes())
    provide_hooks(root, ["50-slurm-pmi.sh"])
    enroot_files.install_hooks(Changes())
    assert sorted(p.name for p in (root / "etc/enroot/hooks.d").iterdir()) == \
        ["50-slurm-pmi.sh", "50-slurm-pmix.sh", "50-slurm-pytorch.sh"]
    assert mode(root / "etc/enroot/hooks.d/50-slurm-pmi.sh") == "0755"


def test_network_file_system_is_refused(root: Path, monkeypatch) -> None:
    monkeypatch.setattr(enroot_files, "fs_type", lambda path: "nfs4")
    with pytest.raises(NodeProblem, match="enroot directory /scratch/enroot/runtime is on nfs4; .* never FSx/NFS"):
        enroot_files.make_dirs(Changes(), scratch_mounted=True)
    assert enroot_files.NETWORK_FS.fullmatch("fuse.sshfs") and not enroot_files.NETWORK_FS.fullmatch("xfs")


def test_head_node_sync_credentials_are_roots_only(root: Path) -> None:
    ecr = "CK_ECR_REGISTRIES=123456789012.dkr.ecr.eu-west-1.amazonaws.com"
    enroot_files.write_credentials(Changes(), enroot_files.credentials(values(ecr)), head=True)
    assert mode(root / "etc/clusterkit/sync-enroot") == "0700"
    assert mode(root / "etc/clusterkit/sync-enroot/.credentials") == "0600"
    assert mode(root / "etc/enroot/credentials") == "0644"
    ch = Changes()
    enroot_files.write_credentials(ch, "", head=True)
    assert ch.lines == ["INFO removed /etc/clusterkit/sync-enroot/.credentials", "INFO removed /etc/enroot/credentials"]


def test_ubuntu_2404_sysctl_is_applied_once(root: Path) -> None:
    ch = Changes()
    enroot_files.os_tweaks(ch, "ubuntu2404")
    assert ch.lines[-2:] == ["@sysctl /etc/sysctl.d/99-clusterkit-enroot.conf",
                             "INFO applied kernel.apparmor_restrict_unprivileged_userns=0"]
    again = Changes()
    enroot_files.os_tweaks(again, "ubuntu2404")
    assert again.lines == []
    proc = root / enroot_files.USERNS_PROC.lstrip("/")
    proc.parent.mkdir(parents=True)
    proc.write_text("1\n")  # the kernel says it is still restricted (a reboot without the file applied)
    enroot_files.os_tweaks(again, "ubuntu2404")
    assert again.lines == ["@sysctl /etc/sysctl.d/99-clusterkit-enroot.conf",
                           "INFO applied kernel.apparmor_restrict_unprivileged_userns=0"]
    enroot_files.os_tweaks(ch, "rhel9")


# --- preflight, prolog ----------------------------------------------------------------------------------------

def test_require_enroot_names_every_missing_piece(root: Path, tmp_path: Path) -> None:
    assert preflight.missing(False, path=str(tmp_path)) == ["enroot binary (not on PATH)"]
    with pytest.raises(NodeProblem) as exc:
        preflight.require_enroot(Changes(), True, path=str(tmp_path))
    assert str(exc.value).startswith(f"Enroot/Pyxis not found: missing enroot binary (not on PATH); Pyxis SPANK "
                                     f"plugin {SO}; /opt/parallelcluster/examples/enroot/enroot.conf; ")
    assert "AMIs >= 3.11.1 ship them pre-installed" in str(exc.value)


def test_prolog_is_executable_and_never_fails(root: Path) -> None:
    ch = Changes()
    slurm_prolog.install(ch)
    prolog = root / "opt/slurm/etc/scripts/prolog.d/10_clusterkit_enroot_user_dirs"
    assert mode(prolog) == "0755" and prolog.read_text().splitlines()[-2:] == [
        "PATH=/usr/local/bin:/usr/bin:/bin python3 -I /opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz "
        "user-dirs --prolog >/dev/null 2>&1 || true", "exit 0"]


# --- pyxis: the head node's plugstack files, the compute nodes' checks ----------------------------------------

def test_plugstack_refuses_a_required_line_for_an_absent_plugin(root: Path) -> None:
    with pytest.raises(NodeProblem, match="refusing to install a 'required' plugstack line: plugin /x.so not found"):
        pyxis_files.install(Changes(), values(), "/opt/slurm/etc", "/x.so")
    assert not (root / "opt/slurm/etc").exists()


def test_plugstack_files_report_a_change_once(root: Path) -> None:
    (root / "p.so").write_text("x")
    ch = Changes()
    pyxis_files.install(ch, values("PYXIS_SBATCH_SUPPORT=0"), "/etc/slurm", "/p.so")
    assert ch.lines[-1] == "@plugstack-changed"
    assert "required /p.so runtime_path=/run/pyxis container_scope=job sbatch_support=0" in \
        (root / "etc/slurm/plugstack.conf.d/pyxis.conf").read_text()
    again = Changes()
    pyxis_files.install(again, values("PYXIS_SBATCH_SUPPORT=0"), "/etc/slurm", "/p.so")
    assert "@plugstack-changed" not in again.lines
    assert pyxis_conf.loads("/etc/slurm", "/p.so")


def test_plugstack_loads_directly_or_through_an_include(root: Path) -> None:
    etc = root / "etc"
    (etc / "d").mkdir(parents=True)
    cases = {
        f"required {SO} runtime_path=/run/pyxis\n": True,
        "include /etc/d/*\n": False,  # include dir empty
        f"optional {SO}\n": True,
        f"required {SO}.bak\n": False,
        f"# required {SO}\n": False,
        f"required {SO}": True,  # a last line without its newline still counts
    }
    for text, expected in cases.items():
        (etc / "plugstack.conf").write_text(text)
        assert pyxis_conf.loads("/etc", SO) is expected, text
    (etc / "d" / "pyxis.conf").write_text(f"required {SO}\n")
    (etc / "plugstack.conf").write_text("include /etc/d/*\n")
    assert pyxis_conf.loads("/etc", SO)
    (etc / "plugstack.conf").unlink()
    assert not pyxis_conf.loads("/etc", SO)


def test_compute_checks_of_the_plugin_and_the_line_start(root: Path, monkeypatch) -> None:
    with pytest.raises(NodeProblem, match=f"Pyxis SPANK plugin {SO} missing on this node"):
        pyxis_conf.check_loaded(Changes(), "/opt/slurm/etc", SO)
    ch = Changes()
    pyxis_conf.check_line_start(ch, "extract", "1", "rhel9")
    assert ch.lines == ["INFO the plugstack line extracts images (no use_squashfuse=1): pyxis runs enroot create "
                        "per job"]
    monkeypatch.setattr(pyxis_conf, "start_path_check",
                        lambda want, os_name, ok: ("extract", "squashfuse not installed", [("INFO", "facts: x")],
                                                   False))
    with pytest.raises(NodeProblem, match="but this node cannot: squashfuse not installed"):
        pyxis_conf.check_line_start(ch, "squashfuse", "1", "rhel9")
    assert ch.lines[-1] == "INFO facts: x"
    # a node that could start in place but reads on one thread: its jobs run (slower), one WARN says why
    monkeypatch.setattr(pyxis_conf, "start_path_check",
                        lambda want, os_name, ok: ("extract", "its squashfuse reads on one thread", [], True))
    ch = Changes()
    pyxis_conf.check_line_start(ch, "squashfuse", "1", "ubuntu2204")
    assert ch.lines == ["WARN the cluster starts images in place (use_squashfuse=1, chosen on the head node), but "
                        "here its squashfuse reads on one thread"]
