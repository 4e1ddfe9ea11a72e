# shellcheck shell=bash disable=SC2034
# (SC2034: variables set here, e.g. CK_PLUGSTACK_CHANGED, are read by the scripts that source this file.)
# ClusterKit node functions: sourced (never executed) by head_node.sh, compute_node_start.sh and
# compute_node_configured.sh. It ships inside the bundle zip; the head node installs the bundle under
# /opt/parallelcluster/shared/clusterkit/ (NFS-shared), so compute nodes source it without downloading.
#
# Bash keeps the logging, the mounts, sysctl, systemctl and scontrol, and the order of the steps; every decision,
# parse, check and render is the node tools' (clusterkit_node.pyz next to this file; clusterkit_node/node/): the
# Args against the one settings table (args.py), which dirs and files a node gets with which content and mode
# (enroot_files.py, slurm_prolog.py, pyxis_files.py), written atomically and only when they differ (file_set.py),
# so a second run changes nothing. Paths go through ${CK_ROOT} (empty on a real node; a throwaway root in tests).

CK_ROOT="${CK_ROOT:-}"
CK_LOG_FILE="${CK_LOG_FILE:-${CK_ROOT}/var/log/clusterkit/bootstrap.log}"
CK_SCRIPT_NAME="${CK_SCRIPT_NAME:-${0##*/}}"
CK_LAST_CHANGED=no
CK_SYSTEMD_DIRTY=no
CK_PLUGSTACK_CHANGED=no
# The node tools: the zipapp of the bundle this file came with (the head node calls them before that bundle is
# live, so not through /opt/parallelcluster/shared/clusterkit). CK_ZIPAPP overrides it (tests).
CK_ZIPAPP="${CK_ZIPAPP:-${BASH_SOURCE[0]%/*}/clusterkit_node.pyz}"
CK_ARGS=()

readonly CK_PYXIS_SO="/usr/local/lib/slurm/spank_pyxis.so"
readonly CK_SLURM_ETC="/opt/slurm/etc"
readonly CK_SLURM_BIN="/opt/slurm/bin"

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

# ck_compute_prologue ARG...: how both compute scripts begin once they sourced this file (their own lines
# before it only find the bundle): the start line, the Args checked into node.env.
ck_compute_prologue() {
    ck_log INFO "start (args: $*)"
    ck_parse_args compute "$@"
    ck_write_node_env
}

# ---------------------------------------------------------------------------------------------------
# The node tools (python3 is on every supported AMI: the zipapp needs >= 3.9)
# ---------------------------------------------------------------------------------------------------

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

# ck_node_apply COMMAND ARG...: a node-tools command that acts on this node (clusterkit_node/node/file_set.py) and
# prints what it did, in order: "LEVEL message" lines, logged here (this script's name and time), and "@marker"
# lines for what bash does. Exits with the command's status after its ERROR line.
ck_node_apply() {
    local out line rc=0 told=no
    CK_LAST_CHANGED=no
    out="$(ck_node_tool "$@")" || rc=$?
    while IFS= read -r line; do
        case "${line}" in
        "") ;;
        @changed) CK_LAST_CHANGED=yes ;;
        @systemd-dirty) CK_SYSTEMD_DIRTY=yes ;;
        @plugstack-changed) CK_PLUGSTACK_CHANGED=yes ;;
        @restart-sync) CK_SYNC_RESTART=yes ;;
        "@sync-inputs "*) CK_SYNC_INPUTS="${line#@sync-inputs }" ;;
        "@sysctl /etc/sysctl.d/"*) sysctl -q -e -p "${CK_ROOT}${line#@sysctl }" ;;
        "ERROR "*) told=yes; ck_log ERROR "${line#ERROR }" ;;
        *) ck_log "${line%% *}" "${line#* }" ;;
        esac
    done <<<"${out}"
    if ((rc != 0)); then
        [[ "${told}" == yes ]] || ck_die 1 "the node tools failed: ${1} (${CK_ZIPAPP} exit ${rc})"
        exit "${rc}"
    fi
}

# ck_node_setup COMMAND ARG...: ck_node_apply for a command that reads the node's Args (parsed again there).
ck_node_setup() {
    local command="$1"
    shift
    ck_node_apply "${command}" "$@" --role "${CK_ROLE}" --script "${CK_SCRIPT_NAME}" -- "${CK_ARGS[@]}"
}

# ---------------------------------------------------------------------------------------------------
# Idempotent, atomic files (file_set.py): paths with ${CK_ROOT}, as head_node.sh passes them. Set CK_LAST_CHANGED.
# ---------------------------------------------------------------------------------------------------

# ck_ensure_dir DIR MODE: create (with parents) and fix the mode; no-op when already right.
ck_ensure_dir() {
    ck_node_apply node-file dir "${1#"${CK_ROOT}"}" "$2"
}

# ck_write_file TARGET MODE CONTENT [TMPDIR]: CONTENT (a trailing newline ensured) through a temp file in TMPDIR
# (default: TARGET's directory) renamed over TARGET; nothing when content and mode already match.
ck_write_file() {
    ck_node_apply node-file write "${1#"${CK_ROOT}"}" "$2" ${4:+--tmpdir "${4#"${CK_ROOT}"}"} < <(printf '%s' "$3")
}

ck_remove_file() {
    ck_node_apply node-file remove "${1#"${CK_ROOT}"}"
}

# ck_write_node_env: /etc/clusterkit/node.env, every accepted key with its effective value.
ck_write_node_env() {
    ck_ensure_dir "${CK_ROOT}/etc/clusterkit" 0755
    ck_write_file "${CK_ROOT}/etc/clusterkit/node.env" 0644 "${CK_NODE_ENV}"
}

# ---------------------------------------------------------------------------------------------------
# The node's enroot and pyxis files: what and why in clusterkit_node/node/ (preflight.py, enroot_files.py,
# slurm_prolog.py, pyxis_files.py); bash measures the mounts and runs sysctl, systemctl and scontrol.
# ---------------------------------------------------------------------------------------------------

# ck_require_enroot [WITH_PYXIS]: exit 1 naming every missing piece and the PC version that ships it.
ck_require_enroot() {
    ck_node_apply require-enroot --path "${PATH}" ${1:+--with-pyxis}
}

# ck_setup_local_enroot [SLURM_SERVICE]: everything node-local that every node kind needs; the Slurm daemon's PATH
# drop-in where one runs (none on a login node: no slurmd there, and srun needs no enroot hook); and the squashfuse
# enroot runs for in-place starts: the node's multi-threaded squashfuse_ll when it has one (squashfuse_reader.py),
# before anything measures the start path.
ck_setup_local_enroot() {
    local -a opts=()
    if mountpoint -q "${CK_ROOT}/scratch"; then
        opts+=(--scratch-mounted)
    fi
    ck_node_setup enroot-files "${opts[@]}" ${1:+--slurm-service "$1"}
    ck_node_apply squashfuse-reader
}

# ck_lock_imds: on a compute node, instance metadata (and so the compute role) for root only, now and at every boot
# (security.compute_imds; clusterkit_node/node/imds_lock.py); login nodes are ParallelCluster's to lock.
ck_lock_imds() {
    ck_node_apply imds-lock --mode "${CK_COMPUTE_IMDS}" --role "${CK_NODE_ROLE}"
    ck_systemd_reload_if_dirty
}

ck_systemd_reload_if_dirty() {
    if [[ "${CK_SYSTEMD_DIRTY}" == yes ]]; then
        systemctl daemon-reload
        CK_SYSTEMD_DIRTY=no
    fi
}

# ck_install_prolog: the Slurm prolog that makes the job user's enroot dirs before any step runs (head node).
ck_install_prolog() {
    ck_node_apply slurm-prolog
}

# ck_install_plugstack SLURM_ETC PLUGIN_SO: plugstack.conf including plugstack.conf.d/*, and pyxis.conf in it
# (head node only: /opt/slurm is NFS-shared). Sets CK_PLUGSTACK_CHANGED=yes|no.
ck_install_plugstack() {
    CK_PLUGSTACK_CHANGED=no
    ck_node_setup pyxis-files --etc "$1" --so "$2"
}

# ck_slurm_cmd NAME: PC's Slurm lives in /opt/slurm/bin, which is not always on root's PATH.
ck_slurm_cmd() {
    if [[ -x "${CK_ROOT}${CK_SLURM_BIN}/$1" ]]; then
        printf '%s' "${CK_ROOT}${CK_SLURM_BIN}/$1"
    else
        printf '%s' "$1"
    fi
}

# ck_plugstack_loads SLURM_ETC PLUGIN_SO: the plugin is on this node and plugstack.conf loads it, or exit 1 saying so.
ck_plugstack_loads() {
    ck_node_apply plugstack-loads --etc "$1" --so "$2"
}
