# shellcheck shell=bash disable=SC2034
# (SC2034: variables set here, e.g. CK_PLUGSTACK_CHANGED, are read by the scripts that source this file.)
# ClusterKit node functions: sourced (never executed) by head_node.sh, compute_node_start.sh and
# compute_node_configured.sh. It ships inside the bundle zip; the head node installs the bundle under
# /opt/parallelcluster/shared/clusterkit/ (NFS-shared), so compute nodes source it without downloading.
#
# Conventions every function follows:
# - every absolute path goes through ${CK_ROOT} (empty on a real node; a throwaway root in tests);
#   file CONTENTS always use real, unprefixed paths;
# - files are written atomically (temp file + rename) and only when content or mode differ, so a
#   second run changes nothing (idempotence is what makes OnNodeUpdated re-runs safe);
# - settings come only from the CustomActions Args (ck_parse_args) or the documented defaults;
# - what is parsed, checked or rendered (the Args against the one settings table, node.env, enroot.conf,
#   pyxis.conf, plugstack.conf) is the node tools' job (clusterkit_node.pyz next to this file: args.py,
#   enroot_conf.py, pyxis_conf.py); this file keeps the logging, the atomic writes, dirs, mounts, systemd.

CK_ROOT="${CK_ROOT:-}"
CK_LOG_FILE="${CK_LOG_FILE:-${CK_ROOT}/var/log/clusterkit/bootstrap.log}"
CK_SCRIPT_NAME="${CK_SCRIPT_NAME:-${0##*/}}"
CK_LAST_CHANGED=no
CK_SYSTEMD_DIRTY=no
CK_TMP_PATHS=()
# The node tools: the zipapp of the bundle this file came with (the head node calls them before that bundle is
# live, so not through /opt/parallelcluster/shared/clusterkit). CK_ZIPAPP overrides it (tests).
CK_ZIPAPP="${CK_ZIPAPP:-${BASH_SOURCE[0]%/*}/clusterkit_node.pyz}"
CK_ARGS=()

readonly CK_PYXIS_SO="/usr/local/lib/slurm/spank_pyxis.so"
readonly CK_SLURM_ETC="/opt/slurm/etc"
readonly CK_SLURM_BIN="/opt/slurm/bin"
readonly CK_ENROOT_CREDENTIALS="/etc/enroot/credentials"
readonly CK_SYNC_ENROOT_CONFIG="/etc/clusterkit/sync-enroot"
readonly CK_PROLOG_DIR="/opt/slurm/etc/scripts/prolog.d"
readonly CK_PROLOG_NAME="10_clusterkit_enroot_user_dirs"
# enroot's Slurm hooks: 50-slurm-pmi.sh passes PMI/PMIx env and mounts into containers, 50-slurm-pytorch.sh
# sets MASTER_ADDR/RANK/WORLD_SIZE. Some enroot releases ship a separate 50-slurm-pmix.sh: enabled if present.
readonly CK_ENROOT_HOOKS=(50-slurm-pmi.sh 50-slurm-pytorch.sh)
readonly CK_ENROOT_OPTIONAL_HOOKS=(50-slurm-pmix.sh)
readonly CK_ENROOT_HOOK_SOURCES=(/usr/share/enroot/hooks.d /opt/parallelcluster/examples/enroot/hooks.d)
readonly CK_PC_EXAMPLES=(
    /opt/parallelcluster/examples/enroot/enroot.conf
    /opt/parallelcluster/examples/spank/plugstack.conf
    /opt/parallelcluster/examples/pyxis/pyxis.conf
)
readonly CK_MIN_PC_VERSION="3.11.1"

# ---------------------------------------------------------------------------------------------------
# Logging and errors
# ---------------------------------------------------------------------------------------------------

# ck_log LEVEL MESSAGE...: ISO-8601 UTC timestamp, to stdout (ERROR to stderr) and the bootstrap log.
ck_log() {
    local level="$1" ts line
    shift
    TZ=UTC0 printf -v ts '%(%Y-%m-%dT%H:%M:%SZ)T' -1
    line="${ts} ${CK_SCRIPT_NAME} ${level} $*"
    if [[ "${level}" == ERROR ]]; then
        printf '%s\n' "${line}" >&2
    else
        printf '%s\n' "${line}"
    fi
    if [[ ! -d "${CK_LOG_FILE%/*}" ]]; then
        mkdir -p "${CK_LOG_FILE%/*}" 2>/dev/null || true
    fi
    printf '%s\n' "${line}" >>"${CK_LOG_FILE}" 2>/dev/null || true
}

# ck_die CODE MESSAGE: one line naming what is wrong, then exit CODE (2 = bad Args, 1 = node problem).
ck_die() {
    local code="$1"
    shift
    ck_log ERROR "$*"
    exit "${code}"
}

ck_cleanup() {
    local p
    for p in "${CK_TMP_PATHS[@]}"; do
        [[ -e "${p}" || -L "${p}" ]] && rm -rf -- "${p}"
    done
    CK_TMP_PATHS=()
# The node tools: the zipapp of the bundle this file came with (the head node calls them before that bundle is
# live, so not through /opt/parallelcluster/shared/clusterkit). CK_ZIPAPP overrides it (tests).
CK_ZIPAPP="${CK_ZIPAPP:-${BASH_SOURCE[0]%/*}/clusterkit_node.pyz}"
CK_ARGS=()
}

# ck_compute_prologue ARG...: how both compute scripts begin once they sourced this file (their own lines
# before it only find the bundle): the EXIT trap, the start line, the Args checked into node.env.
ck_compute_prologue() {
    trap ck_cleanup EXIT
    ck_log INFO "start (args: $*)"
    ck_parse_args compute "$@"
    ck_write_node_env
}

# ---------------------------------------------------------------------------------------------------
# Args: KEY=VALUE strings from the PC CustomActions (contract: "Node settings")
# ---------------------------------------------------------------------------------------------------

# ck_node_tool COMMAND ARG...: run the node tools (python3 is on every supported AMI: the zipapp needs >= 3.9).
ck_node_tool() {
    python3 "${CK_ZIPAPP}" "$@"
}

# ck_parse_args ROLE ARG...: the Args checked against the one settings table (clusterkit_node/contract/settings.py, by
# the node tools' node-args: keys, values, did-you-mean) into one shell variable per key, defaults first, so
# nothing leaks in from the caller's environment. Exit 2 on a bad Arg, with its one line.
ck_parse_args() {
    local role="$1" out rc=0
    shift
    out="$(ck_node_tool node-args --role "${role}" --script "${CK_SCRIPT_NAME}" -- "$@")" || rc=$?
    if ((rc != 0)); then
        ck_die "${rc}" "${out:-the node tools could not check the Args (${CK_ZIPAPP} exit ${rc})}"
    fi
    [[ -n "${out}" ]] || ck_die 1 "the node tools printed no settings for the Args (${CK_ZIPAPP} node-args)"
    # node.env: KEY='value' lines of checked values (args.py quotes them), so evaluating it sets just those.
    eval "${out}"
    CK_NODE_ENV="${out}"
    CK_ROLE="${role}"
    CK_ARGS=("$@")
}

# ck_node_setup COMMAND ARG...: a node-tools command that renders from the node's Args (parsed again there).
ck_node_setup() {
    local command="$1"
    shift
    ck_node_tool "${command}" "$@" --role "${CK_ROLE}" --script "${CK_SCRIPT_NAME}" -- "${CK_ARGS[@]}"
}

# ck_write_node_env: /etc/clusterkit/node.env, every accepted key with its effective value.
ck_write_node_env() {
    ck_ensure_dir "${CK_ROOT}/etc/clusterkit" 0755
    ck_write_file "${CK_ROOT}/etc/clusterkit/node.env" 0644 "${CK_NODE_ENV}"
}

# ---------------------------------------------------------------------------------------------------
# Idempotent, atomic file primitives
# ---------------------------------------------------------------------------------------------------

ck_mode_of() {
    stat -c '%a' -- "$1"
}

# ck_ensure_dir DIR MODE: create (with parents) and fix the mode; no-op when already right.
ck_ensure_dir() {
    local dir="$1" mode="$2"
    if [[ ! -d "${dir}" ]]; then
        mkdir -p -- "${dir}"
        chmod "${mode}" -- "${dir}"
        ck_log INFO "created ${dir#"${CK_ROOT}"} (mode ${mode})"
    elif (($(printf '%d' "0$(ck_mode_of "${dir}")") != $(printf '%d' "0${mode#0}"))); then
        chmod "${mode}" -- "${dir}"
        ck_log INFO "fixed mode of ${dir#"${CK_ROOT}"} to ${mode}"
    fi
}

# ck_write_file TARGET MODE CONTENT [TMPDIR]: write CONTENT (a trailing newline is ensured) through a
# temp file in TMPDIR (default: TARGET's directory, same file system) renamed over TARGET. Leaves the
# file alone when content and mode already match. Sets CK_LAST_CHANGED=yes|no.
ck_write_file() {
    local target="$1" mode="$2" content="$3" tmpdir="${4:-${1%/*}}" have="" tmp
    CK_LAST_CHANGED=no
    [[ "${content}" == *$'\n' ]] || content+=$'\n'
    if [[ -f "${target}" && ! -L "${target}" ]]; then
        IFS= read -r -d '' have <"${target}" || true
        if [[ "${have}" == "${content}" ]]; then
            if (($(printf '%d' "0$(ck_mode_of "${target}")") != $(printf '%d' "0${mode#0}"))); then
                chmod "${mode}" -- "${target}"
                CK_LAST_CHANGED=yes
                ck_log INFO "fixed mode of ${target#"${CK_ROOT}"} to ${mode}"
            fi
            return 0
        fi
    fi
    tmp="$(mktemp "${tmpdir}/.${target##*/}.ck-XXXXXX")"
    CK_TMP_PATHS+=("${tmp}")
    printf '%s' "${content}" >"${tmp}"
    chmod "${mode}" -- "${tmp}"
    mv -f -T -- "${tmp}" "${target}"
    CK_LAST_CHANGED=yes
    ck_log INFO "wrote ${target#"${CK_ROOT}"} (mode ${mode})"
}

# ck_remove_file TARGET: remove if present. Sets CK_LAST_CHANGED.
ck_remove_file() {
    CK_LAST_CHANGED=no
    if [[ -e "$1" || -L "$1" ]]; then
        rm -f -- "$1"
        CK_LAST_CHANGED=yes
        ck_log INFO "removed $1"
    fi
}

# ---------------------------------------------------------------------------------------------------
# Preflight: what the PC AMI must already provide (no compiling, no downloads)
# ---------------------------------------------------------------------------------------------------

# ck_require_enroot [WITH_PYXIS]: exit 1 naming every missing piece and the PC version that ships it.
ck_require_enroot() {
    local with_pyxis="${1:-}" p
    local -a missing=()
    command -v enroot >/dev/null 2>&1 || missing+=("enroot binary (not on PATH)")
    if [[ -n "${with_pyxis}" ]]; then
        [[ -f "${CK_ROOT}${CK_PYXIS_SO}" ]] || missing+=("Pyxis SPANK plugin ${CK_PYXIS_SO}")
        for p in "${CK_PC_EXAMPLES[@]}"; do
            [[ -f "${CK_ROOT}${p}" ]] || missing+=("${p}")
        done
    fi
    if ((${#missing[@]})); then
        local joined
        joined="$(printf '%s; ' "${missing[@]}")"
        ck_die 1 "Enroot/Pyxis not found: missing ${joined%; } (official ParallelCluster AMIs >= ${CK_MIN_PC_VERSION} ship them pre-installed; use such an AMI - ClusterKit never compiles or downloads software on nodes)"
    fi
}

# ---------------------------------------------------------------------------------------------------
# Local enroot setup (head and compute nodes)
# ---------------------------------------------------------------------------------------------------

# ck_enroot_layout: choose local dirs. Instance-store NVMe (PC mounts it at /scratch) when present,
# else tmpfs /run for runtime and the root disk /var/tmp for data/cache/temp. Never FSx or NFS:
# enroot's locks time out on Lustre/NFS at scale (enroot#154) and squashfs mounts break there.
ck_enroot_layout() {
    if mountpoint -q "${CK_ROOT}/scratch"; then
        CK_ENROOT_MEDIUM="local NVMe (/scratch)"
        CK_ENROOT_RUNTIME_DIR=/scratch/enroot/runtime
        CK_ENROOT_DATA_DIR=/scratch/enroot/data
        CK_ENROOT_CACHE_DIR=/scratch/enroot/cache
        CK_ENROOT_TEMP_DIR=/scratch/enroot/tmp
        CK_ENROOT_BASE_DIRS=(/scratch/enroot)
    else
        CK_ENROOT_MEDIUM="tmpfs (/run) + root volume (/var/tmp)"
        CK_ENROOT_RUNTIME_DIR=/run/enroot
        CK_ENROOT_DATA_DIR=/var/tmp/enroot/data
        CK_ENROOT_CACHE_DIR=/var/tmp/enroot/cache
        CK_ENROOT_TEMP_DIR=/var/tmp/enroot/tmp
        CK_ENROOT_BASE_DIRS=(/var/tmp/enroot)
    fi
}

# ck_assert_local_fs DIR: refuse network file systems for enroot's working dirs.
ck_assert_local_fs() {
    local fstype
    fstype="$(stat -f -c '%T' -- "${CK_ROOT}$1")"
    case "${fstype}" in
    nfs* | lustre* | fuse* | cifs | smb*)
        ck_die 1 "enroot directory $1 is on ${fstype}; enroot runtime/data/cache must be on local disk (NVMe or root volume), never FSx/NFS"
        ;;
    esac
}

ck_make_enroot_dirs() {
    local d
    ck_enroot_layout
    for d in "${CK_ENROOT_BASE_DIRS[@]}"; do
        ck_ensure_dir "${CK_ROOT}${d}" 0755
    done
    # The per-user parents are root's and 0755: root makes each user's user-<uid> (0700, theirs) before their job
    # runs (the Slurm prolog, clusterkit_node/node/user_dirs.py), so no user can make, or swap, another's. The temp dir is
    # shared like /tmp (sticky, mktemp names).
    for d in "${CK_ENROOT_RUNTIME_DIR}" "${CK_ENROOT_DATA_DIR}" "${CK_ENROOT_CACHE_DIR}"; do
        ck_ensure_dir "${CK_ROOT}${d}" 0755
        ck_assert_local_fs "${d}"
    done
    ck_ensure_dir "${CK_ROOT}${CK_ENROOT_TEMP_DIR}" 1777
    ck_assert_local_fs "${CK_ENROOT_TEMP_DIR}"
    ck_log INFO "enroot working dirs on ${CK_ENROOT_MEDIUM}"
    if [[ "${CK_ENROOT_RUNTIME_DIR}" == /run/* ]]; then
        ck_log WARN "no NVMe at /scratch: container rootfs unpack into ${CK_ENROOT_DATA_DIR} on the root volume; size RootVolume for the largest image"
        # /run is a tmpfs emptied at every boot: recreate the parent before any user needs it.
        ck_ensure_dir "${CK_ROOT}/etc/tmpfiles.d" 0755
        ck_write_file "${CK_ROOT}/etc/tmpfiles.d/clusterkit-enroot.conf" 0644 \
            "# Managed by ClusterKit: enroot per-user runtime dirs live under this tmpfs parent (root's: the Slurm prolog makes each user's)."$'\n'"d ${CK_ENROOT_RUNTIME_DIR} 0755 root root -"
    else
        ck_remove_file "${CK_ROOT}/etc/tmpfiles.d/clusterkit-enroot.conf"
    fi
}

# ck_write_enroot_conf: /etc/enroot/enroot.conf for the current settings and layout (clusterkit_node/node/enroot_conf.py).
ck_write_enroot_conf() {
    local content
    ck_ensure_dir "${CK_ROOT}/etc/enroot" 0755
    content="$(ck_node_setup enroot-conf --medium "${CK_ENROOT_MEDIUM}" --runtime-dir "${CK_ENROOT_RUNTIME_DIR}" \
        --data-dir "${CK_ENROOT_DATA_DIR}" --cache-dir "${CK_ENROOT_CACHE_DIR}" --temp-dir "${CK_ENROOT_TEMP_DIR}")" ||
        ck_die 1 "cannot render /etc/enroot/enroot.conf (${CK_ZIPAPP} enroot-conf failed)"
    ck_write_file "${CK_ROOT}/etc/enroot/enroot.conf" 0644 "${content}"
}

# ck_find_hook NAME: path of the packaged hook NAME (enroot packages put their optional hooks in
# /usr/share/enroot/hooks.d; PC's examples dir is the fallback). Fails when none ships it.
ck_find_hook() {
    local dir
    for dir in "${CK_ENROOT_HOOK_SOURCES[@]}"; do
        if [[ -f "${CK_ROOT}${dir}/$1" ]]; then
            printf '%s' "${CK_ROOT}${dir}/$1"
            return 0
        fi
    done
    return 1
}

# ck_install_hooks: enable enroot's Slurm hooks (copied into /etc/enroot/hooks.d, which enroot runs).
ck_install_hooks() {
    local hook src dst content
    ck_ensure_dir "${CK_ROOT}/etc/enroot/hooks.d" 0755
    for hook in "${CK_ENROOT_HOOKS[@]}" "${CK_ENROOT_OPTIONAL_HOOKS[@]}"; do
        dst="${CK_ROOT}/etc/enroot/hooks.d/${hook}"
        if src="$(ck_find_hook "${hook}")"; then
            IFS= read -r -d '' content <"${src}" || true
            ck_write_file "${dst}" 0755 "${content}"
        elif [[ ! -f "${dst}" && " ${CK_ENROOT_HOOKS[*]} " == *" ${hook} "* ]]; then
            ck_die 1 "enroot hook ${hook} not found in ${CK_ENROOT_HOOK_SOURCES[*]} (shipped with enroot on ParallelCluster AMIs >= ${CK_MIN_PC_VERSION})"
        fi
    done
}

# ck_write_ecr_credentials: /etc/enroot/credentials for CK_ECR_REGISTRIES, 0644 root (clusterkit_node/node/enroot_conf.py
# says why it is world-readable and holds no secret: each user's enroot runs its password command as that user, so
# users pull with their own identity); removed when the cluster names no ECR registry. The head node's image sync
# gets its own copy, root's only (ck_write_sync_credentials).
ck_write_ecr_credentials() {
    local content
    content="$(ck_node_setup enroot-credentials)" ||
        ck_die 1 "cannot render ${CK_ENROOT_CREDENTIALS} (${CK_ZIPAPP} enroot-credentials failed)"
    if [[ "${CK_ROLE}" == head ]]; then
        ck_write_sync_credentials "${content}"
    fi
    if [[ -z "${content}" ]]; then
        ck_remove_file "${CK_ROOT}${CK_ENROOT_CREDENTIALS}"
        return 0
    fi
    ck_ensure_dir "${CK_ROOT}/etc/enroot" 0755
    ck_write_file "${CK_ROOT}${CK_ENROOT_CREDENTIALS}" 0644 "${content}"
}

# ck_write_sync_credentials CONTENT: the image sync's enroot config dir (its unit's ENROOT_CONFIG_PATH), root's
# only (0700), with .credentials 0600: whatever the sync authenticates with (today the ECR password commands, run as
# root with the head node's role; a registry token if one is ever configured) is never readable by a user, and the
# sync never reads a file a user could change. Written through a temp file in that 0700 dir, so never exposed.
ck_write_sync_credentials() {
    local dir="${CK_ROOT}${CK_SYNC_ENROOT_CONFIG}"
    ck_ensure_dir "${CK_ROOT}/etc/clusterkit" 0755
    ck_ensure_dir "${dir}" 0700
    if [[ -z "$1" ]]; then
        ck_remove_file "${dir}/.credentials"
    else
        ck_write_file "${dir}/.credentials" 0600 "$1"
    fi
}

# ck_apply_os_tweaks: Ubuntu 24.04 restricts unprivileged user namespaces through AppArmor, which
# enroot needs; the PC tutorial relaxes it on every node.
ck_apply_os_tweaks() {
    local file="${CK_ROOT}/etc/sysctl.d/99-clusterkit-enroot.conf"
    local proc="${CK_ROOT}/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
    if [[ "${CK_OS}" != ubuntu2404 ]]; then
        return 0
    fi
    ck_ensure_dir "${CK_ROOT}/etc/sysctl.d" 0755
    ck_write_file "${file}" 0644 \
        "# Managed by ClusterKit: enroot needs unprivileged user namespaces (Ubuntu 24.04 AppArmor default blocks them)."$'\n'"kernel.apparmor_restrict_unprivileged_userns = 0"
    if [[ "${CK_LAST_CHANGED}" == yes ]] || { [[ -r "${proc}" ]] && [[ "$(<"${proc}")" != 0 ]]; }; then
        sysctl -q -p "${file}"
        ck_log INFO "applied kernel.apparmor_restrict_unprivileged_userns=0"
    fi
}

# ck_slurm_path_dropin SERVICE: enroot's Slurm hooks call scontrol, which PC installs in /opt/slurm/bin,
# outside systemd's default PATH (enroot#136).
ck_slurm_path_dropin() {
    local service="$1" dir="${CK_ROOT}/etc/systemd/system/$1.service.d"
    ck_ensure_dir "${dir}" 0755
    ck_write_file "${dir}/clusterkit-path.conf" 0644 "# Managed by ClusterKit: enroot's Slurm hooks run scontrol from ${CK_SLURM_BIN} (enroot#136).
[Service]
Environment=\"PATH=${CK_SLURM_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\""
    if [[ "${CK_LAST_CHANGED}" == yes ]]; then
        CK_SYSTEMD_DIRTY=yes
        ck_log INFO "${service}: PATH drop-in takes effect at the service's next (re)start"
    fi
}

ck_systemd_reload_if_dirty() {
    if [[ "${CK_SYSTEMD_DIRTY}" == yes ]]; then
        systemctl daemon-reload
        CK_SYSTEMD_DIRTY=no
    fi
}

# ck_setup_local_enroot [SLURM_SERVICE]: everything node-local that every node kind needs; the Slurm daemon's PATH
# drop-in where one runs (none on a login node: no slurmd there, and srun needs no enroot hook).
ck_setup_local_enroot() {
    ck_make_enroot_dirs
    ck_write_enroot_conf
    ck_install_hooks
    ck_write_ecr_credentials
    ck_apply_os_tweaks
    if [[ -n "${1:-}" ]]; then
        ck_slurm_path_dropin "$1"
    fi
}

# ck_install_prolog: the Slurm prolog that makes the job user's enroot dirs as root before any step runs
# (clusterkit_node/node/user_dirs.py). ParallelCluster's slurm.conf runs every file in CK_PROLOG_DIR (cookbook slurm.conf.erb:
# Prolog=/opt/slurm/etc/scripts/prolog.d/*; config_health_check.rb makes the dir); /opt/slurm is NFS-shared, so the
# head node writes it once for every node. It never fails: a failing prolog drains the node.
ck_install_prolog() {
    local dir="${CK_ROOT}${CK_PROLOG_DIR}"
    ck_ensure_dir "${dir}" 0755
    ck_write_file "${dir}/${CK_PROLOG_NAME}" 0755 "#!/bin/bash
# Managed by ClusterKit (head_node.sh): makes the job user's enroot dirs (user-<uid>, 0700, theirs) under root's
# 0755 parents before any step of the job runs, and quarantines anything else found there. Never fails: a failing
# prolog drains the node; problems go to /var/log/clusterkit/user-dirs.log and syslog.
set -uo pipefail
PATH=/usr/local/bin:/usr/bin:/bin python3 -I /opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz user-dirs --prolog >/dev/null 2>&1 || true
exit 0"
}

# ---------------------------------------------------------------------------------------------------
# Pyxis plugstack (head node only: /opt/slurm is NFS-shared to compute nodes)
# ---------------------------------------------------------------------------------------------------

# ck_start_path: how pyxis can start containers on THIS node, measured by the node tools (clusterkit_node
# start_path.py: squashfuse and fuse-overlayfs present, /dev/fuse usable by an unprivileged user, the pyxis
# version), never assumed from the OS name. Sets CK_START_PATH=squashfuse|extract and CK_START_PATH_WHY.
ck_start_path() {
    local out line
    CK_START_PATH=extract
    CK_START_PATH_WHY=""
    if ! out="$(ck_node_tool start-path --want-squashfuse "${PYXIS_USE_SQUASHFUSE}" --os "${CK_OS}" 2>&1)"; then
        CK_START_PATH_WHY="the start-path check failed: ${out//$'\n'/ | }"
        return 0
    fi
    while IFS= read -r line; do
        case "${line}" in
        path=*) CK_START_PATH="${line#path=}" ;;
        "why extract: "*) CK_START_PATH_WHY+="${CK_START_PATH_WHY:+; }${line#why extract: }" ;;
        "") ;;
        *) ck_log INFO "${line}" ;;
        esac
    done <<<"${out}"
}

# ck_pyxis_conf SO: set CK_PYXIS_CONF to pyxis.conf for the installed pyxis and the Args (clusterkit_node/
# pyxis_conf.py: options the installed pyxis does not know are left out, use_squashfuse=1 only when this node can
# start a .sqsh in place), logging the lines the node tools print before it (LEVEL message).
ck_pyxis_conf() {
    local out line
    out="$(ck_node_setup pyxis-conf --so "$1")" || ck_die 1 "cannot render pyxis.conf (${CK_ZIPAPP} pyxis-conf failed)"
    while IFS= read -r line; do
        ck_log "${line%% *}" "${line#* }"
    done <<<"${out%%$'\n'--$'\n'*}"
    CK_PYXIS_CONF="${out#*$'\n'--$'\n'}"
}

# ck_install_plugstack SLURM_ETC PLUGIN_SO: plugstack.conf including plugstack.conf.d/*, and pyxis.conf
# in it. Refuses to write a `required` line for an absent plugin (slurmd and every srun/sbatch would
# refuse to start). pyxis.conf's temp file lives in SLURM_ETC, never in plugstack.conf.d, so no node
# ever includes a half-written or temp file. Sets CK_PLUGSTACK_CHANGED=yes|no.
ck_install_plugstack() {
    local etc="$1" so="$2" plugstack content
    CK_PLUGSTACK_CHANGED=no
    if [[ ! -f "${CK_ROOT}${so}" ]]; then
        ck_die 1 "refusing to install a 'required' plugstack line: plugin ${so} not found (it would stop slurmd and every srun/sbatch)"
    fi
    plugstack="${CK_ROOT}${etc}/plugstack.conf"
    ck_ensure_dir "${CK_ROOT}${etc}/plugstack.conf.d" 0755
    # The file as the node tools print it, trailing newlines included (a site's own file is kept as it is).
    content="$(ck_node_tool plugstack-conf --etc "${etc}" && printf x)" ||
        ck_die 1 "cannot render ${etc}/plugstack.conf (${CK_ZIPAPP} plugstack-conf failed)"
    content="${content%x}"
    ck_write_file "${plugstack}" 0644 "${content}"
    [[ "${CK_LAST_CHANGED}" == yes ]] && CK_PLUGSTACK_CHANGED=yes
    ck_pyxis_conf "${so}"
    ck_write_file "${CK_ROOT}${etc}/plugstack.conf.d/pyxis.conf" 0644 "${CK_PYXIS_CONF}" "${CK_ROOT}${etc}"
    [[ "${CK_LAST_CHANGED}" == yes ]] && CK_PLUGSTACK_CHANGED=yes
    return 0
}

# ck_slurm_cmd NAME: PC's Slurm lives in /opt/slurm/bin, which is not always on root's PATH.
ck_slurm_cmd() {
    if [[ -x "${CK_ROOT}${CK_SLURM_BIN}/$1" ]]; then
        printf '%s' "${CK_ROOT}${CK_SLURM_BIN}/$1"
    else
        printf '%s' "$1"
    fi
}

# ck_plugstack_loads SLURM_ETC PLUGIN_SO: does plugstack.conf (directly or via include globs) load it?
ck_plugstack_loads() {
    local etc="$1" so="$2" line pattern file
    local plugstack="${CK_ROOT}${etc}/plugstack.conf"
    local re="^[[:space:]]*(required|optional)[[:space:]]+${so//./\\.}([[:space:]]|$)"
    [[ -f "${plugstack}" ]] || return 1
    while IFS= read -r line || [[ -n "${line}" ]]; do
        if [[ "${line}" =~ ${re} ]]; then
            return 0
        fi
        if [[ "${line}" =~ ^[[:space:]]*include[[:space:]]+([^[:space:]]+) ]]; then
            pattern="${BASH_REMATCH[1]}"
            # shellcheck disable=SC2086 # the include pattern is a glob on purpose
            for file in "${CK_ROOT}"${pattern}; do
                [[ -f "${file}" ]] || continue
                while IFS= read -r line || [[ -n "${line}" ]]; do
                    [[ "${line}" =~ ${re} ]] && return 0
                done <"${file}"
            done
        fi
    done <"${plugstack}"
    return 1
}
