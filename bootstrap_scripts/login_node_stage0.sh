#!/usr/bin/env bash
# ClusterKit login-node stage 0: LoginNodes Pools[].CustomActions OnNodeStart and OnNodeConfigured. FROZEN: do not edit.
#
# ParallelCluster 3.16.1 never lets a login pool's OnNodeStart or OnNodeConfigured change once the cluster exists
# (pcluster/schemas/cluster_schema.py LoginNodesCustomActionsSchema: update policy UNSUPPORTED), and this file's S3
# key is its content hash: one changed byte would block every update of every cluster with login nodes. So it does
# the least that never needs to change: run login_node.sh of the bundle the head node installed in the NFS-shared
# /opt/parallelcluster/shared/clusterkit (login nodes mount it in ParallelCluster's init phase, before OnNodeStart),
# with its one Arg, the event: start or configured. clusterkit/artifacts/bundle.py pins its sha256.
# ParallelCluster creates the login pools once the head node INSTANCE exists, not once it has bootstrapped, so a login
# node can get here before the head node's OnNodeConfigured installed the bundle: it waits for it (CK_LOGIN_WAIT_S,
# default 300 s, within the pool's 600 s launching lifecycle hook; a node that still fails is replaced by its group).
set -euo pipefail

CK_ROOT="${CK_ROOT:-}"
SHARED="${CK_SHARED_DIR:-${CK_ROOT}/opt/parallelcluster/shared/clusterkit}"
LOG_FILE="${CK_ROOT}/var/log/clusterkit/bootstrap.log"
WAIT_S="${CK_LOGIN_WAIT_S:-300}"

log() {
  mkdir -p "${LOG_FILE%/*}"
  printf '%s login_node_stage0.sh %s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$2" | tee -a "$LOG_FILE" >&2
}

die() {
  log ERROR "$1"
  exit "$2"
}

[[ "$#" -eq 1 && ("$1" == start || "$1" == configured) ]] || die "Args must be one word, start or configured (got: $*)" 2
waited=0
if [[ ! -f "$SHARED/login_node.sh" ]] && ((WAIT_S > 0)); then
  log INFO "waiting up to ${WAIT_S} s for the head node to install the ClusterKit bundle in $SHARED"
  while [[ ! -f "$SHARED/login_node.sh" ]] && ((waited < WAIT_S)); do
    sleep 5
    waited=$((waited + 5))
  done
fi
[[ -f "$SHARED/login_node.sh" ]] || die "$SHARED/login_node.sh not found: the head node's OnNodeConfigured installs the ClusterKit bundle there; is /opt/parallelcluster/shared mounted and did the head node bootstrap succeed? (waited ${waited} s)" 1
exec bash "$SHARED/login_node.sh" "$1"
