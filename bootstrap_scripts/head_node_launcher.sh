#!/usr/bin/env bash
# ClusterKit head-node launcher: the HeadNode OnNodeUpdated action, and what stage 0 runs at OnNodeConfigured.
#
# It reads the S3 URI of the current bootstrap bundle from an SSM parameter the Cluster stack keeps up
# to date, unpacks it, and runs the bundle's head_node.sh with the cluster settings from the bundle's
# node.args. OnNodeUpdated passes CK_BUNDLE_SHA256 as well, only so that a new bundle changes the config
# and ParallelCluster runs this again; the launcher checks the downloaded bundle against it.
# OnNodeConfigured (never updatable) runs head_node_stage0.sh instead, which runs the copy of this file
# inside the current bundle: so this file may change without touching an UNSUPPORTED field.
#
# Clusters written by `clusterkit export` (for the pcluster CLI) have no SSM parameter: they pass
# CK_BUNDLE_URI, a stable S3 key that `export --upload` overwrites with each new bundle.
#
# Args (KEY=VALUE): CK_REGION, CK_BUNDLE_PARAMETER or CK_BUNDLE_URI, optional CK_BUNDLE_SHA256.
set -euo pipefail

CK_ROOT="${CK_ROOT:-}"
LOG_FILE="${CK_ROOT}/var/log/clusterkit/bootstrap.log"
WORK_DIR=""  # global: the EXIT trap runs after main's locals are gone

log() {
  local line
  line="$(date -u +%Y-%m-%dT%H:%M:%SZ) launcher: $*"
  mkdir -p "$(dirname "$LOG_FILE")"
  printf '%s\n' "$line" | tee -a "$LOG_FILE"
}

die() {
  log "ERROR: $*"
  exit "${2:-1}"
}

parse_args() {
  local arg
  CK_REGION="" CK_BUNDLE_PARAMETER="" CK_BUNDLE_URI="" CK_BUNDLE_SHA256=""
  for arg in "$@"; do
    case "$arg" in
      CK_REGION=*) CK_REGION="${arg#*=}" ;;
      CK_BUNDLE_PARAMETER=*) CK_BUNDLE_PARAMETER="${arg#*=}" ;;
      CK_BUNDLE_URI=*) CK_BUNDLE_URI="${arg#*=}" ;;
      CK_BUNDLE_SHA256=*) CK_BUNDLE_SHA256="${arg#*=}" ;;
      *) die "unknown argument '${arg%%=*}' (expected CK_REGION, CK_BUNDLE_PARAMETER|CK_BUNDLE_URI, CK_BUNDLE_SHA256)" 2 ;;
    esac
  done
  [[ -n "$CK_REGION" ]] || die "missing argument CK_REGION" 2
  if [[ -n "$CK_BUNDLE_PARAMETER" && -n "$CK_BUNDLE_URI" ]] || [[ -z "$CK_BUNDLE_PARAMETER$CK_BUNDLE_URI" ]]; then
    die "give exactly one of CK_BUNDLE_PARAMETER and CK_BUNDLE_URI" 2
  fi
}

bundle_uri() {
  if [[ -n "$CK_BUNDLE_URI" ]]; then
    printf '%s\n' "$CK_BUNDLE_URI"
    return
  fi
  aws ssm get-parameter --region "$CK_REGION" --name "$CK_BUNDLE_PARAMETER" \
    --query Parameter.Value --output text
}

main() {
  parse_args "$@"
  command -v aws >/dev/null || die "the aws CLI is missing (official ParallelCluster AMIs ship it)"
  local uri sha
  uri="$(bundle_uri)" || die "cannot read SSM parameter $CK_BUNDLE_PARAMETER in $CK_REGION"
  [[ "$uri" == s3://* ]] || die "bundle location '$uri' (from ${CK_BUNDLE_PARAMETER:-CK_BUNDLE_URI}) is not an s3:// URI"
  WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/clusterkit-launch.XXXXXX")"
  trap 'rm -rf "${WORK_DIR:-}"' EXIT
  local work="$WORK_DIR"
  aws s3 cp --only-show-errors --region "$CK_REGION" "$uri" "$work/bundle.zip" || die "cannot download $uri"
  sha="$(sha256sum "$work/bundle.zip" | cut -d' ' -f1)"
  if [[ -n "$CK_BUNDLE_SHA256" && "$sha" != "$CK_BUNDLE_SHA256" ]]; then
    die "bundle $uri has sha256 $sha, the cluster config expects $CK_BUNDLE_SHA256 (a newer deploy in flight?)"
  fi
  python3 -m zipfile -e "$work/bundle.zip" "$work/bundle" || die "bundle $uri is not a valid zip"
  [[ -f "$work/bundle/head_node.sh" && -f "$work/bundle/node.args" ]] || die "bundle $uri lacks head_node.sh or node.args"
  local -a settings=()
  mapfile -t settings < "$work/bundle/node.args"
  log "bundle $uri (sha256 $sha): running head_node.sh"
  bash "$work/bundle/head_node.sh" "CK_BUNDLE=$uri" "${settings[@]}"
}

main "$@"
