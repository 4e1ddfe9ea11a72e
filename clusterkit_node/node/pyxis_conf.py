"""Pyxis' SPANK configuration: the option words of the ``required`` line (filtered for the installed pyxis),
pyxis.conf, the include line of plugstack.conf, and the compute nodes' check of the head node's line.

Why filtered: pyxis refuses options it does not know, and with a ``required`` line that stops slurmd on every
node (measured: real-runtime.md), so an option newer than the installed pyxis is left out, with one log line
saying so. Options newer than pyxis 0.20.0 (the first pyxis on ParallelCluster AMIs) and the release
ClusterKit writes each for (pyxis config.c): importer= (0.21) and use_squashfuse (0.22) are older than 0.24.0,
but starting an importer's file in place (pyxis_slurmstepd.c, pyxis_can_direct_start_squashfs) is what 0.24.0
does and what the tests ran. ``validate`` reads this table too
(``clusterkit.rules.limits.PYXIS_OPTION_SINCE``), so both sides name the same release for each option.

The node scripts run the commands and log the ``LEVEL message`` lines they print (their ck_log adds the
time); the files are written by pyxis_files.py (atomic, idempotent: file_set.py).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
from typing import Dict, List, Optional, Tuple

from clusterkit_node.contract.bundle_files import LIVE_ZIPAPP
from clusterkit_node.image.versions import version_key
from clusterkit_node.node import args as node_args
from clusterkit_node.node import start_path
from clusterkit_node.node.facts import pyxis_plugin_version
from clusterkit_node.node.file_set import Changes, NodeProblem, report
from clusterkit_node.node.preflight import MIN_PC_VERSION

OPTION_SINCE: Dict[str, str] = {"use_enroot_load": "0.21.0", "use_squashfuse": "0.24.0", "importer": "0.24.0"}
# ClusterKit's pyxis importer: the node zipapp of the live bundle, which pyxis runs as `importer get URI` /
# `importer release` (head_node.sh keeps /opt/parallelcluster/shared/clusterkit pointing at the live bundle;
# NFS-shared, so the one plugstack line names a file every node has).
IMPORTER = LIVE_ZIPAPP
FALLBACK = {  # what a node does without the option (for the log line)
    "importer": "; registry images are imported by pyxis itself (enroot import per job)",
    "use_squashfuse": "; every container start extracts its image (enroot create)",
}
Event = Tuple[str, str]  # (INFO|WARN, message)
REQUIRED_LINE = re.compile(r"[ \t\n\v\f\r]*required[ \t\n\v\f\r]")


def root() -> str:
    return os.environ.get("CK_ROOT", "")


def plugin_version(so: str) -> str:
    """The version the plugin reports (the string slurmd logs as "pyxis: version vX"), read from the .so
    itself; empty when it cannot be read."""
    return pyxis_plugin_version(root() + so)[1] or ""


def knows(version: str, option: str) -> bool:
    return bool(version) and version_key(version) >= version_key(OPTION_SINCE[option])


def start_path_check(want: str, os_name: str, single_threaded_ok: str = "0") -> Tuple[str, str, List[Event], bool]:
    """(squashfuse|extract, why extract, the facts lines to log, extract only for a single-threaded reader),
    measured on this node (start_path.py)."""
    try:
        lines = start_path.report(want == "1", os_name or None, single_threaded_ok == "1")
    except Exception as exc:  # noqa: BLE001 (a node fact that cannot be read must not stop the head node)
        return "extract", f"the start-path check failed: {exc}", [], False
    path, why, events, slow = "extract", "", [], False
    for line in lines:
        if line.startswith("path="):
            path = line[len("path="):]
        elif line.startswith(("why extract: ", "slow reader: ")):
            slow = slow or line.startswith("slow reader: ")
            why += ("; " if why else "") + line.split(": ", 1)[1]
        elif line:
            events.append(("INFO", line))
    return path, why, events, slow


def options(values: Dict[str, str], so: str) -> Tuple[str, List[Event]]:
    """The option words for the ``required`` line, keeping only what the installed pyxis knows, and the log
    lines. An option the spec asked for (use_enroot_load) is a WARN when left out; ClusterKit's importer on an
    older pyxis is an INFO. use_squashfuse=1 is written only when this node can start a .sqsh in place;
    otherwise pyxis extracts each image onto node-local disk and one WARN line says what is missing."""
    version = plugin_version(so)
    words = [f"runtime_path=/run/pyxis container_scope={values['PYXIS_CONTAINER_SCOPE']} "
             f"sbatch_support={values['PYXIS_SBATCH_SUPPORT']} execute_entrypoint={values['PYXIS_EXECUTE_ENTRYPOINT']}"]
    events: List[Event] = []
    if version:
        events.append(("INFO", f"pyxis {version} at {so}"))
    else:
        events.append(("WARN", f"cannot read the pyxis version from {so}: writing only the options every pyxis "
                               ">= 0.20 knows"))
    shown = version or "of unknown version"
    wanted = ["use_enroot_load=1"] if values["PYXIS_USE_ENROOT_LOAD"] == "1" else []
    for opt, level in [(o, "WARN") for o in wanted] + [(f"importer={IMPORTER}", "INFO")]:
        name = opt.split("=", 1)[0]
        if knows(version, name):
            words.append(opt)
            continue
        events.append((level, f"pyxis {shown} does not know {name} (ClusterKit writes it for pyxis >= "
                              f"{OPTION_SINCE[name]}): not written, so slurmd still starts{FALLBACK.get(name, '')}"))
    if values["PYXIS_USE_SQUASHFUSE"] != "1":
        events.append(("INFO", "use_squashfuse is off in the spec: pyxis extracts every image (enroot create)"))
    elif not knows(version, "use_squashfuse"):
        events.append(("INFO", f"pyxis {shown} does not know use_squashfuse (ClusterKit writes it for pyxis >= "
                               f"{OPTION_SINCE['use_squashfuse']}): not written{FALLBACK['use_squashfuse']}"))
    else:
        path, why, facts, slow = start_path_check(values["PYXIS_USE_SQUASHFUSE"], values["CK_OS"],
                                                  values.get("PYXIS_SINGLE_THREADED_IN_PLACE", "0"))
        events += facts
        if path == "squashfuse":
            words.append("use_squashfuse=1")
            events.append(("INFO", "containers start in place from the store (use_squashfuse=1): squashfuse, its "
                                   "reader and /dev/fuse checked on this node"))
        elif slow:
            events.append(("INFO", f"containers start by extraction onto node-local disk, not in place: {why}"))
        else:
            events.append(("WARN", f"containers start by extraction onto node-local disk, not in place: {why}"))
    return " ".join(words), events


def render_conf(so: str, words: str) -> str:
    return ("# Managed by ClusterKit head_node.sh (PYXIS_* Args, filtered for the installed pyxis). Installed "
            "atomically from outside this directory (aws-parallelcluster#6459).\n"
            f"required {so} {words}\n")


def plugstack(existing: Optional[str], etc: str) -> str:
    """plugstack.conf with ClusterKit's include line: as it is when it already has the line, a site's own
    lines kept with the line added, else ClusterKit's two lines."""
    include = f"include {etc}/plugstack.conf.d/*"
    if existing is not None:
        if f"\n{include}\n" in f"\n{existing}":
            return existing
        if existing.strip(" \t\n\r\f\v"):
            return existing + ("" if existing.endswith("\n") else "\n") + include + "\n"
    return f"# Managed by ClusterKit head_node.sh: SPANK plugins are configured in plugstack.conf.d/.\n{include}\n"


def line_check(conf_text: str, so: str, etc: str) -> Tuple[str, Optional[str]]:
    """A compute node's check of the head node's ``required`` line: (squashfuse|extract, None) when this node's
    pyxis knows every option and the importer is an executable file here, else (path, one-line error)."""
    version = plugin_version(so)
    path = "extract"
    for line in conf_text.split("\n")[:-1]:  # whole lines only, as the shell's `read` loop took them
        if not REQUIRED_LINE.match(line):
            continue
        words = [w for w in re.split(r"[ \t]+", line) if w]
        for word in words:
            key = word.split("=", 1)[0]
            if key in OPTION_SINCE and not knows(version, key):
                return path, (f"{etc}/plugstack.conf.d/pyxis.conf has {key}, which this node's pyxis "
                              f"{version or 'of unknown version'} does not know (the head node's pyxis does): "
                              "slurmd would not start; use an AMI with the head node's pyxis for this queue")
            if word == "use_squashfuse=1":
                path = "squashfuse"
            target = word[len("importer="):]
            if key == "importer" and not os.access(root() + target, os.X_OK):
                return path, (f"pyxis importer {target} (from pyxis.conf) is not an executable file on this node: "
                              "is /opt/parallelcluster/shared mounted and the head node's bundle live?")
    return path, None


def _lines(path: str) -> List[str]:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read().split("\n")


def loads(etc: str, so: str) -> bool:
    """Does plugstack.conf load ``so``, directly or through an ``include`` glob (files under CK_ROOT)?"""
    space = r"[ \t\n\v\f\r]"  # the shell's [[:space:]], which the check used to match with
    plugin = re.compile(f"{space}*(required|optional){space}+{re.escape(so)}({space}|$)")
    include = re.compile(f"{space}*include{space}+([^ \t\n\v\f\r]+)")
    path = f"{root()}{etc}/plugstack.conf"
    if not os.path.isfile(path):
        return False
    for line in _lines(path):
        if plugin.match(line):
            return True
        found = include.match(line)
        for file in sorted(glob.glob(root() + found.group(1))) if found else []:
            if os.path.isfile(file) and any(plugin.match(inner) for inner in _lines(file)):
                return True
    return False


def check_loaded(ch: Changes, etc: str, so: str) -> None:
    """A compute or login node: the plugin is here and the head node's NFS-shared plugstack.conf loads it."""
    if not os.path.isfile(root() + so):
        raise NodeProblem(f"Pyxis SPANK plugin {so} missing on this node (official ParallelCluster AMIs >= "
                          f"{MIN_PC_VERSION} ship it)")
    if not loads(etc, so):
        raise NodeProblem(f"{etc}/plugstack.conf does not load {so} (the head node's OnNodeConfigured installs it; "
                          "check /var/log/clusterkit/bootstrap.log there)")
    ch.log("INFO", f"plugstack.conf loads {so}")


def check_line_start(ch: Changes, line_path: str, want: str, os_name: str, single_threaded_ok: str = "0") -> None:
    """A compute node: the head node's line (for the whole cluster) says use_squashfuse=1 only when the head node
    could start a .sqsh in place with a multi-threaded reader. A queue whose AMI differs (a custom AMI without
    squashfuse, a /dev/fuse users cannot open) cannot: one line in the node's log, instead of in every job. One whose
    reader is single-threaded can, only slower: a WARN saying so (its jobs still run)."""
    if line_path != "squashfuse":
        ch.log("INFO", "the plugstack line extracts images (no use_squashfuse=1): pyxis runs enroot create per job")
        return
    path, why, events, slow = start_path_check(want, os_name, single_threaded_ok)
    for level, message in events:
        ch.log(level, message)
    if path != "squashfuse" and slow:
        ch.log("WARN", f"the cluster starts images in place (use_squashfuse=1, chosen on the head node), but here "
                       f"{why}")
        return
    if path != "squashfuse":
        raise NodeProblem("the cluster's pyxis.conf starts images in place (use_squashfuse=1, chosen on the head "
                          f"node) but this node cannot: {why} (does this queue use a different AMI than the head "
                          "node? give it squashfuse, or set containers.pyxis.use_squashfuse: false)")
    ch.log("INFO", "this node can start images in place (squashfuse, /dev/fuse for users), as the plugstack line asks")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    c = sub.add_parser("pyxis-line-check", help="compute node: can this node's pyxis take the head node's line? "
                                                "prints path=squashfuse|extract; exit 1 with one line if not")
    c.add_argument("--so", required=True)
    c.add_argument("--etc", required=True)
    ld = sub.add_parser("plugstack-loads", help="compute/login node: the pyxis plugin is here and plugstack.conf "
                                               "loads it (exit 1 with one ERROR line if not)")
    ld.add_argument("--so", required=True)
    ld.add_argument("--etc", required=True)
    st = sub.add_parser("start-path-check", help="compute node: can this node start images the way the plugstack "
                                                 "line says (exit 1 with one ERROR line if not)")
    st.add_argument("--line-path", choices=("squashfuse", "extract"), required=True)
    st.add_argument("--want-squashfuse", choices=("0", "1"), default="1")
    st.add_argument("--single-threaded-in-place", choices=("0", "1"), default="0")
    st.add_argument("--os", default="")


def cmd_start_path_check(a: argparse.Namespace) -> int:
    return report(lambda ch: check_line_start(ch, a.line_path, a.want_squashfuse, a.os, a.single_threaded_in_place))


def cmd_plugstack_loads(a: argparse.Namespace) -> int:
    return report(lambda ch: check_loaded(ch, a.etc, a.so))


def cmd_pyxis_line_check(a: argparse.Namespace) -> int:
    conf = f"{root()}{a.etc}/plugstack.conf.d/pyxis.conf"
    if not os.path.isfile(conf):
        node_args.write("path=extract\n")
        return 0
    with open(conf, encoding="utf-8", errors="surrogateescape") as fh:
        path, problem = line_check(fh.read(), a.so, a.etc)
    if problem is not None:
        node_args.write(f"{problem}\n")
        return 1
    node_args.write(f"path={path}\n")
    return 0
