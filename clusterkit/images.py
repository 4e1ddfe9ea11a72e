"""The image lock: pin every image the cluster spec names to one platform manifest digest.

`resolve_lock` asks registries (ECR private through boto3, everything else through registry.py) and
returns the lock document; `dump_lock` makes its committed text deterministic; `load_lock` reads it back
strictly; `lock_problems` says, without any network, whether a committed lock still matches the spec so
render/validate can refuse a stale one and name the command that fixes it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ClusterKitError
from .imageref import ImageRef, ImageRefError, is_sha256_digest, parse_image_ref
from .registry import (
    ACCEPTED_MEDIA_TYPES,
    Manifest,
    Platform,
    RegistryClient,
    RegistryError,
    ResolvedImage,
    credentials_from_env,
    parse_manifest,
    parse_platform,
    resolve_image,
)

LOCK_VERSION = 1
LOCK_SUFFIX = ".images.lock"
_TOP_KEYS = ("cluster", "images", "lock_version")
_IMAGE_KEYS = (
    "compressed_size", "digest", "enroot_uri", "expect", "name", "platform", "registry", "repository", "source",
)
_PLATFORMS = ("linux/amd64", "linux/arm64")


@dataclass(frozen=True)
class ImageSpec:
    """What the cluster spec declares for one image (the spec model converts its entries to this)."""

    name: str
    uri: str
    expect: dict[str, str]


class LockError(ClusterKitError):
    """A lock file that cannot be used; each line is `file[:line:col]: where: problem (hint)`."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self._lines = list(lines)

    def lines(self) -> list[str]:
        return list(self._lines)


class LockResolveError(ClusterKitError):
    """Some images could not be resolved; one line per image so the user fixes them all in one go."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = list(problems)

    def lines(self) -> list[str]:
        return list(self.problems)


def lock_path(configs_dir: str | Path, cluster: str) -> Path:
    return Path(configs_dir) / f"{cluster}{LOCK_SUFFIX}"


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
) -> dict:
    """Ask the registries for every image; raise LockResolveError listing every failure.

    `ecr_client_factory(region)` returns a boto3 ECR client (default: boto3.client("ecr", region_name=...)),
    called once per region that private ECR images live in.
    """
    target = parse_platform(platform)
    problems: list[str] = []
    seen: set[str] = set()
    for spec in images:
        if spec.name in seen:
            problems.append(f"image '{spec.name}' is declared twice (image names must be unique)")
        seen.add(spec.name)
    ecr_clients: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    for spec in sorted(images, key=lambda s: s.name):
        try:
            ref = parse_image_ref(spec.uri)
        except ImageRefError as err:
            problems.append(f"image '{spec.name}': {err}")
            continue
        try:
            if ref.is_ecr_private:
                if registry_client is None:
                    registry_client = RegistryClient(credentials=credentials_from_env())
                region = ref.ecr_account_region[1]  # type: ignore[index]
                if region not in ecr_clients:
                    ecr_clients[region] = (ecr_client_factory or _default_ecr_client)(region)
                resolved = _resolve_ecr(ref, target, ecr_clients[region], registry_client)
            else:
                if registry_client is None:
                    registry_client = RegistryClient(credentials=credentials_from_env())
                resolved = registry_client.resolve(ref, target)
        except RegistryError as err:
            problems.append(f"image '{spec.name}': {err}")
            continue
        if ref.digest and ref.digest not in (resolved.digest, resolved.index_digest):
            problems.append(f"image '{spec.name}': resolved {resolved.digest}, not the pinned {ref.digest}")
            continue
        entries.append(_lock_entry(spec, ref, target, resolved))
    if problems:
        raise LockResolveError(problems)
    return {"cluster": cluster, "images": entries, "lock_version": LOCK_VERSION}


def _lock_entry(spec: ImageSpec, ref: ImageRef, platform: Platform, resolved: ResolvedImage) -> dict[str, Any]:
    return {
        "compressed_size": resolved.compressed_size,
        "digest": resolved.digest,
        "enroot_uri": ref.enroot_uri(resolved.digest),
        "expect": dict(spec.expect),
        "name": spec.name,
        "platform": str(platform),
        "registry": ref.registry,
        "repository": ref.repository,
        "source": spec.uri,
    }


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


# -- the lock file ------------------------------------------------------------------------------------


def dump_lock(lock: dict) -> str:
    """Deterministic text: sorted keys, 2-space indent, images by name, trailing newline."""
    problems = _shape_problems(lock)
    if problems:
        raise ValueError("; ".join(f"{_where(path)}: {problem}" for path, problem in problems))
    document = dict(lock)
    document["images"] = sorted(lock["images"], key=lambda entry: entry["name"])
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def load_lock(path: str | Path) -> dict:
    path = Path(path)
    cluster = path.name[: -len(LOCK_SUFFIX)] if path.name.endswith(LOCK_SUFFIX) else "<name>"
    fix = f"run `make lock CLUSTER={cluster}`"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError([f"{path}: file does not exist ({fix})"]) from None
    except (OSError, UnicodeDecodeError) as err:
        raise LockError([f"{path}: cannot read the lock ({err}) ({fix})"]) from None
    try:
        lock = json.loads(text)
    except json.JSONDecodeError as err:
        raise LockError([f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg} ({fix})"]) from None
    problems = _shape_problems(lock)
    if problems:
        positions = _value_positions(text)
        lines = []
        for where, problem in problems:
            line, col = _line_col(text, positions.get(where, positions.get(where[:-1], 0)))
            lines.append(f"{path}:{line}:{col}: {_where(where)}: {problem} ({fix})")
        raise LockError(lines)
    return lock


def _where(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "lock"


def _shape_problems(lock: object) -> list[tuple[tuple, str]]:
    """Every way `lock` departs from the contract's shape, as (json path, problem)."""
    if not isinstance(lock, dict):
        return [((), "is not a JSON object")]
    problems: list[tuple[tuple, str]] = []
    problems += [((), f"missing key '{key}'") for key in _TOP_KEYS if key not in lock]
    problems += [((key,), f"unknown key '{key}'") for key in sorted(set(lock) - set(_TOP_KEYS))]
    if "cluster" in lock and (not isinstance(lock["cluster"], str) or not lock["cluster"]):
        problems.append((("cluster",), "must be a non-empty string"))
    if "lock_version" in lock and (type(lock["lock_version"]) is not int or lock["lock_version"] != LOCK_VERSION):
        version = lock["lock_version"]
        problems.append((("lock_version",), f"{version!r} is not supported (this ClusterKit reads {LOCK_VERSION})"))
    images = lock.get("images", [])
    if not isinstance(images, list):
        return problems + [(("images",), "must be a list")]
    names: set[str] = set()
    for index, entry in enumerate(images):
        base = ("images", index)
        if not isinstance(entry, dict):
            problems.append((base, "must be an object"))
            continue
        problems += [(base, f"missing key '{key}'") for key in _IMAGE_KEYS if key not in entry]
        problems += [(base + (key,), f"unknown key '{key}'") for key in sorted(set(entry) - set(_IMAGE_KEYS))]
        for key in ("name", "source", "registry", "repository", "enroot_uri"):
            if key in entry and (not isinstance(entry[key], str) or not entry[key]):
                problems.append((base + (key,), "must be a non-empty string"))
        if "digest" in entry and not is_sha256_digest(entry["digest"]):
            problems.append((base + ("digest",), f"{entry['digest']!r} is not sha256:<64 lowercase hex>"))
        if "platform" in entry and entry["platform"] not in _PLATFORMS:
            problems.append((base + ("platform",), f"{entry['platform']!r} is not one of {', '.join(_PLATFORMS)}"))
        size = entry.get("compressed_size", 0)
        if size is not None and (type(size) is not int or size < 0):  # null: locked offline, size unknown
            problems.append((base + ("compressed_size",), f"{size!r} is not a byte count or null"))
        expect = entry.get("expect", {})
        if not isinstance(expect, dict) or not all(isinstance(v, str) for v in expect.values()):
            problems.append((base + ("expect",), "must map names to version strings"))
        name = entry.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append((base + ("name",), f"image '{name}' appears twice"))
            names.add(name)
    return problems


_WS = re.compile(r"[ \t\n\r]*")


def _value_positions(text: str) -> dict[tuple, int]:
    """Offset of every value in already-valid JSON text, keyed by its path, for file:line:col messages."""
    decoder = json.JSONDecoder()
    positions: dict[tuple, int] = {}

    def skip(i: int) -> int:
        return _WS.match(text, i).end()  # type: ignore[union-attr]

    def value(i: int, path: tuple) -> int:
        i = skip(i)
        positions[path] = i
        if text[i] in "{[":
            closing, is_object, position = ("}" if text[i] == "{" else "]"), text[i] == "{", 0
            i = skip(i + 1)
            if text[i] == closing:
                return i + 1
            while True:
                if is_object:
                    key, i = decoder.raw_decode(text, skip(i))
                    i = value(skip(i) + 1, path + (key,))  # + 1 steps over ':'
                else:
                    i = value(i, path + (position,))
                    position += 1
                i = skip(i)
                if text[i] == closing:
                    return i + 1
                i += 1  # ','
        return decoder.raw_decode(text, i)[1]

    value(0, ())
    return positions


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


# -- staleness ----------------------------------------------------------------------------------------


def lock_problems(lock: dict | None, cluster: str, images: Iterable[ImageSpec], platform: str) -> list[str]:
    """Why the lock does not match the spec (no network): [] when it does.

    A spec uri pinned with @sha256 must equal the locked digest, except when the lock was resolved from
    that very text (same `source`): a pin to a manifest list locks the platform manifest's digest, which
    the lock format cannot tell apart from a hand edit, and resolve_lock has already verified that case.
    """
    fix = _fix(cluster)
    if lock is None:
        return [f"no image lock for cluster '{cluster}' {fix}"]
    shape = _shape_problems(lock)
    if shape:
        return [f"image lock: {_where(path)}: {problem} {fix}" for path, problem in shape]
    target = str(parse_platform(platform))
    problems: list[str] = []
    if lock["cluster"] != cluster:
        problems.append(f"image lock is for cluster '{lock['cluster']}', not '{cluster}' {fix}")
    locked = {entry["name"]: entry for entry in lock["images"]}
    specs = sorted(images, key=lambda s: s.name)
    for spec in specs:
        entry = locked.get(spec.name)
        if entry is None:
            problems.append(f"image '{spec.name}' is in the spec but not in the lock {fix}")
            continue
        pinned = _pinned_digest(spec.uri)
        if entry["source"] != spec.uri:
            if pinned and pinned != entry["digest"]:
                problems.append(
                    f"image '{spec.name}': pinned digest {pinned} is not the locked digest {entry['digest']} {fix}"
                )
            else:
                problems.append(
                    f"image '{spec.name}': uri '{spec.uri}' differs from the locked source '{entry['source']}' {fix}"
                )
        else:
            inconsistency = _entry_inconsistency(entry)
            if inconsistency:
                problems.append(f"image '{spec.name}': {inconsistency} {fix}")
        if entry["platform"] != target:
            problems.append(f"image '{spec.name}': locked for {entry['platform']}, the cluster runs {target} {fix}")
        if entry["expect"] != dict(spec.expect):
            problems.append(
                f"image '{spec.name}': expect {_compact(spec.expect)} differs from the locked "
                f"{_compact(entry['expect'])} {fix}"
            )
    for name in sorted(set(locked) - {spec.name for spec in specs}):
        problems.append(f"image '{name}' is in the lock but not in the spec {fix}")
    return problems


def _pinned_digest(uri: str) -> str | None:
    try:
        return parse_image_ref(uri).digest
    except ImageRefError:
        return None  # spec validation reports the bad uri; here it only differs from the lock


def _entry_inconsistency(entry: dict[str, Any]) -> str | None:
    """Locked fields that do not follow from source + digest: a hand edit the lock must not hide."""
    try:
        ref = parse_image_ref(entry["source"])
    except ImageRefError as err:
        return f"locked source is invalid ({err})"
    if (entry["registry"], entry["repository"]) != (ref.registry, ref.repository):
        return f"locked registry/repository {entry['registry']}/{entry['repository']} do not match the source"
    if entry["enroot_uri"] != ref.enroot_uri(entry["digest"]):
        return f"locked enroot_uri {entry['enroot_uri']} does not match the source and digest"
    return None


def _compact(expect: dict[str, str]) -> str:
    return json.dumps(expect, sort_keys=True, separators=(",", ":"))
