#!/usr/bin/env bash
# ClusterKit head-node stage 0: the HeadNode OnNodeConfigured action. FROZEN: do not edit.
#
# ParallelCluster never lets HeadNode OnNodeConfigured change once a cluster exists (update policy
# UNSUPPORTED), and this file's S3 key is its content hash: one changed byte would block every update
# of every existing cluster. So it does the least that never needs to change: find the current bootstrap
# bundle (SSM parameter CK_BUNDLE_PARAMETER, or the stable key CK_BUNDLE_URI), unpack it, and run the
# bundle's head_node_launcher.sh with the same Args. Everything else lives in the bundle and may change.
# clusterkit/bundle.py pins this file's sha256 (STAGE0_SHA256).
set -euo pipefail

CK_ROOT="${CK_ROOT:-}"
LOG_FILE="${CK_ROOT}/var/log/clusterkit/bootstrap.log"
WORK_DIR=""

log() {
  mkdir -p "$(dirname "$LOG_FILE")"
  printf '%s stage0: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" | tee -a "$LOG_FILE"
}

die() {
  log "ERROR: $1"
  exit "${2:-1}"
}

main() {
  local arg region="" parameter="" uri=""
  for arg in "$@"; do
    case "$arg" in
      CK_REGION=*) region="${arg#*=}" ;;
      CK_BUNDLE_PARAMETER=*) parameter="${arg#*=}" ;;
      CK_BUNDLE_URI=*) uri="${arg#*=}" ;;
    esac
  done
  [[ -n "$region" ]] || die "missing argument CK_REGION" 2
  [[ -n "$parameter$uri" ]] || die "missing argument CK_BUNDLE_PARAMETER or CK_BUNDLE_URI" 2
  command -v aws >/dev/null || die "the aws CLI is missing (official ParallelCluster AMIs ship it)"
  if [[ -z "$uri" ]]; then
    uri="$(aws ssm get-parameter --region "$region" --name "$parameter" --query Parameter.Value --output text)" \
      || die "cannot read SSM parameter $parameter in $region"
  fi
  [[ "$uri" == s3://* ]] || die "bundle location '$uri' is not an s3:// URI"
  WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/clusterkit-stage0.XXXXXX")"
  trap 'rm -rf "${WORK_DIR:-}"' EXIT
  aws s3 cp --only-show-errors --region "$region" "$uri" "$WORK_DIR/bundle.zip" || die "cannot download $uri"
  python3 -m zipfile -e "$WORK_DIR/bundle.zip" "$WORK_DIR/bundle" || die "bundle $uri is not a valid zip"
  [[ -f "$WORK_DIR/bundle/head_node_launcher.sh" ]] || die "bundle $uri has no head_node_launcher.sh"
  log "bundle $uri: running its head_node_launcher.sh"
  bash "$WORK_DIR/bundle/head_node_launcher.sh" "$@"
}

main "$@"
