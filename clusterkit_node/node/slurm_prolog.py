"""``slurm-prolog``: the Slurm prolog that makes the job user's enroot dirs as root before any step runs
(user_dirs.py).

ParallelCluster's slurm.conf runs every file in PROLOG_DIR (cookbook slurm.conf.erb:
``Prolog=/opt/slurm/etc/scripts/prolog.d/*``; config_health_check.rb makes the dir); /opt/slurm is NFS-shared, so
the head node writes it once for every node. The prolog never fails: a failing prolog drains the node.
"""
from __future__ import annotations

import argparse

from clusterkit_node.node.file_set import Changes, ensure_dir, report, write_file

PROLOG_DIR = "/opt/slurm/etc/scripts/prolog.d"
PROLOG_NAME = "10_clusterkit_enroot_user_dirs"
PROLOG = """#!/bin/bash
# Managed by ClusterKit (head_node.sh): makes the job user's enroot dirs (user-<uid>, 0700, theirs) under root's
# 0755 parents before any step of the job runs, and quarantines anything else found there. Never fails: a failing
# prolog drains the node; problems go to /var/log/clusterkit/user-dirs.log and syslog.
set -uo pipefail
PATH=/usr/local/bin:/usr/bin:/bin python3 -I /opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz user-dirs \
--prolog >/dev/null 2>&1 || true
exit 0
"""


def install(ch: Changes) -> None:
    ensure_dir(ch, PROLOG_DIR, "0755")
    write_file(ch, f"{PROLOG_DIR}/{PROLOG_NAME}", "0755", PROLOG.encode())


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    sub.add_parser("slurm-prolog", help="head node: install the Slurm prolog that makes each job user's enroot dirs")


def cmd_slurm_prolog(_a: argparse.Namespace) -> int:
    return report(install)
