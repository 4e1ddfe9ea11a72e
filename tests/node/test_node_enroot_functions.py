"""Functions of bootstrap_scripts/enroot.sh called directly from bash (what they run in the node tools, e.g.
plugstack.conf's include check, is tested module by module in tests/node_package/test_node_files.py).

Real: enroot.sh under bash with the machine's coreutils, and the node tools it calls (this checkout's
clusterkit_node, through CK_ZIPAPP: a file that runs it as the zipapp would). Stand-in: `enroot_config_eval` below
re-implements how enroot reads enroot.conf (NVIDIA/enroot enroot.in config::init: split "KEY value",
`eval echo value` as the calling user) because enroot itself cannot be installed here; it proves our
file evaluates as intended under that documented rule, not that a given enroot release accepts it.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from node_sandbox import SCRIPTS

from clusterkit.spec.model import DEFAULT_SQUASH_OPTIONS

ENROOT_SH = SCRIPTS / "enroot.sh"
NODE_TOOLS = f"""import sys
sys.path.insert(0, {str(SCRIPTS.parent)!r})
from clusterkit_node.__main__ import main
sys.exit(main())
"""


def bash(snippet: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    tools = tmp_path / "node_tools.py"
    tools.write_text(NODE_TOOLS)
    full = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(tmp_path / "home"),
            "CK_LOG_FILE": str(tmp_path / "bootstrap.log"), "CK_ZIPAPP": str(tools), **env}
    return subprocess.run(["/bin/bash", "-c", f"set -euo pipefail; source {ENROOT_SH}; {snippet}"],
                          env=full, capture_output=True, text=True, timeout=30)


def test_plugstack_generator_refuses_required_line_for_absent_plugin(tmp_path: Path) -> None:
    etc = tmp_path / "slurm-etc"
    r = bash(f"ck_parse_args compute CK_CLUSTER=c CK_OS=rhel9; ck_install_plugstack {etc} {tmp_path}/none.so",
             tmp_path)
    assert r.returncode == 1
    assert f"refusing to install a 'required' plugstack line: plugin {tmp_path}/none.so not found" in r.stderr
    assert not etc.exists()


def test_plugstack_generator_writes_and_reports_change(tmp_path: Path) -> None:
    so = tmp_path / "p.so"
    so.write_text("x")
    etc = tmp_path / "etc"
    snippet = (f"ck_parse_args compute CK_CLUSTER=c CK_OS=rhel9 PYXIS_SBATCH_SUPPORT=0; "
               f"ck_install_plugstack {etc} {so}; echo changed=$CK_PLUGSTACK_CHANGED; "
               f"ck_install_plugstack {etc} {so}; echo changed=$CK_PLUGSTACK_CHANGED; "
               f"ck_plugstack_loads {etc} {so} && echo loads")
    r = bash(snippet, tmp_path)
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith(("changed=", "loads"))] == \
        ["changed=yes", "changed=no", "loads"]
    assert f"required {so} runtime_path=/run/pyxis container_scope=job sbatch_support=0" in \
        (etc / "plugstack.conf.d/pyxis.conf").read_text()


def enroot_config_eval(conf: Path, home: Path) -> dict[str, str]:
    """Stand-in for enroot's config::init (see module docstring)."""
    script = r'''
set -euo pipefail
bash -n "$1"
while IFS=$' \t=' read -r key value; do
  [[ "$key" =~ ^ENROOT_[[:upper:]_]+$ ]] || continue
  printf '%s=%s\n' "$key" "$(eval echo "$value")"
done < "$1"
'''
    r = subprocess.run(["/bin/bash", "-c", script, "x", str(conf)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, timeout=30, check=True)
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


def test_enroot_conf_evaluates_per_user(tmp_path: Path) -> None:
    hooks = tmp_path / "root/usr/share/enroot/hooks.d"
    hooks.mkdir(parents=True)
    for hook in ("50-slurm-pmi.sh", "50-slurm-pytorch.sh"):
        (hooks / hook).write_text("# hook\n")
    r = bash("ck_parse_args compute CK_CLUSTER=c CK_OS=rhel9 "
             "'CK_ECR_REGISTRIES=123456789012.dkr.ecr.eu-west-1.amazonaws.com'; "
             "ck_setup_local_enroot", tmp_path, CK_ROOT=str(tmp_path / "root"))
    assert r.returncode == 0, r.stderr
    conf = tmp_path / "root/etc/enroot/enroot.conf"
    home = tmp_path / "home"
    values = enroot_config_eval(conf, home)
    uid = os.getuid()
    assert values["ENROOT_RUNTIME_PATH"] == f"/run/enroot/user-{uid}"
    assert values["ENROOT_DATA_PATH"] == f"/var/tmp/enroot/data/user-{uid}"
    assert values["ENROOT_CACHE_PATH"] == f"/var/tmp/enroot/cache/user-{uid}"
    assert values["ENROOT_CONFIG_PATH"] == f"{home}/.config/enroot"
    assert values["ENROOT_SQUASH_OPTIONS"] == DEFAULT_SQUASH_OPTIONS
    # The system-wide ECR credentials are linked for this user, once, without clobbering.
    link = home / ".config/enroot/.credentials"
    assert os.readlink(link) == "/etc/enroot/credentials"
    link.unlink()
    link.write_text("machine my.registry login me password x\n")
    enroot_config_eval(conf, home)
    assert link.read_text().startswith("machine my.registry")


def test_parse_args_ignores_environment(tmp_path: Path) -> None:
    """Settings come only from Args: an exported ENROOT_SQUASH_OPTIONS must not leak in."""
    r = bash("ck_parse_args compute CK_CLUSTER=c CK_OS=rhel9; echo \"[$ENROOT_SQUASH_OPTIONS] [$CK_STORE]\"",
             tmp_path, ENROOT_SQUASH_OPTIONS="-comp lzo", CK_STORE="/elsewhere")
    # the node's default is the spec's (clusterkit.spec.DEFAULT_SQUASH_OPTIONS), not a copy that drifted
    assert r.stdout.strip().splitlines()[-1] == f"[{DEFAULT_SQUASH_OPTIONS}] [/fsx/containers]"


def test_bad_args_are_one_line_and_exit_2(tmp_path: Path) -> None:
    r = bash("ck_parse_args compute CK_CLUSTER=c CK_OS=rhel9 ENROOT_MOUNT_HOMES=yes; echo not reached", tmp_path)
    assert r.returncode == 2 and "not reached" not in r.stdout
    (line,) = r.stderr.splitlines()
    assert line.endswith("ERROR Args[3] ENROOT_MOUNT_HOMES: unknown key ENROOT_MOUNT_HOMES "
                         "(did you mean ENROOT_MOUNT_HOME?)")


def test_node_tools_missing_is_one_line(tmp_path: Path) -> None:
    r = bash("ck_parse_args compute CK_CLUSTER=c CK_OS=rhel9", tmp_path, CK_ZIPAPP=str(tmp_path / "none.pyz"))
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].endswith(f"the node tools could not check the Args ({tmp_path}/none.pyz exit 2)")
