#!/usr/bin/env bash
# ClusterKit head node: HeadNode CustomActions OnNodeConfigured AND OnNodeUpdated (same script, same
# Args; idempotent: a re-run changes no file that is already right, and restarts the image sync only
# when its unit or image lock changed).
#
# Args (one KEY=VALUE each): CK_CLUSTER, CK_OS, CK_BUNDLE, CK_REGION (required); CK_STORE,
# CK_ECR_REGISTRIES, ENROOT_*, PYXIS_* (optional; values and defaults: clusterkit_node/contract/settings.py).
#
# Order, and why:
#  1. download + unpack the bundle (the shared functions live in it, so this script carries only a
#     minimal logger until then); the unpacked copy is validated before it goes live;
#  2. parse/validate Args with the bundle's node tools (enroot.sh ck_parse_args) -> /etc/clusterkit/node.env;
#  3. preflight: enroot + pyxis must come with the AMI (PC >= 3.11.1);
#  4. switch /opt/parallelcluster/shared/clusterkit (NFS-shared; compute nodes source it) to the new
#     bundle with one atomic symlink rename (a run that fails after it switches the link back);
#  5. local enroot setup, then pyxis plugstack in /opt/slurm/etc + `scontrol reconfigure` if changed;
#  6. image store dir on FSx and the background image sync (systemd, so slow imports never hit PC's
#     bootstrap timeout); the hourly heartbeat of this cluster's record in the (shared) store, and the daily
#     image gc when CK_STORE_GC_TIMER=1.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
umask 022

CK_ROOT="${CK_ROOT:-}"
CK_SCRIPT_NAME="head_node.sh"
readonly SHARED_BASE="${CK_ROOT}/opt/parallelcluster/shared"
readonly BUNDLE_LINK="${SHARED_BASE}/clusterkit"
# What the bundle must hold besides head_node.sh and the launcher: the node tools (one zipapp), the files they
# read next to it, and what compute nodes source or run from the shared directory.
readonly BUNDLE_FILES=(
    enroot.sh clusterkit_node.pyz compat_rules.json node_profiles.json images.lock compute_node_start.sh
    compute_node_configured.sh login_node.sh compute.args
)
readonly SYNC_UNIT="clusterkit-image-sync.service"
readonly SYNC_TIMER="clusterkit-image-sync.timer"
readonly SYNC_LOG="/var/log/clusterkit/image-sync.log"
readonly HEARTBEAT_UNIT="clusterkit-store-heartbeat.service"
readonly HEARTBEAT_TIMER="clusterkit-store-heartbeat.timer"
readonly GC_UNIT="clusterkit-store-gc.service"
readonly GC_TIMER="clusterkit-store-gc.timer"
readonly ZIPAPP="/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz"
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
    if ((rc != 0)) && [[ -n "${SWITCHED_FROM}" ]]; then
        restore_link
    fi
    if [[ -n "${BOOT_TMP}" && -e "${BOOT_TMP}" ]]; then
        rm -rf -- "${BOOT_TMP}"
    fi
    if declare -F ck_cleanup >/dev/null; then
        ck_cleanup
    fi
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

# boot_arg KEY ARG...: value of KEY=... among the Args (full validation happens in ck_parse_args).
boot_arg() {
    local key="$1" arg
    shift
    for arg in "$@"; do
        if [[ "${arg}" == "${key}="* ]]; then
            printf '%s' "${arg#*=}"
            return 0
        fi
    done
    return 1
}

# fetch_bundle ARG...: download CK_BUNDLE and unpack it into a content-addressed directory next to
# the live link (same file system, so the later switch is a rename). Sets BUNDLE_DIR.
fetch_bundle() {
    local bundle region digest version_dir f
    local -a missing=()
    bundle="$(boot_arg CK_BUNDLE "$@")" ||
        boot_die 2 "Args: missing required key CK_BUNDLE (add 'CK_BUNDLE=s3://<bucket>/<sha256>.zip' to the CustomActions Args)"
    region="$(boot_arg CK_REGION "$@")" ||
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
        if ((${#missing[@]})); then
            boot_die 1 "bundle ${bundle} lacks ${missing[*]} at its root (rebuild it with the CDK app)"
        fi
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
        case "${d##*/}" in
        "${target}" | "${current}" | .clusterkit-legacy-*) ;;
        *)
            rm -rf -- "${d}"
            ck_log INFO "removed ${d##*/} (older bundle or leftover download dir)"
            ;;
        esac
    done
}

# ensure_store: the image store must be on the FSx mount (mounted before OnNodeConfigured), never on
# the root volume where large imports would fill the disk. Its staging sibling (/fsx/containers ->
# /fsx/.containers.clusterkit: lock, import temp files, node fingerprints; outside what FSx exports to
# S3) is created by the image sync, which owns that layout (clusterkit_node/contract/layout.py, store.py).
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

render_sync_unit() {
    local key
    cat <<EOF
# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file.
[Unit]
Description=ClusterKit image sync: import the locked container images into ${CK_STORE}
Wants=network-online.target
After=network-online.target remote-fs.target
RequiresMountsFor=${CK_STORE} /opt/parallelcluster/shared
StartLimitIntervalSec=3600
StartLimitBurst=5

[Service]
Type=simple
Environment=HOME=/root
# Its own enroot config dir, root's only (enroot.sh ck_write_sync_credentials): registry credentials users cannot read.
Environment=ENROOT_CONFIG_PATH=${CK_SYNC_ENROOT_CONFIG}
Environment="PATH=/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EOF
    for key in ENROOT_SQUASH_OPTIONS ENROOT_MAX_PROCESSORS ENROOT_CONNECT_TIMEOUT ENROOT_TRANSFER_TIMEOUT \
        ENROOT_TRANSFER_RETRIES ENROOT_MOUNT_HOME ENROOT_ROOTFS_WRITABLE; do
        if [[ -n "${!key}" ]]; then
            printf 'Environment="%s=%s"\n' "${key}" "${!key}"
        fi
    done
    cat <<EOF
# Journal (stdout) and a plain log file for people without journalctl habits. systemctl stop sends
# SIGTERM to every process of the unit: tee ignores it and passes on the sync's last line ("stopped by
# SIGTERM"), then ends with the pipe.
ExecStart=/bin/bash -o pipefail -c 'python3 ${ZIPAPP} sync --lock /opt/parallelcluster/shared/clusterkit/images.lock --store ${CK_STORE} --stale-days ${CK_STORE_GC_STALE_DAYS} 2>&1 | (trap "" TERM; exec tee -a ${SYNC_LOG})'
# Exit 1 = some image failed (registry hiccup): retry later. Exit 2 = usage/preflight: do not loop.
Restart=on-failure
RestartSec=120
RestartPreventExitStatus=2
Nice=5

[Install]
WantedBy=multi-user.target
EOF
}

# render_sync_timer: the sync again 15 minutes after each run ends (systemd.timer(5) OnUnitInactiveSec, so never
# while one runs): it re-checks every published file against its record (a file changed behind the sync's back is
# re-hashed and, if its content changed, replaced; the importer refuses it meanwhile) and retries what failed.
render_sync_timer() {
    cat <<EOF
# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file.
[Unit]
Description=ClusterKit image sync, again 15 minutes after each run: re-check the store, retry what failed

[Timer]
OnUnitInactiveSec=15min
RandomizedDelaySec=60

[Install]
WantedBy=timers.target
EOF
}

# render_heartbeat_unit / render_heartbeat_timer: refresh this cluster's record in the store every hour
# (cluster_records.py), so other clusters' syncs and gc know it is alive; a destroyed cluster's record goes stale.
render_heartbeat_unit() {
    cat <<EOF
# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file.
[Unit]
Description=ClusterKit store heartbeat: refresh cluster ${CK_CLUSTER}'s record in ${CK_STORE}
RequiresMountsFor=${CK_STORE} /opt/parallelcluster/shared

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 ${ZIPAPP} heartbeat --store ${CK_STORE} --cluster ${CK_CLUSTER}
EOF
}

render_heartbeat_timer() {
    cat <<EOF
# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file.
[Unit]
Description=ClusterKit store heartbeat, hourly

[Timer]
OnBootSec=5min
OnUnitActiveSec=1h
RandomizedDelaySec=300

[Install]
WantedBy=timers.target
EOF
}

# render_gc_unit / render_gc_timer: the daily image gc (containers.store_gc.timer): removes store files no live
# cluster record names, no process here has open and no lease holds, after the grace period (gc.py).
render_gc_unit() {
    cat <<EOF
# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file.
[Unit]
Description=ClusterKit image gc: remove files no cluster on ${CK_STORE} uses any more
RequiresMountsFor=${CK_STORE} /opt/parallelcluster/shared

[Service]
Type=oneshot
Nice=10
ExecStart=/bin/bash -o pipefail -c 'python3 ${ZIPAPP} gc --apply --store ${CK_STORE} --grace-hours ${CK_STORE_GC_GRACE_HOURS} --stale-days ${CK_STORE_GC_STALE_DAYS} 2>&1 | tee -a /var/log/clusterkit/store-gc.log'
EOF
}

render_gc_timer() {
    cat <<EOF
# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file.
[Unit]
Description=ClusterKit image gc, daily

[Timer]
OnCalendar=daily
RandomizedDelaySec=1h
Persistent=true

[Install]
WantedBy=timers.target
EOF
}

# write_store_timers: the heartbeat always; the gc timer only while CK_STORE_GC_TIMER=1 (turned off: stopped,
# disabled and its files removed). Idempotent: unchanged files are not rewritten; the one daemon-reload of
# start_image_sync picks up a change. enable_store_timers enables them after that reload.
write_store_timers() {
    local dir="${CK_ROOT}/etc/systemd/system"
    ck_write_file "${dir}/${HEARTBEAT_UNIT}" 0644 "$(render_heartbeat_unit)"
    if [[ "${CK_LAST_CHANGED}" == yes ]]; then CK_SYSTEMD_DIRTY=yes; fi
    ck_write_file "${dir}/${HEARTBEAT_TIMER}" 0644 "$(render_heartbeat_timer)"
    if [[ "${CK_LAST_CHANGED}" == yes ]]; then CK_SYSTEMD_DIRTY=yes; fi
    if [[ "${CK_STORE_GC_TIMER}" == 1 ]]; then
        ck_write_file "${dir}/${GC_UNIT}" 0644 "$(render_gc_unit)"
        if [[ "${CK_LAST_CHANGED}" == yes ]]; then CK_SYSTEMD_DIRTY=yes; fi
        ck_write_file "${dir}/${GC_TIMER}" 0644 "$(render_gc_timer)"
        if [[ "${CK_LAST_CHANGED}" == yes ]]; then CK_SYSTEMD_DIRTY=yes; fi
    elif [[ -e "${dir}/${GC_TIMER}" || -e "${dir}/${GC_UNIT}" ]]; then
        systemctl disable --quiet --now "${GC_TIMER}" || true
        ck_remove_file "${dir}/${GC_TIMER}"
        ck_remove_file "${dir}/${GC_UNIT}"
        CK_SYSTEMD_DIRTY=yes
        ck_log INFO "image gc timer off (containers.store_gc.timer: false): removed ${GC_TIMER}"
    fi
}

enable_store_timers() {
    systemctl enable --quiet --now "${HEARTBEAT_TIMER}"
    if [[ "${CK_STORE_GC_TIMER}" == 1 ]]; then
        systemctl enable --quiet --now "${GC_TIMER}"
        ck_log INFO "image gc timer on: ${GC_TIMER} runs gc --apply daily (grace ${CK_STORE_GC_GRACE_HOURS} h, stale after ${CK_STORE_GC_STALE_DAYS} days)"
    fi
}

# sync_inputs: what a running sync was started with: the unit (command line, enroot settings) and the
# image lock of the live bundle. Anything else in a new bundle does not concern a running import.
sync_inputs() {
    local unit lock
    read -r unit _ < <(sha256sum "${CK_ROOT}/etc/systemd/system/${SYNC_UNIT}")
    read -r lock _ < <(sha256sum "${BUNDLE_LINK}/images.lock")
    printf 'unit=%s lock=%s\n' "${unit}" "${lock}"
}

# start_image_sync: OnNodeUpdated runs on EVERY cluster update (a MaxCount change included), so the
# sync is restarted only when its inputs changed: a multi-GB import in progress survives an unrelated
# update. A sync that is not running (finished, failed, first boot) is started: re-running one whose
# images are present costs milliseconds.
start_image_sync() {
    local state="${CK_ROOT}/var/lib/clusterkit/image-sync.inputs" inputs recorded=""
    ck_ensure_dir "${CK_ROOT}/etc/systemd/system" 0755
    ck_write_file "${CK_ROOT}/etc/systemd/system/${SYNC_UNIT}" 0644 "$(render_sync_unit)"
    [[ "${CK_LAST_CHANGED}" == yes ]] && CK_SYSTEMD_DIRTY=yes
    ck_write_file "${CK_ROOT}/etc/systemd/system/${SYNC_TIMER}" 0644 "$(render_sync_timer)"
    [[ "${CK_LAST_CHANGED}" == yes ]] && CK_SYSTEMD_DIRTY=yes
    ck_systemd_reload_if_dirty
    systemctl enable --quiet "${SYNC_UNIT}"
    systemctl enable --quiet --now "${SYNC_TIMER}"
    inputs="$(sync_inputs)"
    [[ -f "${state}" ]] && recorded="$(<"${state}")"
    if [[ "${inputs}" != "${recorded}" ]]; then
        systemctl restart --no-block "${SYNC_UNIT}"
        ck_log INFO "(re)started ${SYNC_UNIT}: its unit or image lock changed (journalctl -u ${SYNC_UNIT}; ${SYNC_LOG})"
    elif systemctl is-active --quiet "${SYNC_UNIT}"; then
        ck_log INFO "${SYNC_UNIT} is running with unchanged inputs: left alone"
    else
        systemctl start --no-block "${SYNC_UNIT}"
        ck_log INFO "started ${SYNC_UNIT} (not running; inputs unchanged)"
    fi
    ck_ensure_dir "${CK_ROOT}/var/lib/clusterkit" 0755
    ck_write_file "${state}" 0644 "${inputs}"
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
    write_store_timers
    start_image_sync
    enable_store_timers
    SWITCHED_FROM=""
    ck_log INFO "done: cluster ${CK_CLUSTER}, os ${CK_OS}, store ${CK_STORE}"
}

main "$@"
