#!/usr/bin/env bash
# ClusterKit head node: HeadNode CustomActions OnNodeConfigured AND OnNodeUpdated (same script, same Args, idempotent).
# Args (one KEY=VALUE each; keys, values, defaults: clusterkit_node/contract/settings.py): CK_CLUSTER, CK_OS,
# CK_BUNDLE, CK_REGION required. Bash keeps the order of the steps and what must be bash (the bundle, which brings the
# node tools, systemctl, mounts); the node tools (clusterkit_node.pyz, through enroot.sh) parse, check and render:
#  1. download, unpack and check the bundle (enroot.sh and the node tools are in it: a minimal logger until then);
#  2. the Args checked into /etc/clusterkit/node.env; enroot + pyxis must come with the AMI (PC >= 3.11.1);
#  3. switch the NFS-shared /opt/parallelcluster/shared/clusterkit to the bundle (one rename; back if the run fails);
#  4. local enroot setup, pyxis in /opt/slurm/etc's plugstack (`scontrol reconfigure` when it changed);
#  5. the image store on FSx, its systemd units (clusterkit_node/node/systemd_units.py says what each does).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
umask 022

CK_ROOT="${CK_ROOT:-}"
CK_SCRIPT_NAME="head_node.sh"
readonly SHARED_BASE="${CK_ROOT}/opt/parallelcluster/shared"
readonly BUNDLE_LINK="${SHARED_BASE}/clusterkit"
# What the bundle must hold besides head_node.sh and the launcher: the node tools (one zipapp), the files they
# read next to it, and what compute nodes source or run from the shared directory.
readonly BUNDLE_FILES=(enroot.sh clusterkit_node.pyz compat_rules.json node_profiles.json images.lock compute.args
    compute_node_start.sh compute_node_configured.sh login_node.sh health_plan.json)
readonly SYNC_UNIT="clusterkit-image-sync.service"
readonly SYNC_TIMER="clusterkit-image-sync.timer"
readonly SYNC_LOG="/var/log/clusterkit/image-sync.log"
readonly HEARTBEAT_TIMER="clusterkit-store-heartbeat.timer"
readonly HEALTH_TIMER="clusterkit-health-schedule.timer"
readonly GC_UNIT="clusterkit-store-gc.service"
readonly GC_TIMER="clusterkit-store-gc.timer"
readonly SYNC_INPUTS_FILE="/var/lib/clusterkit/image-sync.inputs"
CK_SYNC_RESTART=no
CK_SYNC_INPUTS=""
BOOT_TMP=""
BUNDLE_DIR=""
SWITCHED_FROM=""  # the bundle the shared link named before this run switched it, until the run succeeds

# --- minimal logger until enroot.sh is sourced (same line format as ck_log) ---------------------------
boot_log() {
    local ts line log="${CK_LOG_FILE:-${CK_ROOT}/var/log/clusterkit/bootstrap.log}"
    TZ=UTC0 printf -v ts '%(%Y-%m-%dT%H:%M:%SZ)T' -1
    line="${ts} ${CK_SCRIPT_NAME} $1 $2"
    if [[ "$1" == ERROR ]]; then printf '%s\n' "${line}" >&2; else printf '%s\n' "${line}"; fi
    [[ -d "${log%/*}" ]] || mkdir -p "${log%/*}" 2>/dev/null || true
    printf '%s\n' "${line}" >>"${log}" 2>/dev/null || true
}

boot_die() {
    boot_log ERROR "$2"
    exit "$1"
}

on_exit() {
    local rc=$?
    if ((rc != 0)) && [[ -n "${SWITCHED_FROM}" ]]; then restore_link; fi
    if [[ -n "${BOOT_TMP}" && -e "${BOOT_TMP}" ]]; then rm -rf -- "${BOOT_TMP}"; fi
}
trap on_exit EXIT

# restore_link: a run that fails after switching the shared link points it back (one rename) at the bundle it
# replaced. When OnNodeUpdated fails, ParallelCluster rolls its stack back without re-running OnNodeUpdated
# (its custom action runner acts only while the stack is UPDATE_IN_PROGRESS), so nothing else would.
restore_link() {
    local tmp_link="${SHARED_BASE}/.clusterkit-link.$$"
    [[ -d "${SHARED_BASE}/${SWITCHED_FROM}" ]] || return 0
    ln -sfn -- "${SWITCHED_FROM}" "${tmp_link}" && mv -f -T -- "${tmp_link}" "${BUNDLE_LINK}" &&
        boot_log WARN "failed after switching bundles: ${BUNDLE_LINK#"${CK_ROOT}"} points at ${SWITCHED_FROM} again"
}

# fetch_bundle ARG...: download CK_BUNDLE and unpack it into a content-addressed directory next to
# the live link (same file system, so the later switch is a rename). Sets BUNDLE_DIR.
fetch_bundle() {
    local arg bundle region digest version_dir f
    local -a missing=()
    for arg in "$@"; do # the first of each (ck_parse_args checks every Arg once the node tools are here)
        case "${arg}" in
        CK_BUNDLE=*) [[ -v bundle ]] || bundle="${arg#*=}" ;;
        CK_REGION=*) [[ -v region ]] || region="${arg#*=}" ;;
        esac
    done
    [[ -v bundle ]] ||
        boot_die 2 "Args: missing required key CK_BUNDLE (add 'CK_BUNDLE=s3://<bucket>/<sha256>.zip' to the CustomActions Args)"
    [[ -v region ]] ||
        boot_die 2 "Args: missing required key CK_REGION (add 'CK_REGION=<an AWS region such as us-east-1>' to the CustomActions Args)"
    [[ "${bundle}" =~ ^s3://[a-z0-9][a-z0-9.-]+/[A-Za-z0-9._/-]+\.zip$ ]] ||
        boot_die 2 "Args: CK_BUNDLE=${bundle}: invalid value (expected s3://<bucket>/<sha256>.zip)"
    [[ "${region}" =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+$ ]] ||
        boot_die 2 "Args: CK_REGION=${region}: invalid value (expected an AWS region such as us-east-1)"

    mkdir -p "${SHARED_BASE}"
    BOOT_TMP="$(mktemp -d "${SHARED_BASE}/.clusterkit-tmp.XXXXXX")"
    boot_log INFO "downloading ${bundle}"
    aws s3 cp --only-show-errors --region "${region}" "${bundle}" "${BOOT_TMP}/bundle.zip" >&2 ||
        boot_die 1 "cannot download CK_BUNDLE=${bundle} (the head node instance role needs s3:GetObject on it)"
    read -r digest _ < <(sha256sum "${BOOT_TMP}/bundle.zip")
    version_dir="${SHARED_BASE}/.clusterkit-${digest:0:16}"
    if [[ -d "${version_dir}" ]]; then
        boot_log INFO "bundle ${digest:0:16} already unpacked"
    else
        python3 -m zipfile -e "${BOOT_TMP}/bundle.zip" "${BOOT_TMP}/unpacked" ||
            boot_die 1 "cannot unpack ${bundle} (not a zip file?)"
        for f in "${BUNDLE_FILES[@]}"; do
            [[ -f "${BOOT_TMP}/unpacked/${f}" ]] || missing+=("${f}")
        done
        ((${#missing[@]} == 0)) ||
            boot_die 1 "bundle ${bundle} lacks ${missing[*]} at its root (rebuild it with the CDK app)"
        # zip extraction drops modes; pyxis execs the zipapp directly (its importer), as the job's user, and
        # a plugstack line of a previous bundle names pyxis_importer.py (a shim to it) until this run rewrites it
        for f in clusterkit_node.pyz pyxis_importer.py; do
            if [[ -f "${BOOT_TMP}/unpacked/${f}" ]]; then chmod 0755 "${BOOT_TMP}/unpacked/${f}"; fi
        done
        chmod -R u=rwX,go=rX "${BOOT_TMP}/unpacked"
        mv -T "${BOOT_TMP}/unpacked" "${version_dir}"
        boot_log INFO "unpacked bundle ${digest:0:16} into ${version_dir#"${CK_ROOT}"}"
    fi
    rm -rf -- "${BOOT_TMP}"
    BOOT_TMP=""
    BUNDLE_DIR="${version_dir}"
}

# activate_bundle VERSION_DIR: point the shared link at VERSION_DIR with one rename (readers see the
# old or the new bundle, never a mix), then drop bundles older than the previous one (compute nodes
# booting right now may still be reading it) and download dirs a killed run left behind.
activate_bundle() {
    local version_dir="$1" target current="" tmp_link d
    target="${version_dir##*/}"
    if [[ -L "${BUNDLE_LINK}" ]]; then
        current="$(readlink -- "${BUNDLE_LINK}")"
    elif [[ -e "${BUNDLE_LINK}" ]]; then
        mv -T -- "${BUNDLE_LINK}" "${SHARED_BASE}/.clusterkit-legacy-$$"
        ck_log WARN "moved a non-ClusterKit ${BUNDLE_LINK#"${CK_ROOT}"} aside to .clusterkit-legacy-$$"
    fi
    if [[ "${current}" == "${target}" ]]; then
        ck_log INFO "bundle ${target#.clusterkit-} is live"
    else
        tmp_link="${SHARED_BASE}/.clusterkit-link.$$"
        ln -sfn -- "${target}" "${tmp_link}"
        mv -f -T -- "${tmp_link}" "${BUNDLE_LINK}"
        SWITCHED_FROM="${current}"
        ck_log INFO "switched ${BUNDLE_LINK#"${CK_ROOT}"} to ${target} (was: ${current:-none})"
    fi
    for d in "${SHARED_BASE}"/.clusterkit-*; do
        [[ -d "${d}" && ! -L "${d}" ]] || continue
        case "${d##*/}" in "${target}" | "${current}" | .clusterkit-legacy-*) continue ;; esac
        rm -rf -- "${d}"
        ck_log INFO "removed ${d##*/} (older bundle or leftover download dir)"
    done
}

# ensure_store: the image store must be on the FSx mount (mounted before OnNodeConfigured), never on the root
# volume where large imports would fill the disk. The image sync makes the rest (clusterkit_node/contract/layout.py).
ensure_store() {
    local p="${CK_STORE}"
    while [[ -n "${p}" ]]; do
        if mountpoint -q "${CK_ROOT}${p}"; then
            ck_ensure_dir "${CK_ROOT}${CK_STORE}" 0755
            ck_log INFO "image store ${CK_STORE} on mount ${p}"
            return 0
        fi
        p="${p%/*}"
    done
    ck_die 1 "CK_STORE=${CK_STORE} is not on a mounted file system (FSx for Lustre not mounted? check SharedStorage MountDir)"
}

# store_units: the image store's systemd units (clusterkit_node/node/systemd_units.py: the image sync, the store
# heartbeat, the gc while CK_STORE_GC_TIMER=1), written by the node tools; sets CK_SYNC_RESTART and CK_SYNC_INPUTS.
# A gc timer turned off is disabled here first: systemctl needs its files to disable it.
store_units() {
    local dir="${CK_ROOT}/etc/systemd/system"
    if [[ "${CK_STORE_GC_TIMER}" != 1 ]] && [[ -e "${dir}/${GC_TIMER}" || -e "${dir}/${GC_UNIT}" ]]; then
        systemctl disable --quiet --now "${GC_TIMER}" || true
    fi
    ck_node_setup store-units --inputs-file "${SYNC_INPUTS_FILE}"
}

# start_store_units: the sync is restarted only when its inputs (unit, image lock) changed, so an import in progress
# survives an unrelated update; one not running (finished, failed, first boot) is started (a no-op when all is there).
start_store_units() {
    ck_systemd_reload_if_dirty
    systemctl enable --quiet "${SYNC_UNIT}"
    systemctl enable --quiet --now "${SYNC_TIMER}"
    if [[ "${CK_SYNC_RESTART}" == yes ]]; then
        systemctl restart --no-block "${SYNC_UNIT}"
        ck_log INFO "(re)started ${SYNC_UNIT}: its unit or image lock changed (journalctl -u ${SYNC_UNIT}; ${SYNC_LOG})"
    elif systemctl is-active --quiet "${SYNC_UNIT}"; then
        ck_log INFO "${SYNC_UNIT} is running with unchanged inputs: left alone"
    else
        systemctl start --no-block "${SYNC_UNIT}"
        ck_log INFO "started ${SYNC_UNIT} (not running; inputs unchanged)"
    fi
    ck_ensure_dir "${CK_ROOT}${SYNC_INPUTS_FILE%/*}" 0755
    ck_write_file "${CK_ROOT}${SYNC_INPUTS_FILE}" 0644 "${CK_SYNC_INPUTS}"
    systemctl enable --quiet --now "${HEARTBEAT_TIMER}"
    systemctl enable --quiet --now "${HEALTH_TIMER}"
    if [[ "${CK_STORE_GC_TIMER}" == 1 ]]; then
        systemctl enable --quiet --now "${GC_TIMER}"
        ck_log INFO "image gc timer on: ${GC_TIMER} runs gc --apply daily (grace ${CK_STORE_GC_GRACE_HOURS} h, stale after ${CK_STORE_GC_STALE_DAYS} days)"
    fi
}

main() {
    boot_log INFO "start (args: $*)"
    fetch_bundle "$@"
    # shellcheck source=enroot.sh
    source "${BUNDLE_DIR}/enroot.sh"
    CK_SCRIPT_NAME="head_node.sh"

    ck_parse_args head "$@"
    ck_write_node_env
    ck_require_enroot with-pyxis
    activate_bundle "${BUNDLE_DIR}"

    ck_setup_local_enroot slurmctld
    ck_install_prolog
    ck_install_plugstack "${CK_SLURM_ETC}" "${CK_PYXIS_SO}"
    if [[ "${CK_PLUGSTACK_CHANGED}" == yes ]]; then
        "$(ck_slurm_cmd scontrol)" reconfigure || ck_die 1 "scontrol reconfigure failed after installing pyxis.conf"
        ck_log INFO "scontrol reconfigure: slurmctld and slurmd reload plugstack.conf"
    else
        ck_log INFO "plugstack unchanged; no reconfigure"
    fi

    ensure_store
    store_units
    start_store_units
    SWITCHED_FROM=""
    ck_log INFO "done: cluster ${CK_CLUSTER}, os ${CK_OS}, store ${CK_STORE}"
}

main "$@"
