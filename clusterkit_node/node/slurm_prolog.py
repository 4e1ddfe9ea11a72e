"""``slurm-prolog``: the Slurm scripts ClusterKit installs on the head node: the prolog that makes the job user's
enroot dirs as root before any step runs (user_dirs.py), the quick health check before every job and the
HealthCheckProgram Slurm runs on idle nodes (fleet/health.py; the rendered CustomSlurmSettings name it).

ParallelCluster's slurm.conf runs every file in PROLOG_DIR (cookbook slurm.conf.erb:
``Prolog=/opt/slurm/etc/scripts/prolog.d/*``; config_health_check.rb makes the dir); /opt/slurm is NFS-shared, so
the head node writes it once for every node. The prolog never fails: a failing prolog drains the node.
"""
from __future__ import annotations

import argparse

from clusterkit_node.contract.bundle_files import LIVE_ZIPAPP
from clusterkit_node.contract.health_plan import HEALTH_PROGRAM, SCRIPTS_DIR
from clusterkit_node.contract.health_plan import PROLOG_NAME as HEALTH_PROLOG_NAME
from clusterkit_node.node.file_set import Changes, ensure_dir, report, write_file

PROLOG_DIR = f"{SCRIPTS_DIR}/prolog.d"
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
# The quick check before every job. Exit 1 only when the node failed it: the check drained the node with its reason
# first (Slurm's "Prolog error" does not replace a reason already set), and Slurm requeues the job on other nodes
# without holding it (ParallelCluster's slurm.conf: SchedulerParameters=nohold_on_prolog_fail). Anything else
# (ClusterKit's own fault, a missing plan) exits 0: a ClusterKit bug must not drain the fleet.
HEALTH_PROLOG = f"""#!/bin/bash
# Managed by ClusterKit (head_node.sh): the quick node health check before every job (clusterkit_node.pyz health).
set -uo pipefail
exec >>/var/log/clusterkit/health.log 2>&1 || exec >/dev/null 2>&1
rc=0
PATH=/usr/local/bin:/usr/bin:/bin:/opt/slurm/bin python3 -I {LIVE_ZIPAPP} health check --tier quick --source prolog \
|| rc=$?
if [[ "${{rc}}" -eq 1 ]]; then exit 1; fi
exit 0
"""
# Slurm's HealthCheckProgram (idle nodes, every HealthCheckInterval, and once when slurmd starts): Slurm ignores
# its exit status; the check drains the node itself.
HEALTH_IDLE = f"""#!/bin/bash
# Managed by ClusterKit (head_node.sh): Slurm's HealthCheckProgram: the quick node health check on idle nodes.
set -uo pipefail
exec >>/var/log/clusterkit/health.log 2>&1 || exec >/dev/null 2>&1
PATH=/usr/local/bin:/usr/bin:/bin:/opt/slurm/bin python3 -I {LIVE_ZIPAPP} health check --tier quick --source idle \
|| true
exit 0
"""


def install(ch: Changes) -> None:
    ensure_dir(ch, PROLOG_DIR, "0755")
    write_file(ch, f"{PROLOG_DIR}/{PROLOG_NAME}", "0755", PROLOG.encode())
    write_file(ch, f"{PROLOG_DIR}/{HEALTH_PROLOG_NAME}", "0755", HEALTH_PROLOG.encode())
    write_file(ch, HEALTH_PROGRAM, "0755", HEALTH_IDLE.encode())


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    sub.add_parser("slurm-prolog", help="head node: install the Slurm prolog that makes each job user's enroot dirs")


def cmd_slurm_prolog(_a: argparse.Namespace) -> int:
    return report(install)
