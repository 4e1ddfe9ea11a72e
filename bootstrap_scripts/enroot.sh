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
# - settings come only from the CustomActions Args (ck_parse_args) or the documented defaults.

CK_ROOT="${CK_ROOT:-}"
CK_LOG_FILE="${CK_LOG_FILE:-${CK_ROOT}/var/log/clusterkit/bootstrap.log}"
CK_SCRIPT_NAME="${CK_SCRIPT_NAME:-${0##*/}}"
CK_LAST_CHANGED=no
CK_SYSTEMD_DIRTY=no
CK_TMP_PATHS=()

readonly CK_PYXIS_SO="/usr/local/lib/slurm/spank_pyxis.so"
readonly CK_SLURM_ETC="/opt/slurm/etc"
readonly CK_SLURM_BIN="/opt/slurm/bin"
readonly CK_ENROOT_CREDENTIALS="/etc/enroot/credentials"
# ClusterKit's pyxis importer: the node zipapp of the live bundle, which pyxis runs as `importer get URI` /
# `importer release` (head_node.sh keeps /opt/parallelcluster/shared/clusterkit pointing at the live bundle;
# NFS-shared, so the one plugstack line names a file every node has).
readonly CK_PYXIS_IMPORTER="/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz"
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

declare -gA CK_DEFAULTS=(
    [CK_CLUSTER]=""
    [CK_OS]=""
    [CK_STORE]="/fsx/containers"
    [CK_BUNDLE]=""
    [CK_REGION]=""
    [CK_ECR_REGISTRIES]=""
    [CK_UNLOCKED_IMAGES]="refuse"
    [ENROOT_SQUASH_OPTIONS]="-comp zstd -Xcompression-level 3 -b 128K -no-fragments"
    [ENROOT_MOUNT_HOME]="yes"
    [ENROOT_ROOTFS_WRITABLE]="yes"
    [ENROOT_TRANSFER_RETRIES]="5"
    [ENROOT_CONNECT_TIMEOUT]="30"
    [ENROOT_TRANSFER_TIMEOUT]="600"
    [ENROOT_MAX_PROCESSORS]=""
    [PYXIS_CONTAINER_SCOPE]="job"
    [PYXIS_SBATCH_SUPPORT]="1"
    [PYXIS_EXECUTE_ENTRYPOINT]="0"
    [PYXIS_USE_ENROOT_LOAD]="0"
    [PYXIS_USE_SQUASHFUSE]="1"
)

# Values are validated strictly because they end up in files that other programs evaluate: enroot
# runs `eval echo` on every enroot.conf value, and systemd parses the unit's Environment= lines.
# The same table is clusterkit_node/settings.py, which the CLI checks specs against;
# tests/node/test_settings_contract.py sources this file and compares the two key by key.
declare -gA CK_PATTERNS=(
    [CK_CLUSTER]='^[A-Za-z][A-Za-z0-9-]{0,59}$'
    [CK_OS]='^(alinux2023|ubuntu2204|ubuntu2404|rhel9)$'
    [CK_STORE]='^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$'
    [CK_BUNDLE]='^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/([A-Za-z0-9._-]+/)*[A-Za-z0-9._-]+\.zip$'
    [CK_REGION]='^[a-z]{2}(-[a-z]+)+-[0-9]+$'
    [CK_ECR_REGISTRIES]='^([0-9]{12}\.dkr\.ecr(-fips)?\.[a-z]{2}(-[a-z]+)+-[0-9]+\.amazonaws\.com(\.cn)?( +|$))*$'
    [CK_UNLOCKED_IMAGES]='^(refuse|import)$'
    [ENROOT_SQUASH_OPTIONS]='^-[A-Za-z0-9._=, -]*$'
    [ENROOT_MOUNT_HOME]='^(yes|no)$'
    [ENROOT_ROOTFS_WRITABLE]='^(yes|no)$'
    [ENROOT_TRANSFER_RETRIES]='^[0-9]{1,3}$'
    [ENROOT_CONNECT_TIMEOUT]='^[0-9]{1,5}$'
    [ENROOT_TRANSFER_TIMEOUT]='^[0-9]{1,6}$'
    [ENROOT_MAX_PROCESSORS]='^([1-9][0-9]{0,3})?$'
    [PYXIS_CONTAINER_SCOPE]='^(job|global)$'
    [PYXIS_SBATCH_SUPPORT]='^[01]$'
    [PYXIS_EXECUTE_ENTRYPOINT]='^[01]$'
    [PYXIS_USE_ENROOT_LOAD]='^[01]$'
    [PYXIS_USE_SQUASHFUSE]='^[01]$'
)

declare -gA CK_HINTS=(
    [CK_CLUSTER]="a ParallelCluster cluster name: letter first, then letters, digits, hyphens (max 60)"
    [CK_OS]="one of alinux2023, ubuntu2204, ubuntu2404, rhel9 (rhel8's python3 is too old)"
    [CK_STORE]="an absolute path whose parts are letters, digits, . _ - and do not start with a dot, e.g. /fsx/containers"
    [CK_BUNDLE]="s3://<bucket>/<sha256>.zip"
    [CK_REGION]="an AWS region such as us-east-1"
    [CK_ECR_REGISTRIES]="space-separated <12-digit account>.dkr.ecr.<region>.amazonaws.com hosts"
    [CK_UNLOCKED_IMAGES]="refuse or import (what a job's --container-image that is not in the image lock gets)"
    [ENROOT_SQUASH_OPTIONS]="mksquashfs options such as -comp zstd -Xcompression-level 3 -b 128K -no-fragments"
    [ENROOT_MOUNT_HOME]="yes or no"
    [ENROOT_ROOTFS_WRITABLE]="yes or no"
    [ENROOT_TRANSFER_RETRIES]="a whole number of retries, e.g. 5"
    [ENROOT_CONNECT_TIMEOUT]="seconds, e.g. 30"
    [ENROOT_TRANSFER_TIMEOUT]="seconds, e.g. 600 (0 = no limit)"
    [ENROOT_MAX_PROCESSORS]="empty (all CPUs) or a positive number"
    [PYXIS_CONTAINER_SCOPE]="job or global"
    [PYXIS_SBATCH_SUPPORT]="0 or 1"
    [PYXIS_EXECUTE_ENTRYPOINT]="0 or 1"
    [PYXIS_USE_ENROOT_LOAD]="0 or 1"
    [PYXIS_USE_SQUASHFUSE]="0 or 1"
)

# ck_role_keys ROLE: the keys a script accepts, sorted. CK_BUNDLE is head-node only (contract).
ck_role_keys() {
    local k
    for k in "${!CK_DEFAULTS[@]}"; do
        if [[ "$1" != head && "${k}" == CK_BUNDLE ]]; then
            continue
        fi
        printf '%s\n' "${k}"
    done | sort
}

ck_required_keys() {
    if [[ "$1" == head ]]; then
        printf '%s\n' CK_BUNDLE CK_CLUSTER CK_OS CK_REGION
    else
        printf '%s\n' CK_CLUSTER CK_OS
    fi
}

# ck_suggest KEY KNOWN...: a "did you mean" for the common slips (case, missing prefix, typo'd tail).
ck_suggest() {
    local key="$1" k upper
    shift
    upper="${key^^}"
    for k in "$@"; do
        if [[ "${upper}" == "${k}" || "CK_${upper}" == "${k}" || "ENROOT_${upper}" == "${k}" ||
            "PYXIS_${upper}" == "${k}" ]]; then
            printf '%s' "${k}"
            return 0
        fi
    done
    for k in "$@"; do
        if [[ ${#upper} -ge 6 && ("${k}" == "${upper:0:${#upper}-2}"* || "${upper}" == "${k:0:${#k}-2}"*) ]]; then
            printf '%s' "${k}"
            return 0
        fi
    done
    return 1
}

# ck_parse_args ROLE ARG...: validate KEY=VALUE Args against ROLE's keys and set one shell variable
# per key (defaults first, so nothing leaks in from the caller's environment). Exit 2 on any error.
ck_parse_args() {
    local role="$1" arg key value i=0 suggestion known_list
    local -a known=()
    local -A seen=()
    shift
    mapfile -t known < <(ck_role_keys "${role}")
    known_list="${known[*]}"
    for key in "${known[@]}"; do
        printf -v "${key}" '%s' "${CK_DEFAULTS[${key}]}"
    done
    for arg in "$@"; do
        i=$((i + 1))
        if [[ "${arg}" != *=* ]]; then
            ck_die 2 "Args[${i}] '${arg}': not KEY=VALUE (each CustomActions Args entry is one KEY=VALUE string)"
        fi
        key="${arg%%=*}"
        value="${arg#*=}"
        if [[ " ${known_list} " != *" ${key} "* ]]; then
            if [[ "${key}" == CK_BUNDLE ]]; then
                ck_die 2 "Args[${i}] ${key}: unknown key ${key} for ${CK_SCRIPT_NAME} (CK_BUNDLE is head-node only)"
            fi
            if suggestion="$(ck_suggest "${key}" "${known[@]}")"; then
                ck_die 2 "Args[${i}] ${key}: unknown key ${key} (did you mean ${suggestion}?)"
            fi
            ck_die 2 "Args[${i}] ${key}: unknown key ${key} (known keys: ${known_list})"
        fi
        if [[ -n "${seen[${key}]:-}" ]]; then
            ck_die 2 "Args[${i}] ${key}: given twice (first at Args[${seen[${key}]}]; keep one)"
        fi
        seen[${key}]="${i}"
        if [[ ! "${value}" =~ ${CK_PATTERNS[${key}]} ]]; then
            ck_die 2 "Args[${i}] ${key}=${value}: invalid value (expected ${CK_HINTS[${key}]})"
        fi
        printf -v "${key}" '%s' "${value}"
    done
    while read -r key; do
        if [[ -z "${!key}" ]]; then
            ck_die 2 "Args: missing required key ${key} (add '${key}=<${CK_HINTS[${key}]}>' to the CustomActions Args)"
        fi
    done < <(ck_required_keys "${role}")
    CK_ROLE="${role}"
}

ck_shell_quote() {
    printf "'%s'" "${1//\'/\'\\\'\'}"
}

# ck_write_node_env: /etc/clusterkit/node.env, every accepted key with its effective value.
ck_write_node_env() {
    local key content
    content="# ClusterKit node settings (${CK_SCRIPT_NAME} Args + documented defaults); shell syntax."$'\n'
    content+="# Written by the node scripts on every run; edit the cluster spec, not this file."$'\n'
    while read -r key; do
        content+="${key}=$(ck_shell_quote "${!key}")"$'\n'
    done < <(ck_role_keys "${CK_ROLE}")
    ck_ensure_dir "${CK_ROOT}/etc/clusterkit" 0755
    ck_write_file "${CK_ROOT}/etc/clusterkit/node.env" 0644 "${content}"
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
    # Users' enroot creates its own user-<uid> subdirs (umask 077), so the parents are
    # world-writable with the sticky bit, like /tmp.
    for d in "${CK_ENROOT_RUNTIME_DIR}" "${CK_ENROOT_DATA_DIR}" "${CK_ENROOT_CACHE_DIR}" "${CK_ENROOT_TEMP_DIR}"; do
        ck_ensure_dir "${CK_ROOT}${d}" 1777
        ck_assert_local_fs "${d}"
    done
    ck_log INFO "enroot working dirs on ${CK_ENROOT_MEDIUM}"
    if [[ "${CK_ENROOT_RUNTIME_DIR}" == /run/* ]]; then
        ck_log WARN "no NVMe at /scratch: container rootfs unpack into ${CK_ENROOT_DATA_DIR} on the root volume; size RootVolume for the largest image"
        # /run is a tmpfs emptied at every boot: recreate the parent before any user needs it.
        ck_ensure_dir "${CK_ROOT}/etc/tmpfiles.d" 0755
        ck_write_file "${CK_ROOT}/etc/tmpfiles.d/clusterkit-enroot.conf" 0644 \
            "# Managed by ClusterKit: enroot per-user runtime dirs live under this tmpfs parent."$'\n'"d ${CK_ENROOT_RUNTIME_DIR} 1777 root root -"
    else
        ck_remove_file "${CK_ROOT}/etc/tmpfiles.d/clusterkit-enroot.conf"
    fi
}

# ck_render_enroot_conf: /etc/enroot/enroot.conf content for the current settings and layout.
# enroot reads each "KEY value" line and runs `eval echo value` as the calling user, which is what
# makes the per-user `$(id -u)` paths work (single quotes below keep them literal here).
ck_render_enroot_conf() {
    local config_path
    # shellcheck disable=SC2016 # literal $(...) / ${...}: evaluated by enroot for each user
    config_path='${HOME:-$(echo ~)}/.config/enroot'
    if [[ -n "${CK_ECR_REGISTRIES}" ]]; then
        # enroot only reads $ENROOT_CONFIG_PATH/.credentials. Link the system-wide file there the
        # first time a user runs enroot, unless the user already has their own credentials file.
        # shellcheck disable=SC2016 # literal, evaluated by enroot for each user
        config_path='$(d="${HOME:-$(echo ~)}/.config/enroot"; if [ ! -e "$d/.credentials" ] && [ ! -L "$d/.credentials" ]; then mkdir -p "$d" && ln -s '"${CK_ENROOT_CREDENTIALS}"' "$d/.credentials"; fi >/dev/null 2>&1; echo "$d")'
    fi
    cat <<EOF
# Managed by ClusterKit (bootstrap_scripts/enroot.sh) from the node's CustomActions Args; edits are
# overwritten on the next run. Working dirs: ${CK_ENROOT_MEDIUM}; never FSx or NFS (enroot#154).
# Runtime, data and the layer cache are per user (user-\$(id -u)): enroot creates each 0700 for the
# user who runs it first, so a per-group cache locks out every other user of that group.
ENROOT_RUNTIME_PATH ${CK_ENROOT_RUNTIME_DIR}/user-\$(id -u)
ENROOT_DATA_PATH ${CK_ENROOT_DATA_DIR}/user-\$(id -u)
ENROOT_CACHE_PATH ${CK_ENROOT_CACHE_DIR}/user-\$(id -u)
ENROOT_TEMP_PATH ${CK_ENROOT_TEMP_DIR}
# Per-user config (hooks.d, mounts.d, environ.d, .credentials) in the home directory.
EOF
    if [[ -n "${CK_ECR_REGISTRIES}" ]]; then
        printf '%s\n' "# ECR: ${CK_ENROOT_CREDENTIALS} (system-wide, see enroot.sh) is linked as the user's .credentials if absent."
    fi
    printf 'ENROOT_CONFIG_PATH %s\n' "${config_path}"
    printf 'ENROOT_SQUASH_OPTIONS %s\n' "${ENROOT_SQUASH_OPTIONS}"
    if [[ -n "${ENROOT_MAX_PROCESSORS}" ]]; then
        printf 'ENROOT_MAX_PROCESSORS %s\n' "${ENROOT_MAX_PROCESSORS}"
    fi
    printf 'ENROOT_CONNECT_TIMEOUT %s\n' "${ENROOT_CONNECT_TIMEOUT}"
    printf 'ENROOT_TRANSFER_TIMEOUT %s\n' "${ENROOT_TRANSFER_TIMEOUT}"
    printf 'ENROOT_TRANSFER_RETRIES %s\n' "${ENROOT_TRANSFER_RETRIES}"
    printf 'ENROOT_MOUNT_HOME %s\n' "${ENROOT_MOUNT_HOME}"
    printf 'ENROOT_ROOTFS_WRITABLE %s\n' "${ENROOT_ROOTFS_WRITABLE}"
}

ck_write_enroot_conf() {
    ck_ensure_dir "${CK_ROOT}/etc/enroot" 0755
    ck_write_file "${CK_ROOT}/etc/enroot/enroot.conf" 0644 "$(ck_render_enroot_conf)"
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

# ck_write_ecr_credentials: system-wide enroot credentials for CK_ECR_REGISTRIES.
# Mode 0644 root:root on purpose: the file holds no secret, only a `$(aws ecr get-login-password ...)`
# command that enroot evaluates at pull time as the calling user, with that user's AWS identity (the
# instance profile). A 0600 root file would be unreadable for every user but root. It must never be
# user-writable because every user's enroot executes its password field. No comments in it: enroot
# evaluates it line by line and curl reads the result as a netrc file.
ck_write_ecr_credentials() {
    local host region content=""
    if [[ -z "${CK_ECR_REGISTRIES}" ]]; then
        ck_remove_file "${CK_ROOT}${CK_ENROOT_CREDENTIALS}"
        return 0
    fi
    for host in ${CK_ECR_REGISTRIES}; do
        region="${host#*.dkr.ecr}"
        region="${region#-fips}"
        region="${region#.}"
        region="${region%%.amazonaws.com*}"
        content+="machine ${host} login AWS password \$(aws ecr get-login-password --region ${region})"$'\n'
    done
    ck_ensure_dir "${CK_ROOT}/etc/enroot" 0755
    ck_write_file "${CK_ROOT}${CK_ENROOT_CREDENTIALS}" 0644 "${content}"
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

# ck_setup_local_enroot SLURM_SERVICE: everything node-local that both node kinds need.
ck_setup_local_enroot() {
    ck_make_enroot_dirs
    ck_write_enroot_conf
    ck_install_hooks
    ck_write_ecr_credentials
    ck_apply_os_tweaks
    ck_slurm_path_dropin "$1"
}

# ---------------------------------------------------------------------------------------------------
# Pyxis plugstack (head node only: /opt/slurm is NFS-shared to compute nodes)
# ---------------------------------------------------------------------------------------------------

# Pyxis options newer than pyxis 0.20.0 (the first pyxis on ParallelCluster AMIs) and the release ClusterKit
# writes each for (pyxis config.c). Pyxis refuses options it does not know, and with a `required` line
# that stops slurmd on every node (measured: real-runtime.md), so none is written for an older pyxis.
# importer= (0.21) and use_squashfuse (0.22) are older than 0.24.0, but starting an importer's file in
# place (pyxis_slurmstepd.c, pyxis_can_direct_start_squashfs) is what 0.24.0 does and what the tests ran.
declare -gA CK_PYXIS_OPTION_SINCE=([use_enroot_load]=0.21.0 [use_squashfuse]=0.24.0 [importer]=0.24.0)

# ck_pyxis_version SO: the version the plugin reports (the string slurmd logs as "pyxis: version vX"),
# read from the .so itself; empty when it cannot be read.
ck_pyxis_version() {
    local found
    found="$(grep -aoE 'pyxis: version v[0-9]+\.[0-9]+\.[0-9]+' -- "${CK_ROOT}$1" 2>/dev/null | head -n 1)" || true
    printf '%s' "${found##*v}"
}

# ck_version_ge A B: is version A >= version B (dotted numbers)?
ck_version_ge() {
    [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" == "$2" ]]
}

# ck_start_path: how pyxis can start containers on THIS node, measured by the node tools (clusterkit_node
# start_path.py: squashfuse and fuse-overlayfs present, /dev/fuse usable by an unprivileged user, the pyxis
# version), never assumed from the OS name. Sets CK_START_PATH=squashfuse|extract and CK_START_PATH_WHY.
ck_start_path() {
    local out line zipapp="${CK_ROOT}${CK_PYXIS_IMPORTER}"
    CK_START_PATH=extract
    CK_START_PATH_WHY=""
    if ! out="$(python3 "${zipapp}" start-path --want-squashfuse "${PYXIS_USE_SQUASHFUSE}" --os "${CK_OS}" 2>&1)"; then
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

# ck_pyxis_options SO: set CK_PYXIS_OPTIONS to the option words for the plugstack line, keeping only
# what the installed pyxis knows. An option the spec asked for (use_enroot_load) is a WARN when left
# out; ClusterKit's importer on an older pyxis is an INFO line. use_squashfuse=1 is written only when this
# node can start a .sqsh in place (ck_start_path); otherwise pyxis extracts each image onto node-local disk
# (the importer still maps locked names to store files) and one WARN line says what is missing and the fix.
ck_pyxis_options() {
    local so="$1" version opt since level
    local -a wanted=() defaults=(importer="${CK_PYXIS_IMPORTER}")
    version="$(ck_pyxis_version "${so}")"
    CK_PYXIS_OPTIONS="runtime_path=/run/pyxis container_scope=${PYXIS_CONTAINER_SCOPE} sbatch_support=${PYXIS_SBATCH_SUPPORT} execute_entrypoint=${PYXIS_EXECUTE_ENTRYPOINT}"
    if [[ -n "${version}" ]]; then
        ck_log INFO "pyxis ${version} at ${so}"
    else
        ck_log WARN "cannot read the pyxis version from ${so}: writing only the options every pyxis >= 0.20 knows"
    fi
    [[ "${PYXIS_USE_ENROOT_LOAD}" == 1 ]] && wanted+=(use_enroot_load=1)
    for opt in "${wanted[@]}" "${defaults[@]}"; do
        since="${CK_PYXIS_OPTION_SINCE[${opt%%=*}]}"
        if [[ -n "${version}" ]] && ck_version_ge "${version}" "${since}"; then
            CK_PYXIS_OPTIONS+=" ${opt}"
            continue
        fi
        level=WARN
        [[ " ${defaults[*]} " == *" ${opt} "* ]] && level=INFO
        ck_log "${level}" "pyxis ${version:-of unknown version} does not know ${opt%%=*} (ClusterKit writes it for pyxis >= ${since}): not written, so slurmd still starts$(ck_pyxis_fallback "${opt%%=*}")"
    done
    if [[ "${PYXIS_USE_SQUASHFUSE}" != 1 ]]; then
        ck_log INFO "use_squashfuse is off in the spec: pyxis extracts every image (enroot create)"
    elif [[ -z "${version}" ]] || ! ck_version_ge "${version}" "${CK_PYXIS_OPTION_SINCE[use_squashfuse]}"; then
        ck_log INFO "pyxis ${version:-of unknown version} does not know use_squashfuse (ClusterKit writes it for pyxis >= ${CK_PYXIS_OPTION_SINCE[use_squashfuse]}): not written$(ck_pyxis_fallback use_squashfuse)"
    else
        ck_start_path
        if [[ "${CK_START_PATH}" == squashfuse ]]; then
            CK_PYXIS_OPTIONS+=" use_squashfuse=1"
            ck_log INFO "containers start in place from the store (use_squashfuse=1): squashfuse and /dev/fuse checked on this node"
        else
            ck_log WARN "containers start by extraction onto node-local disk, not in place: ${CK_START_PATH_WHY}"
        fi
    fi
}

# ck_pyxis_fallback OPTION: what a node does without OPTION (for the log line).
ck_pyxis_fallback() {
    case "$1" in
    importer) printf '%s' "; registry images are imported by pyxis itself (enroot import per job)" ;;
    use_squashfuse) printf '%s' "; every container start extracts its image (enroot create)" ;;
    esac
}

ck_render_pyxis_conf() {
    printf '%s\n' "# Managed by ClusterKit head_node.sh (PYXIS_* Args, filtered for the installed pyxis). Installed atomically from outside this directory (aws-parallelcluster#6459)."
    printf 'required %s %s\n' "$1" "${CK_PYXIS_OPTIONS}"
}

# ck_install_plugstack SLURM_ETC PLUGIN_SO: plugstack.conf including plugstack.conf.d/*, and pyxis.conf
# in it. Refuses to write a `required` line for an absent plugin (slurmd and every srun/sbatch would
# refuse to start). pyxis.conf's temp file lives in SLURM_ETC, never in plugstack.conf.d, so no node
# ever includes a half-written or temp file. Sets CK_PLUGSTACK_CHANGED=yes|no.
ck_install_plugstack() {
    local etc="$1" so="$2" include_line plugstack have="" content
    CK_PLUGSTACK_CHANGED=no
    if [[ ! -f "${CK_ROOT}${so}" ]]; then
        ck_die 1 "refusing to install a 'required' plugstack line: plugin ${so} not found (it would stop slurmd and every srun/sbatch)"
    fi
    include_line="include ${etc}/plugstack.conf.d/*"
    plugstack="${CK_ROOT}${etc}/plugstack.conf"
    ck_ensure_dir "${CK_ROOT}${etc}/plugstack.conf.d" 0755
    content="# Managed by ClusterKit head_node.sh: SPANK plugins are configured in plugstack.conf.d/."$'\n'"${include_line}"$'\n'
    if [[ -f "${plugstack}" ]]; then
        IFS= read -r -d '' have <"${plugstack}" || true
        if [[ $'\n'"${have}" == *$'\n'"${include_line}"$'\n'* ]]; then
            content="${have}"
        elif [[ -n "${have//[[:space:]]/}" ]]; then
            # Keep whatever a site configured and add our include.
            [[ "${have}" == *$'\n' ]] || have+=$'\n'
            content="${have}${include_line}"$'\n'
        fi
    fi
    ck_write_file "${plugstack}" 0644 "${content}"
    [[ "${CK_LAST_CHANGED}" == yes ]] && CK_PLUGSTACK_CHANGED=yes
    ck_pyxis_options "${so}"
    ck_write_file "${CK_ROOT}${etc}/plugstack.conf.d/pyxis.conf" 0644 "$(ck_render_pyxis_conf "${so}")" "${CK_ROOT}${etc}"
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
