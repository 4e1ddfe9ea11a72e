"""The image lock: pin every image the cluster spec names to one platform manifest digest.

`resolve_lock` asks registries (ECR private through boto3, everything else through registry.py) and
returns the lock; `offline_lock` locks only what the spec already pins; `staleness` says, without any
network, whether a committed lock still matches the spec so render/validate can refuse a stale one and
name the command that fixes it. The lock's model and rules: clusterkit_node.contract.lock; its file: lock_file.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from clusterkit.images.ref import ImageRef, ImageRefError, parse_image_ref
from clusterkit.images.registry import (
    ACCEPTED_MEDIA_TYPES,
    DEFAULT_TIMEOUT_S,
    Manifest,
    Platform,
    RegistryClient,
    RegistryError,
    RegistryUnreachable,
    ResolvedImage,
    credentials_from_env,
    parse_manifest,
    parse_platform,
    resolve_image,
)
from clusterkit.spec.errors import ClusterKitError
from clusterkit_node.contract.lock import LOCK_VERSION, ImageLock, LockedImage
from clusterkit_node.image.declared_versions import NOTHING_DECLARED, declared_versions
from clusterkit_node.image.nvidia_hook import nvidia_settings


@dataclass(frozen=True)
class ImageSpec:
    """What the cluster spec declares for one image (the spec model converts its entries to this)."""

    name: str
    uri: str
    expect: dict[str, str]


class LockResolveError(ClusterKitError):
    """Some images could not be resolved; one line per image so the user fixes them all in one go.

    ``exit_code`` (clusterkit.cli.boundary): 3 when every failure is a registry that did not answer (retry later;
    the spec may be right), else 2 (a user error: a wrong name, tag or platform)."""

    def __init__(self, problems: list[str], *, unreachable_only: bool = False):
        super().__init__("\n".join(problems))
        self.problems = list(problems)
        self.exit_code = 3 if unreachable_only and problems else 2

    def lines(self) -> list[str]:
        return list(self.problems)


def _fix(cluster: str) -> str:
    return f"(run `make lock CLUSTER={cluster}`)"


# -- resolving ---------------------------------------------------------------------------------------


def resolve_lock(
    cluster: str,
    images: list[ImageSpec],
    platform: str,
    *,
    ecr_client_factory: Callable[[str], Any] | None = None,
    registry_client: RegistryClient | None = None,
    progress: Callable[[str], None] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ImageLock:
    """Ask the registries for every image; raise LockResolveError listing every failure.

    `ecr_client_factory(region)` returns a boto3 ECR client (default: boto3.client("ecr", region_name=...)),
    called once per region that private ECR images live in. `progress` gets one line per resolved image, and
    one for each registry request still unanswered after a few seconds (naming the host; `timeout` ends it).
    """
    target = parse_platform(platform)
    problems: list[str] = []
    unreachable = 0
    seen: set[str] = set()
    for spec in images:
        if spec.name in seen:
            problems.append(f"image '{spec.name}' is declared twice (image names must be unique)")
        seen.add(spec.name)
    ecr_clients: dict[str, Any] = {}
    entries: list[LockedImage] = []
    for spec in sorted(images, key=lambda s: s.name):
        try:
            ref = parse_image_ref(spec.uri)
        except ImageRefError as err:
            problems.append(f"image '{spec.name}': {err}")
            continue
        try:
            if ref.is_ecr_private:
                if registry_client is None:
                    registry_client = RegistryClient(credentials=credentials_from_env(), timeout=timeout,
                                                     on_wait=progress)
                region = ref.ecr_account_region[1]  # type: ignore[index]
                if region not in ecr_clients:
                    ecr_clients[region] = (ecr_client_factory or _default_ecr_client)(region)
                resolved = _resolve_ecr(ref, target, ecr_clients[region], registry_client)
            else:
                if registry_client is None:
                    registry_client = RegistryClient(credentials=credentials_from_env(), timeout=timeout,
                                                     on_wait=progress)
                resolved = registry_client.resolve(ref, target)
        except RegistryError as err:
            unreachable += isinstance(err, RegistryUnreachable)
            problems.append(f"image '{spec.name}': {err}")
            continue
        if ref.digest and ref.digest not in (resolved.digest, resolved.index_digest):
            problems.append(f"image '{spec.name}': resolved {resolved.digest}, not the pinned {ref.digest}")
            continue
        declared = declared_versions(resolved.env)
        entries.append(dataclasses.replace(
            locked_image(spec, ref, str(target), resolved.digest, resolved.compressed_size), declared=declared,
            declared_from="image config Env" if declared else NOTHING_DECLARED,
            nvidia=nvidia_settings(resolved.env), nvidia_from=NVIDIA_READ))
        if progress is not None:
            size = f"{resolved.compressed_size / 1e9:.2f} GB" if resolved.compressed_size else "size unknown"
            progress(f"{cluster}: {spec.name} {spec.uri} -> {resolved.digest} ({size})")
    if problems:
        raise LockResolveError(problems, unreachable_only=unreachable == len(problems))
    return ImageLock(cluster=cluster, images=tuple(entries), lock_version=LOCK_VERSION)


OFFLINE_NOT_READ = ("not read: an offline lock asks no registry for the image config (run `make lock` with registry "
                    "access); the head node reads the versions from the layers at import")


NVIDIA_READ = "image config Env"  # also when it sets no NVIDIA_* variable: then the hook gives the image no GPU
NVIDIA_NOT_READ = ("not read: an offline lock asks no registry for the image config (run `make lock` with registry "
                   "access); the head node reads the NVIDIA_* settings from the image at import")


def offline_lock(cluster: str, images: list[ImageSpec], platform: str, *, online: str) -> ImageLock:
    """A lock without registry calls: only images the spec pins by digest, sizes unknown (null); ``online``: the
    command that locks the spec with registry access (spec.files.lock_command), for the one that needs it."""
    entries = []
    for spec in images:
        ref = parse_image_ref(spec.uri)
        if ref.digest is None:
            raise ClusterKitError(f"{cluster}: image '{spec.name}' ({spec.uri}) has no @sha256 digest; "
                                  f"offline locking needs one (or run `{online}` with registry access)")
        entries.append(dataclasses.replace(locked_image(spec, ref, str(parse_platform(platform)), ref.digest, None),
                                           declared_from=OFFLINE_NOT_READ, nvidia_from=NVIDIA_NOT_READ))
    return ImageLock(cluster=cluster, images=tuple(entries), lock_version=LOCK_VERSION)


def relocks_offline(lock: ImageLock | None, images: Iterable[ImageSpec]) -> bool:
    """Whether the command that fixes this lock is ``lock --offline``: the lock was written offline (no entry was
    read from a registry), so the user may have none, and every spec image is pinned by digest, which offline
    locking needs."""
    if lock is None or not lock.images or any(entry.declared_from != OFFLINE_NOT_READ for entry in lock.images):
        return False
    return all(_pinned_digest(spec.uri) for spec in images)


def locked_image(spec: ImageSpec, ref: ImageRef, platform: str, digest: str, size: int | None) -> LockedImage:
    """The lock entry of one spec image pinned to ``digest`` (every derived field from ``ref``)."""
    return LockedImage(name=spec.name, source=spec.uri, registry=ref.registry, repository=ref.repository,
                       digest=digest, enroot_uri=ref.enroot_uri(digest), platform=platform,
                       compressed_size=size, expect=dict(spec.expect))


def _default_ecr_client(region: str) -> Any:
    import boto3  # imported here: spec validation and render never need boto3

    return boto3.client("ecr", region_name=region)


def _resolve_ecr(ref: ImageRef, platform: Platform, ecr: Any, http: RegistryClient) -> ResolvedImage:
    """ECR private: manifests via BatchGetImage, the config blob via GetDownloadUrlForLayer (presigned).

    imageId.imageDigest plays the role of Docker-Content-Digest: parse_manifest checks it against the
    sha256 of the returned manifest text, so the lock's digest is both ECR's and the bytes'.
    """
    account, region = ref.ecr_account_region  # type: ignore[misc]

    def fetch_manifest(reference: str) -> Manifest:
        label = ref.with_reference(reference)
        image_id = {"imageDigest": reference} if reference.startswith("sha256:") else {"imageTag": reference}
        try:
            response = ecr.batch_get_image(
                registryId=account,
                repositoryName=ref.repository,
                imageIds=[image_id],
                acceptedMediaTypes=list(ACCEPTED_MEDIA_TYPES),
            )
        except Exception as err:  # botocore errors: turned into one line, anything else re-raised
            raise RegistryError(_aws_error(label, ref, region, err)) from None
        found = response.get("images") or []
        if not found:
            failures = response.get("failures") or [{}]
            code = failures[0].get("failureCode") or "ImageNotFound"
            reason = failures[0].get("failureReason") or "image not found"
            raise RegistryError(f"{label}: {reason} ({code} in ECR {region}; check the tag or digest)")
        image = found[0]
        text = image.get("imageManifest")
        if not isinstance(text, str):
            raise RegistryError(f"{label}: ECR returned no manifest text")
        return parse_manifest(
            label,
            text.encode("utf-8"),
            content_type=image.get("imageManifestMediaType"),
            header_digest=(image.get("imageId") or {}).get("imageDigest"),
            expected_digest=reference if reference.startswith("sha256:") else None,
        )

    def fetch_config(digest: str) -> bytes:
        label = ref.with_reference(digest)
        try:
            response = ecr.get_download_url_for_layer(
                registryId=account, repositoryName=ref.repository, layerDigest=digest
            )
        except Exception as err:
            raise RegistryError(_aws_error(label, ref, region, err)) from None
        return http.get_url(response["downloadUrl"], label)

    return resolve_image(ref, platform, fetch_manifest, fetch_config)


def _aws_error(label: str, ref: ImageRef, region: str, err: Exception) -> str:
    import botocore.exceptions as bce

    if isinstance(err, bce.NoCredentialsError):
        return f"{label}: no AWS credentials for ECR (configure a profile or set AWS_PROFILE)"
    if isinstance(err, bce.ClientError):
        code = err.response.get("Error", {}).get("Code", "")
        message = err.response.get("Error", {}).get("Message", "")
        if code == "RepositoryNotFoundException":
            return f"{label}: repository '{ref.repository}' does not exist in ECR {region} (create it or fix the name)"
        if code in ("AccessDeniedException", "AccessDenied"):
            return (
                f"{label}: access denied by ECR {region} (the AWS identity needs ecr:BatchGetImage and "
                "ecr:GetDownloadUrlForLayer)"
            )
        return f"{label}: ECR {code}: {message} (region {region})"
    if isinstance(err, bce.BotoCoreError):
        return f"{label}: ECR request failed ({err}) (check network access and the AWS configuration)"
    raise err


# -- staleness ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unsettled:
    """What the spec's own errors leave unsettled, so the lock is not compared on it: such a line would only follow
    from the error, and ``lock`` could not fix it (it refuses a spec with errors). One line per cause."""

    name: bool = False  # the cluster's name
    platform: bool = False  # an instance type: the image platform it decides
    images: frozenset[str] = frozenset()  # the names of image entries that have errors
    image_names: bool = False  # an image's name itself is wrong (a duplicate, a typo): matching by name says nothing


def staleness(lock: ImageLock | None, cluster: str, images: Iterable[ImageSpec], platform: str, *,
              fix_command: str | None = None, unsettled: Unsettled = Unsettled()) -> list[str]:
    """Why the lock does not match the spec (no network): [] when it does (``drift``'s lines)."""
    return [text for _, text in drift(lock, cluster, images, platform, fix_command=fix_command, unsettled=unsettled)]


def drift(lock: ImageLock | None, cluster: str, images: Iterable[ImageSpec], platform: str, *,
          fix_command: str | None = None, unsettled: Unsettled = Unsettled()) -> list[tuple[str | None, str]]:
    """Why the lock does not match the spec, one line per cause, each with the spec image it is about (None: the
    lock or the fleet as a whole), so the line can point at that entry.

    A spec uri pinned with @sha256 must equal the locked digest, except when the lock was resolved from
    that very text (same `source`): a pin to a manifest list locks the platform manifest's digest, which
    the lock format cannot tell apart from a hand edit, and resolve_lock has already verified that case.
    """
    fix = f"(run `{fix_command}`)" if fix_command else _fix(cluster)
    if lock is None:
        return [(None, f"no image lock for cluster '{cluster}' {fix}")]
    target = str(parse_platform(platform))
    problems: list[tuple[str | None, str]] = []
    if lock.cluster != cluster and not unsettled.name:
        problems.append((None, f"image lock is for cluster '{lock.cluster}', not '{cluster}' {fix}"))
    if unsettled.image_names:
        return problems
    locked = {entry.name: entry for entry in lock.images}
    specs = sorted(images, key=lambda s: s.name)
    elsewhere = []  # images locked for another platform: one cause (the fleet's architecture), one line
    for spec in specs:
        if spec.name in unsettled.images:
            continue
        entry = locked.get(spec.name)
        if entry is None:
            problems.append((spec.name, f"image '{spec.name}' is in the spec but not in the lock {fix}"))
            continue
        if entry.platform != target and not unsettled.platform:
            elsewhere.append(entry)
        reasons = _entry_drift(spec, entry)  # one edit of the entry, one relock: one line
        if reasons:
            problems.append((spec.name, f"image '{spec.name}': {'; '.join(reasons)} {fix}"))
    if elsewhere:
        names = ", ".join(f"'{e.name}'" for e in elsewhere)
        platforms = ", ".join(sorted({e.platform for e in elsewhere}))
        problems.append((None, f"image{'s' if len(elsewhere) > 1 else ''} {names} locked for {platforms}, the "
                               f"cluster runs {target} {fix}"))
    for name in sorted(set(locked) - {spec.name for spec in specs} - unsettled.images):
        problems.append((None, f"image '{name}' is in the lock but not in the spec {fix}"))
    return problems


def _entry_drift(spec: ImageSpec, entry: LockedImage) -> list[str]:
    """How one spec image differs from its lock entry (the platform aside: that is the fleet's, not the entry's)."""
    reasons = []
    pinned = _pinned_digest(spec.uri)
    if entry.source != spec.uri:
        if pinned and pinned != entry.digest:
            reasons.append(f"pinned digest {pinned} is not the locked digest {entry.digest}")
        else:
            reasons.append(f"uri '{spec.uri}' differs from the locked source '{entry.source}'")
    else:
        inconsistency = _entry_inconsistency(entry)
        if inconsistency:
            reasons.append(inconsistency)
    if entry.expect != dict(spec.expect):
        reasons.append(f"expect {_compact(spec.expect)} differs from the locked {_compact(entry.expect)}")
    return reasons


def _pinned_digest(uri: str) -> str | None:
    try:
        return parse_image_ref(uri).digest
    except ImageRefError:
        return None  # spec validation reports the bad uri; here it only differs from the lock


def _entry_inconsistency(entry: LockedImage) -> str | None:
    """Locked fields that do not follow from source + digest: a hand edit the lock must not hide."""
    try:
        ref = parse_image_ref(entry.source)
    except ImageRefError as err:
        return f"locked source is invalid ({err})"
    if (entry.registry, entry.repository) != (ref.registry, ref.repository):
        return f"locked registry/repository {entry.registry}/{entry.repository} do not match the source"
    if entry.enroot_uri != ref.enroot_uri(entry.digest):
        return f"locked enroot_uri {entry.enroot_uri} does not match the source and digest"
    return None


def _compact(expect: dict[str, str]) -> str:
    return json.dumps(expect, sort_keys=True, separators=(",", ":"))
