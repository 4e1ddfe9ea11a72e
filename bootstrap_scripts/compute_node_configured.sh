#!/usr/bin/env bash
# ClusterKit compute node, SlurmQueues CustomActions OnNodeConfigured.
#
# /opt/slurm, /fsx and the instance-store NVMe (at the queue's EphemeralVolume MountDir, /scratch) are
# mounted now. First it sets up node-local enroot: working dirs on that NVMe when it is there, else on the
# root volume, enroot.conf, enroot's Slurm hooks, ECR credentials, the Ubuntu 24.04 sysctl and slurmd's
# PATH drop-in (slurmd starts after this script, in ParallelCluster's finalize phase). Then it CHECKS
# (a non-zero exit makes PC replace the node rather than let it run jobs that would fail):
#  - the pyxis plugin is on this node and the shared plugstack.conf loads it;
#  - the plugstack line's start path (use_squashfuse=1 or extraction, chosen on the head node) is one
#    this node can run (clusterkit_node.pyz start-path: squashfuse, /dev/fuse for users, pyxis version);
#  - on GPU queues (CK_GPU=1), nvidia-container-cli is there: the AMI's, or NVIDIA's packages from the store,
#    checked by sha256 (clusterkit_node.pyz gpu-runtime; the head node fetched them);
#  - a real container starts: clusterkit_node.pyz selftest builds a tiny image with this node's mksquashfs
#    and starts it as an unprivileged user through the node's own enroot.conf, by that same path (on GPU queues an
#    image that asks for GPUs as CUDA images do, checked inside for the devices, libcuda and the driver);
#  - the image store on FSx is reachable (clusterkit_node.pyz verify; it never imports);
#  - this node's NVIDIA driver can run the CUDA of every locked image (compat_rules.json), and
#    records the node's software fingerprint next to the store (/fsx/containers ->
#    /fsx/.containers.clusterkit/nodes/<hostname>.json, outside what FSx exports to S3) for
#    `clusterkit_node.pyz drift` on the head node (clusterkit_node.pyz fingerprint);
#  - the boot tier of the node health loop: the quick checks (the driver answers with the GPU count and model of the
#    instance type, no uncorrected ECC errors or fatal Xid, the EFA devices, the store answers) per the bundle's
#    health plan; a failure drains the node with a reason and fails the boot (clusterkit_node.pyz health check;
#    docs/operations.md "Node health");
#  - with CK_GPU_HEALTH=boot (the GPU queues whose deep check would outlast a job start: clusterkit/effective/
#    gpu_check_place.py), DCGM's level-2 diagnostic within CK_GPU_HEALTH_BUDGET seconds; a failure drains the node
#    with a reason (`sinfo -R`) and fails the boot (clusterkit_node.pyz gpu-health; docs/troubleshooting.md "GPU health checks and the job start").
# Its only write outside the node is that fingerprint file; it never compiles and never downloads (GPU nodes install
# packages the head node downloaded).
# Missing images and a store the head node has not synced yet are warnings, not failures.
#
# Args: same keys as compute_node_start.sh. With CK_NODE_ROLE=login (login_node.sh) it sets up a login node instead:
# login_node_main below.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
umask 022

CK_SCRIPT_NAME="compute_node_configured.sh"
CK_SHARED_DIR="${CK_SHARED_DIR:-${CK_ROOT:-}/opt/parallelcluster/shared/clusterkit}"
# The one failure before enroot.sh (and ck_log) is there, in ck_log's line format, on stderr and in the log.
if [[ ! -f "${CK_SHARED_DIR}/enroot.sh" ]]; then
    TZ=UTC0 printf -v CK_BOOT_LINE '%(%Y-%m-%dT%H:%M:%SZ)T compute_node_configured.sh ERROR %s' -1 "${CK_SHARED_DIR}/enroot.sh not found: the head node's OnNodeConfigured (head_node.sh) installs the ClusterKit bundle there; is /opt/parallelcluster/shared mounted and did the head node bootstrap succeed?"
    printf '%s\n' "${CK_BOOT_LINE}" >&2
    CK_LOG_FILE="${CK_LOG_FILE:-${CK_ROOT:-}/var/log/clusterkit/bootstrap.log}"
    mkdir -p "${CK_LOG_FILE%/*}" 2>/dev/null && printf '%s\n' "${CK_BOOT_LINE}" >>"${CK_LOG_FILE}" 2>/dev/null || true
    exit 1
fi
# shellcheck source=enroot.sh
source "${CK_SHARED_DIR}/enroot.sh"

# check_pyxis: the plugin is on this node and the shared plugstack.conf loads it (clusterkit_node/node/pyxis_conf.py),
# then check_pyxis_options.
check_pyxis() {
    ck_plugstack_loads "${CK_SLURM_ETC}" "${CK_PYXIS_SO}"
    check_pyxis_options
}

# check_pyxis_options: the plugstack line is the head node's (written for ITS pyxis, NFS-shared); a compute
# AMI whose pyxis is older would refuse an option and slurmd would not start, so say it here, plainly
# (clusterkit_node/node/pyxis_conf.py line_check). Sets LINE_START_PATH from the line (use_squashfuse=1 or not).
LINE_START_PATH=extract
check_pyxis_options() {
    local out rc=0
    out="$(ck_node_tool pyxis-line-check --so "${CK_PYXIS_SO}" --etc "${CK_SLURM_ETC}")" || rc=$?
    if ((rc != 0)); then
        ck_die 1 "${out:-cannot check ${CK_SLURM_ETC}/plugstack.conf.d/pyxis.conf (${CK_ZIPAPP} exit ${rc})}"
    fi
    LINE_START_PATH="${out#path=}"
}

# check_start_path: a line that starts images in place (use_squashfuse=1) needs this node to be able to
# (pyxis_conf.py check_line_start: a queue on another AMI may lack squashfuse or a /dev/fuse users can open).
check_start_path() {
    ck_node_apply start-path-check --line-path "${LINE_START_PATH}" --want-squashfuse "${PYXIS_USE_SQUASHFUSE}" \
        --single-threaded-in-place "${PYXIS_SINGLE_THREADED_IN_PLACE}" --os "${CK_OS}"
}

# install_gpu_runtime: a GPU queue's node (CK_GPU=1) needs nvidia-container-cli for every CUDA image: keep the
# AMI's, or install the verified packages the head node fetched into the store (clusterkit_node/node/gpu_runtime.py).
install_gpu_runtime() {
    [[ "${CK_GPU}" == 1 ]] || return 0
    ck_node_apply gpu-runtime --store "${CK_ROOT}${CK_STORE}" --os "${CK_OS}" --version "${CK_NVIDIA_CLI}"
}

# run_selftest: start a tiny container as an unprivileged user, by the path pyxis will take (clusterkit_node
# selftest.py); on GPU nodes an image that asks for GPUs as CUDA images do, checked inside. A node that cannot start
# containers fails its boot here, and ParallelCluster replaces it (docs/troubleshooting.md: why failing beats
# draining): it never looks healthy while every job fails.
run_selftest() {
    local out line rc=0 gpu=()
    if [[ "${CK_GPU}" == 1 ]]; then gpu=(--gpu); fi
    out="$(python3 "${CK_SHARED_DIR}/clusterkit_node.pyz" selftest --path "${LINE_START_PATH}" "${gpu[@]}" \
        --want-squashfuse "${PYXIS_USE_SQUASHFUSE}" --single-threaded-in-place "${PYXIS_SINGLE_THREADED_IN_PLACE}" \
        --squash-options "${ENROOT_SQUASH_OPTIONS}" 2>&1)" || rc=$?
    while IFS= read -r line; do
        [[ -n "${line}" ]] && ck_log INFO "${line}"
    done <<<"${out}"
    if ((rc != 0)); then
        ck_die 1 "container self-test failed (exit ${rc}): $(grep -m 1 ' error: ' <<<"${out}" || printf '%s' "${out//$'\n'/ | }")"
    fi
}

check_store() {
    local out line
    if ! out="$(python3 "${CK_SHARED_DIR}/clusterkit_node.pyz" verify --store "${CK_ROOT}${CK_STORE}" --lock "${CK_SHARED_DIR}/images.lock" 2>&1)"; then
        ck_die 1 "image store ${CK_STORE} not usable from this node: ${out//$'\n'/ | }"
    fi
    while IFS= read -r line; do
        [[ -n "${line}" ]] && ck_log INFO "${line}"
    done <<<"${out}"
}

# record_fingerprint: fails the node (PC replaces it) when its driver cannot run a locked image's CUDA:
# better a replaced node at boot than a crashed job hours later.
record_fingerprint() {
    local out line level rc=0 errors=""
    out="$(python3 "${CK_SHARED_DIR}/clusterkit_node.pyz" fingerprint --store "${CK_ROOT}${CK_STORE}" --lock "${CK_SHARED_DIR}/images.lock" --cluster "${CK_CLUSTER}" 2>&1)" || rc=$?
    while IFS= read -r line; do
        [[ -n "${line}" ]] || continue
        level=INFO
        [[ "${line}" == *" warning: "* ]] && level=WARN
        ck_log "${level}" "${line}"
        if [[ "${line}" == *" error: "* ]]; then
            errors+="${errors:+ | }${line#* error: }"
        fi
    done <<<"${out}"
    if ((rc != 0)); then
        ck_die 1 "node fingerprint check failed (exit ${rc}): ${errors:-${out//$'\n'/ | }}"
    fi
}

# run_boot_health: the health loop's boot tier, after the self-test and before slurmd starts (fleet/health.py). A
# failure has drained the node with its reason (`sinfo -R`) and fails the boot: ParallelCluster replaces the node.
run_boot_health() {
    local out line rc=0
    out="$(python3 "${CK_SHARED_DIR}/clusterkit_node.pyz" health check --tier boot --source boot \
        --store "${CK_ROOT}${CK_STORE}" 2>&1)" || rc=$?
    while IFS= read -r line; do
        [[ -n "${line}" ]] && ck_log INFO "${line}"
    done <<<"${out}"
    if ((rc != 0)); then
        ck_die 1 "node health check failed at boot (exit ${rc}): $(grep -m 1 ' failed: ' <<<"${out}" || printf '%s' "${out//$'\n'/ | }")"
    fi
}

# run_gpu_health: the deep GPU check, here where no job waits on it (slurmd starts after this script). DCGM's host
# engine is started for it when it is not running, and stopped again after a pass (as PC's gpu_health_check.sh does).
run_gpu_health() {
    [[ "${CK_GPU_HEALTH}" == boot ]] || return 0
    local started=no
    if ! systemctl is-active --quiet nvidia-dcgm; then
        if systemctl start nvidia-dcgm; then
            started=yes
        else
            ck_log WARN "could not start nvidia-dcgm; dcgmi diag will say whether it can run"
        fi
    fi
    ck_node_apply gpu-health --node "$(hostname -s)" --budget "${CK_GPU_HEALTH_BUDGET}" \
        --scontrol "$(ck_slurm_cmd scontrol)"
    if [[ "${started}" == yes ]]; then
        systemctl stop nvidia-dcgm || ck_log WARN "could not stop nvidia-dcgm after the GPU check"
    fi
}

# login_node_main: a login node (CK_NODE_ROLE=login, from login_node.sh) runs no job, so no slurmd drop-in, self-test
# or driver fingerprint. What `srun/sbatch --container-image` from it needs is checked: srun and sbatch load the
# NFS-shared plugstack line here (pyxis parses --container-* in srun and sbatch), so the plugin must be on this node
# and take the line's options, or every srun from here fails. The containers themselves start on compute nodes.
login_node_main() {
    ck_setup_local_enroot
    ck_systemd_reload_if_dirty
    check_pyxis
    check_store
    ck_log INFO "done: login node ready: srun and sbatch --container-image load pyxis here"
}

main() {
    ck_compute_prologue "$@"
    if [[ "${CK_NODE_ROLE}" == login ]]; then
        login_node_main
        return 0
    fi
    ck_setup_local_enroot slurmd
    ck_systemd_reload_if_dirty
    check_pyxis
    check_start_path
    install_gpu_runtime
    run_selftest
    check_store
    record_fingerprint
    run_boot_health
    run_gpu_health
    ck_log INFO "done: node ready for container jobs"
}

main "$@"
