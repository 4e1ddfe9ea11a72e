#!/usr/bin/env bash
# ClusterKit login-node stage 0: LoginNodes Pools[].CustomActions OnNodeStart and OnNodeConfigured. FROZEN: do not edit.
#
# ParallelCluster 3.16.1 never lets a login pool's OnNodeStart or OnNodeConfigured change once the cluster exists
# (pcluster/schemas/cluster_schema.py LoginNodesCustomActionsSchema: update policy UNSUPPORTED), and this file's S3
# key is its content hash: one changed byte would block every update of every cluster with login nodes. So it does
# the least that never needs to change: run login_node.sh of the bundle the head node installed in the NFS-shared
# /opt/parallelcluster/shared/clusterkit (login nodes mount it in ParallelCluster's init phase, before OnNodeStart),
# with its one Arg, the event: start or configured. clusterkit/artifacts/bundle.py pins its sha256.
set -euo pipefail

CK_ROOT="${CK_ROOT:-}"
SHARED="${CK_SHARED_DIR:-${CK_ROOT}/opt/parallelcluster/shared/clusterkit}"
LOG_FILE="${CK_ROOT}/var/log/clusterkit/bootstrap.log"

die() {
  mkdir -p "${LOG_FILE%/*}"
  printf '%s login_node_stage0.sh ERROR %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" | tee -a "$LOG_FILE" >&2
  exit "$2"
}

[[ "$#" -eq 1 && ("$1" == start || "$1" == configured) ]] || die "Args must be one word, start or configured (got: $*)" 2
[[ -f "$SHARED/login_node.sh" ]] || die "$SHARED/login_node.sh not found: the head node's OnNodeConfigured installs the ClusterKit bundle there; is /opt/parallelcluster/shared mounted and did the head node bootstrap succeed?" 1
exec bash "$SHARED/login_node.sh" "$1"
