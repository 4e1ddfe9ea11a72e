#!/usr/bin/env bash
# ClusterKit login node: what login_node_stage0.sh (the login pools' frozen CustomActions) runs, from the bundle.
#
# A login node gets the compute nodes' own setup, by the same scripts with the role Arg CK_NODE_ROLE=login
# (compute_node_start.sh, compute_node_configured.sh): enroot.conf, enroot's dirs, hooks and ECR credentials as on a
# compute node, and the checks that `srun/sbatch --container-image` from here needs (the pyxis plugin and the
# NFS-shared plugstack line, which srun loads on this node). The cluster's settings come from this bundle's
# compute.args (what the compute nodes get as Args), so the pool's CustomActions carry no value that changes.
#
# Usage: login_node.sh start|configured
set -euo pipefail

here="${BASH_SOURCE[0]%/*}"
case "${1:-}" in
start | configured) ;;
*)
    printf 'login_node.sh: usage: login_node.sh start|configured (got: %s)\n' "$*" >&2
    exit 2
    ;;
esac
mapfile -t settings <"${here}/compute.args"
exec bash "${here}/compute_node_${1}.sh" CK_NODE_ROLE=login "${settings[@]}"
