#!/usr/bin/env bash
# ClusterKit head-node launcher: the HeadNode OnNodeUpdated action, and what stage 0 runs at OnNodeConfigured.
#
# At OnNodeConfigured (stage 0 runs it with the stable Args) it reads the S3 URI of the current bootstrap
# bundle from an SSM parameter the Cluster stack keeps up to date, unpacks it, and runs the bundle's
# head_node.sh with the cluster settings from the bundle's node.args.
# At OnNodeUpdated the config names the bundle by content: CK_BUNDLE_URI is the bundle's content-addressed
# key and CK_BUNDLE_SHA256 its hash (clusterkit/render/pcluster_config.py). A new bundle changes the Args, so
# ParallelCluster runs this again; and when a failed update rolls back, the re-run with the previous Args
# installs exactly the previous bundle, whatever the parameter says by then (docs/operations.md, "Rollback").
# OnNodeConfigured (never updatable) runs head_node_stage0.sh instead, which runs the copy of this file
# inside the current bundle: so this file may change without touching an UNSUPPORTED field.
#
# Clusters written by `clusterkit export` (for the pcluster CLI) have no SSM parameter: their stable
# Args name CK_BUNDLE_URI, a stable S3 key that `export --upload` overwrites with each new bundle.
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

# content_key SHA256: the object name CDK (and `export --upload`) give a bundle with that hash: CDK re-hashes a
# custom asset hash, so sha256 of the hex digest, plus .zip (clusterkit/artifacts/bundle.py Artifact.key).
content_key() {
  printf '%s.zip\n' "$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)"
}

# check_sha URI SHA: the downloaded bundle must be the one the config names. A content-addressed key with other
# bytes was overwritten; a stable place (the parameter, export's stable key) naming another bundle means a deploy
# changed it after this config was written.
check_sha() {
  local uri="$1" sha="$2"
  [[ -z "$CK_BUNDLE_SHA256" || "$sha" == "$CK_BUNDLE_SHA256" ]] && return 0
  if [[ "${uri##*/}" == "$(content_key "$CK_BUNDLE_SHA256")" ]]; then
    die "bundle $uri has sha256 $sha, not $CK_BUNDLE_SHA256 as its content-addressed key says (object overwritten? redeploy with 'clusterkit deploy')"
  fi
  die "bundle $uri (from ${CK_BUNDLE_PARAMETER:-CK_BUNDLE_URI}) has sha256 $sha, the cluster config expects $CK_BUNDLE_SHA256 (a newer deploy in flight? wait for it, or rerun 'clusterkit deploy')"
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
  check_sha "$uri" "$sha"
  python3 -m zipfile -e "$work/bundle.zip" "$work/bundle" || die "bundle $uri is not a valid zip"
  [[ -f "$work/bundle/head_node.sh" && -f "$work/bundle/node.args" ]] || die "bundle $uri lacks head_node.sh or node.args"
  local -a settings=()
  mapfile -t settings < "$work/bundle/node.args"
  log "bundle $uri (sha256 $sha): running head_node.sh"
  bash "$work/bundle/head_node.sh" "CK_BUNDLE=$uri" "${settings[@]}"
}

main "$@"
