"""What one sync run uses: its options and the enroot settings it resolves the way enroot would.

enroot reads its settings from the environment first, then /etc/enroot/enroot.conf, then its built-in
defaults; the disk preflight and the manifest must see the same values enroot will use, so they are
resolved here in that order (with enroot.conf's shell-style ``${VAR:-default}`` expansion:
contract/enroot_conf_syntax.py).
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Dict

from clusterkit_node.contract.enroot_conf_syntax import expand_shell_vars, parse_enroot_conf

# enroot reads /etc/enroot/enroot.conf; environment variables take precedence over it (enroot docs,
# doc/configuration.md). CK_ENROOT_CONF points elsewhere (tests; unusual installs).
ENROOT_CONF_DEFAULT = "/etc/enroot/enroot.conf"
# enroot's built-in default (conf/enroot.conf.in; recent releases append -exit-on-error). Only recorded
# in the manifest when neither the environment nor enroot.conf sets ENROOT_SQUASH_OPTIONS.
DEFAULT_SQUASH_OPTIONS = "-comp lzo -noD"
# Seconds between the progress lines of a running import (``sync --heartbeat``; progress.py).
DEFAULT_HEARTBEAT = 30.0


def enroot_conf(env: Dict[str, str]) -> Dict[str, str]:
    """KEY value pairs of enroot.conf; {} if there is none."""
    path = env.get("CK_ENROOT_CONF", ENROOT_CONF_DEFAULT)
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_enroot_conf(fh.read())
    except OSError:
        return {}


def enroot_setting(key: str, env: Dict[str, str]) -> str:
    """What enroot will use for KEY: environment, then enroot.conf, then enroot's own default."""
    home = env.get("HOME", "/root")
    defaults = {
        "ENROOT_TEMP_PATH": "${TMPDIR:-/tmp}",
        "ENROOT_CACHE_PATH": "${XDG_CACHE_HOME:-" + home + "/.cache}/enroot",
        "ENROOT_SQUASH_OPTIONS": DEFAULT_SQUASH_OPTIONS,
    }
    if env.get(key):
        return env[key]
    value = enroot_conf(env).get(key) or defaults.get(key, "")
    return expand_shell_vars(value, env)


@dataclass
class SyncConfig:
    store: str
    retries: int
    backoff: float
    verify_all: bool
    env: Dict[str, str]
    squash_options: str = ""
    enroot_version: str = ""
    heartbeat: float = DEFAULT_HEARTBEAT


def enroot_version(env: Dict[str, str]) -> str:
    try:
        proc = subprocess.run(["enroot", "version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return proc.stdout.decode("utf-8", "replace").strip() or f"unknown (exit {proc.returncode})"
