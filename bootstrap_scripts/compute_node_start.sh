#!/usr/bin/env bash
# ClusterKit compute node, SlurmQueues CustomActions OnNodeStart.
#
# At OnNodeStart only /home and /opt/parallelcluster/shared are mounted: not /opt/slurm, not /fsx, and
# not the instance-store NVMe either (ParallelCluster mounts it at the queue's EphemeralVolume MountDir
# in its config phase, after this script). So this script only checks what must hold before anything
# else: valid Args (recorded in /etc/clusterkit/node.env), instance metadata for root only (security.compute_imds,
# before PC's config phase starts slurmd) and enroot on the AMI. The enroot layout is
# chosen in OnNodeConfigured (compute_node_configured.sh), once /scratch is what it will be. It never
# compiles, never downloads, never touches /opt/slurm or /fsx.
# The shared functions, the prologue included (ck_compute_prologue), come from the bundle the head node
# installed (enroot.sh; CK_SHARED_DIR overrides the dir).
#
# Args (one KEY=VALUE each): CK_CLUSTER, CK_OS (required); CK_STORE, CK_REGION, CK_ECR_REGISTRIES,
# ENROOT_*, PYXIS_*, CK_NODE_ROLE (optional). CK_BUNDLE is head-node only and rejected here. Login nodes run this
# script too (login_node.sh, with CK_NODE_ROLE=login and the bundle's node.args).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
umask 022

CK_SCRIPT_NAME="compute_node_start.sh"
CK_SHARED_DIR="${CK_SHARED_DIR:-${CK_ROOT:-}/opt/parallelcluster/shared/clusterkit}"
# The one failure before enroot.sh (and ck_log) is there, in ck_log's line format, on stderr and in the log.
if [[ ! -f "${CK_SHARED_DIR}/enroot.sh" ]]; then
    TZ=UTC0 printf -v CK_BOOT_LINE '%(%Y-%m-%dT%H:%M:%SZ)T compute_node_start.sh ERROR %s' -1 "${CK_SHARED_DIR}/enroot.sh not found: the head node's OnNodeConfigured (head_node.sh) installs the ClusterKit bundle there; is /opt/parallelcluster/shared mounted and did the head node bootstrap succeed?"
    printf '%s\n' "${CK_BOOT_LINE}" >&2
    CK_LOG_FILE="${CK_LOG_FILE:-${CK_ROOT:-}/var/log/clusterkit/bootstrap.log}"
    mkdir -p "${CK_LOG_FILE%/*}" 2>/dev/null && printf '%s\n' "${CK_BOOT_LINE}" >>"${CK_LOG_FILE}" 2>/dev/null || true
    exit 1
fi
# shellcheck source=enroot.sh
source "${CK_SHARED_DIR}/enroot.sh"

main() {
    ck_compute_prologue "$@"
    ck_lock_imds
    ck_require_enroot
    ck_log INFO "done: Args valid and enroot present for cluster ${CK_CLUSTER} (${CK_OS}); enroot is configured in OnNodeConfigured"
}

main "$@"
