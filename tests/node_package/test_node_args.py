"""The node tools' Args parser (clusterkit_node/node/args.py) and the node setup commands the node scripts call
(node-args, enroot-files, pyxis-files, pyxis-line-check), run as processes the way the scripts
run them: one line and exit 2 for a bad Arg, never a traceback for anything a user or a node can cause.

(Every file a node writes from them, byte for byte: tests/node/test_node_golden.py.)
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit_node.contract import settings
from clusterkit_node.node import args, pyxis_conf
from clusterkit_node.node.enroot_conf import Layout, render

REPO = Path(__file__).resolve().parents[2]
BASE = ["CK_CLUSTER=demo", "CK_OS=rhel9"]
HEAD = [*BASE, "CK_REGION=us-east-1", "CK_BUNDLE=s3://bucket-1/" + "a" * 64 + ".zip"]


def tools(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "clusterkit_node", *argv], cwd=REPO, capture_output=True,
                          timeout=60, env={**os.environ, **(env or {})})


def test_role_keys_are_the_table() -> None:
    keys = {s.key for s in settings.SETTINGS}
    assert set(args.role_keys("head")) == keys
    head_only = {"CK_BUNDLE", "CK_STORE_GC_TIMER", "CK_STORE_GC_GRACE_HOURS", "CK_STORE_GC_STALE_DAYS"}
    assert {s.key for s in settings.SETTINGS if s.head_only} == head_only
    assert set(args.role_keys("compute")) == keys - head_only
    assert args.role_keys("head") == sorted(keys)
    assert args.required_keys("head") == ["CK_BUNDLE", "CK_CLUSTER", "CK_OS", "CK_REGION"]
    assert args.required_keys("compute") == ["CK_CLUSTER", "CK_OS"]


def test_defaults_first_then_args() -> None:
    values = args.parse("compute", [*BASE, "PYXIS_CONTAINER_SCOPE=global"], "x.sh")
    assert values["PYXIS_CONTAINER_SCOPE"] == "global"
    assert values["ENROOT_SQUASH_OPTIONS"] == settings.DEFAULT_SQUASH_OPTIONS
    assert "CK_BUNDLE" not in values


@pytest.mark.parametrize(("bad", "message"), [
    ("ck_store=/x", "Args[3] ck_store: unknown key ck_store (did you mean CK_STORE?)"),
    ("MOUNT_HOME=no", "Args[3] MOUNT_HOME: unknown key MOUNT_HOME (did you mean ENROOT_MOUNT_HOME?)"),
    ("container_scope=job", "Args[3] container_scope: unknown key container_scope (did you mean "
                            "PYXIS_CONTAINER_SCOPE?)"),
    ("ENROOT_TRANSFER_RETRIE=5", "Args[3] ENROOT_TRANSFER_RETRIE: unknown key ENROOT_TRANSFER_RETRIE (did you mean "
                                 "ENROOT_TRANSFER_RETRIES?)"),
    ("FOO=1", "Args[3] FOO: unknown key FOO (known keys: " + " ".join(args.role_keys("compute")) + ")"),
    ("CK_BUNDLE=s3://b/x.zip", "Args[3] CK_BUNDLE: unknown key CK_BUNDLE for x.sh (CK_BUNDLE is head-node only)"),
    ("CK_OS=ubuntu2204", "Args[3] CK_OS: given twice (first at Args[2]; keep one)"),
    ("novalue", "Args[3] 'novalue': not KEY=VALUE (each CustomActions Args entry is one KEY=VALUE string)"),
    ("PYXIS_SBATCH_SUPPORT=yes", "Args[3] PYXIS_SBATCH_SUPPORT=yes: invalid value (expected 0 or 1)"),
    ("CK_STORE=/fsx/x\nCK_OS=rhel8", "Args[3] CK_STORE=/fsx/x\\nCK_OS=rhel8: invalid value (expected an absolute "
                                     "path whose parts are letters, digits, . _ - and do not start with a dot, "
                                     "e.g. /fsx/containers)"),
])
def test_bad_args_name_the_arg_and_what_is_expected(bad: str, message: str) -> None:
    with pytest.raises(args.ArgsError) as caught:
        args.parse("compute", [*BASE, bad], "x.sh")
    assert str(caught.value) == message


def test_missing_and_empty_required() -> None:
    with pytest.raises(args.ArgsError, match=r"^Args: missing required key CK_OS \(add 'CK_OS=<one of"):
        args.parse("compute", ["CK_CLUSTER=a"], "x.sh")
    with pytest.raises(args.ArgsError, match="^Args: missing required key CK_BUNDLE"):
        args.parse("head", [*BASE, "CK_REGION=us-east-1"], "head_node.sh")
    with pytest.raises(args.ArgsError, match=r"^Args\[1\] CK_CLUSTER=: invalid value"):
        args.parse("compute", ["CK_CLUSTER=", "CK_OS=rhel9"], "x.sh")


def test_node_env_quotes_for_the_shell() -> None:
    env = args.node_env({"CK_STORE": "/fsx/it's", "CK_OS": "rhel9"}, "x.sh")
    assert env.splitlines()[2:] == ["CK_OS='rhel9'", "CK_STORE='/fsx/it'\\''s'"]
    out = subprocess.run(["bash", "-c", env + '\nprintf %s "$CK_STORE"'], capture_output=True, text=True,
                         check=True).stdout
    assert out == "/fsx/it's"


@pytest.mark.parametrize("argv", [
    ["FOO=1"], ["CK_STORE=/fsx/a\nb"], ["=x"], [""], ["CK_CLUSTER=d\udce9mo"], ["CK_OS=rhel9\x00"[:-1] + "x"],
])
def test_cli_bad_args_exit_2_with_one_line_and_no_traceback(argv: list[str]) -> None:
    r = tools("node-args", "--role", "compute", "--script", "x.sh", "--", *BASE, *argv)
    assert r.returncode == 2
    assert r.stderr == b""
    assert r.stdout.count(b"\n") == 1 and r.stdout.startswith(b"Args")


def test_cli_keeps_bytes_that_are_not_utf8() -> None:
    r = subprocess.run([sys.executable, "-m", "clusterkit_node", "node-args", "--role", "compute", "--",
                        b"CK_CLUSTER=d\xe9mo", "CK_OS=rhel9"], cwd=REPO, capture_output=True, timeout=60)
    assert r.returncode == 2 and b"CK_CLUSTER=d\xe9mo: invalid value" in r.stdout


def test_cli_prints_node_env() -> None:
    r = tools("node-args", "--role", "head", "--script", "head_node.sh", "--", *HEAD)
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert text.startswith("# ClusterKit node settings (head_node.sh Args + documented defaults); shell syntax.\n")
    assert "CK_BUNDLE='s3://bucket-1/" in text and "PYXIS_USE_SQUASHFUSE='1'\n" in text


def test_node_setup_commands_refuse_bad_args_the_same_way() -> None:
    r = tools("enroot-files", "--role", "compute", "--", *BASE, "ck_os=x")
    assert (r.returncode, r.stdout) == (2, b"ERROR Args[3] ck_os: unknown key ck_os (did you mean CK_OS?)\n")
    r = tools("pyxis-files", "--etc", "/none", "--so", "/none.so", "--role", "compute", "--", "CK_OS=rhel9")
    assert r.returncode == 2 and r.stdout.startswith(b"ERROR Args: missing required key CK_CLUSTER")


def test_enroot_conf_passes_the_settings_through() -> None:
    values = args.parse("compute", [*BASE, "ENROOT_MAX_PROCESSORS=4"], "x.sh")
    text = render(values, Layout("here", "/r", "/d", "/c", "/t"))
    assert "ENROOT_MAX_PROCESSORS 4\n" in text and "ENROOT_RUNTIME_PATH /r/user-$(id -u)\n" in text
    assert "ENROOT_CONFIG_PATH ${HOME:-$(echo ~)}/.config/enroot\n" in text
    plain = render(args.parse("compute", BASE, "x.sh"), Layout("m", "/r", "/d", "/c", "/t"))
    assert "ENROOT_MAX_PROCESSORS" not in plain


@pytest.mark.parametrize(("version", "enroot_load", "words", "levels"), [
    ("0.24.0", "1", "use_enroot_load=1 importer=", ["INFO", "INFO", "INFO"]),
    ("0.21.0", "1", "use_enroot_load=1", ["INFO", "INFO", "INFO"]),
    ("0.20.0", "1", "", ["INFO", "WARN", "INFO", "INFO"]),
    (None, "0", "", ["WARN", "INFO", "INFO"]),
])
def test_pyxis_options_follow_the_installed_pyxis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str | None,
                                                  enroot_load: str, words: str, levels: list[str]) -> None:
    so = tmp_path / "spank_pyxis.so"
    so.write_bytes(b"\x7fELF\0" + (f"pyxis: version v{version}\0".encode() if version else b""))
    monkeypatch.setattr(pyxis_conf.start_path, "report", lambda want, os_name, st_ok: ["path=squashfuse", "facts: x"])
    values = args.parse("compute", [*BASE, f"PYXIS_USE_ENROOT_LOAD={enroot_load}"], "x.sh")
    line, events = pyxis_conf.options(values, str(so))
    extra = line.split("execute_entrypoint=0")[1].strip()
    assert extra.startswith(words) if words else extra == ""
    assert ("use_squashfuse=1" in line) is (version == "0.24.0")
    assert [level for level, _ in events][:len(levels)] == levels


def test_plugstack_keeps_a_site_file_and_adds_the_include() -> None:
    include = "include /etc/slurm/plugstack.conf.d/*\n"
    assert pyxis_conf.plugstack(None, "/etc/slurm").endswith("\n" + include)
    assert pyxis_conf.plugstack("  \n", "/etc/slurm").startswith("# Managed by ClusterKit")
    assert pyxis_conf.plugstack("optional x.so", "/etc/slurm") == "optional x.so\n" + include
    assert pyxis_conf.plugstack(f"a\n{include}\n\n", "/etc/slurm") == f"a\n{include}\n\n"


def test_line_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CK_ROOT", str(tmp_path))
    (tmp_path / "so").write_bytes(b"pyxis: version v0.21.0\n")
    importer = tmp_path / "imp"
    importer.write_text("x")
    importer.chmod(0o755)
    assert pyxis_conf.line_check("required /so use_enroot_load=1 importer=/imp\n", "/so", "/e")[1] is not None
    assert pyxis_conf.line_check("required /so use_enroot_load=1\n", "/so", "/e") == ("extract", None)
    assert pyxis_conf.line_check("# required /so use_squashfuse=1\n", "/so", "/e") == ("extract", None)
    (tmp_path / "so").write_bytes(b"pyxis: version v0.24.0\n")
    assert pyxis_conf.line_check("required /so use_squashfuse=1 importer=/imp\n", "/so", "/e") == ("squashfuse", None)
    problem = pyxis_conf.line_check("required /so importer=/gone\n", "/so", "/e")[1]
    assert problem is not None and problem.startswith("pyxis importer /gone (from pyxis.conf) is not an executable")


def test_the_zipapp_parses_args_under_python_3_9(python39: str, tmp_path: Path) -> None:
    """What the node scripts run first, under the oldest python3 of a supported AMI, from the built zipapp."""
    from clusterkit.artifacts.bundle import ZIPAPP, build_zipapp

    app = tmp_path / ZIPAPP
    app.write_bytes(build_zipapp())
    ok = subprocess.run([python39, str(app), "node-args", "--role", "compute", "--", *BASE], capture_output=True,
                        timeout=60)
    assert ok.returncode == 0 and b"CK_OS='rhel9'\n" in ok.stdout, ok.stderr
    bad = subprocess.run([python39, str(app), "node-args", "--role", "compute", "--", *BASE, "ck_store=/x"],
                         capture_output=True, timeout=60)
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        2, b"Args[3] ck_store: unknown key ck_store (did you mean CK_STORE?)\n", b"")
