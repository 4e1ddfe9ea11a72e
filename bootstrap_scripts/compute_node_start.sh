#!/usr/bin/env bash
# ClusterKit compute node, SlurmQueues CustomActions OnNodeStart.
#
# At OnNodeStart only /home and /opt/parallelcluster/shared are mounted: not /opt/slurm, not /fsx, and
# not the instance-store NVMe either (ParallelCluster mounts it at the queue's EphemeralVolume MountDir
# in its config phase, after this script). So this script only checks what must hold before anything
# else: valid Args (recorded in /etc/clusterkit/node.env) and enroot on the AMI. The enroot layout is
# chosen in OnNodeConfigured (compute_node_configured.sh), once /scratch is what it will be. It never
# compiles, never downloads, never touches /opt/slurm or /fsx.
# The shared functions come from the bundle the head node installed (CK_SHARED_DIR overrides the dir).
#
# Args (one KEY=VALUE each): CK_CLUSTER, CK_OS (required); CK_STORE, CK_REGION, CK_ECR_REGISTRIES,
# ENROOT_*, PYXIS_* (optional). CK_BUNDLE is head-node only and rejected here.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
umask 022

CK_ROOT="${CK_ROOT:-}"
CK_SCRIPT_NAME="compute_node_start.sh"
CK_SHARED_DIR="${CK_SHARED_DIR:-${CK_ROOT}/opt/parallelcluster/shared/clusterkit}"

# Minimal logger for the one failure that happens before enroot.sh (and ck_log) is available.
boot_die() {
    local ts line log="${CK_LOG_FILE:-${CK_ROOT}/var/log/clusterkit/bootstrap.log}"
    TZ=UTC0 printf -v ts '%(%Y-%m-%dT%H:%M:%SZ)T' -1
    line="${ts} ${CK_SCRIPT_NAME} ERROR $2"
    printf '%s\n' "${line}" >&2
    mkdir -p "${log%/*}" 2>/dev/null || true
    printf '%s\n' "${line}" >>"${log}" 2>/dev/null || true
    exit "$1"
}

if [[ ! -f "${CK_SHARED_DIR}/enroot.sh" ]]; then
    boot_die 1 "${CK_SHARED_DIR}/enroot.sh not found: the head node's OnNodeConfigured (head_node.sh) installs the ClusterKit bundle there; is /opt/parallelcluster/shared mounted and did the head node bootstrap succeed?"
fi
# shellcheck source=enroot.sh
source "${CK_SHARED_DIR}/enroot.sh"
CK_SCRIPT_NAME="compute_node_start.sh"
trap ck_cleanup EXIT

main() {
    ck_log INFO "start (args: $*)"
    ck_parse_args compute "$@"
    ck_write_node_env
    ck_require_enroot
    ck_log INFO "done: Args valid and enroot present for cluster ${CK_CLUSTER} (${CK_OS}); enroot is configured in OnNodeConfigured"
}

main "$@"
