"""The image lock (cluster_configs/<name>.images.lock): its one model and the rules every value obeys.

The lock is written by ``clusterkit lock`` and read in two places: the CLI reads it with its positioned
YAML reader (JSON is YAML) to report file:line:col, the nodes read it here with ``json``. Both build the
dataclasses below and both apply ``lock_problems`` to what they built, so the CLI cannot accept a lock a
node refuses (tests/contracts/test_lock_contract.py feeds both readers the same broken locks). Image
names must fit the store's layout (layout.py), which this module depends on, never the reverse.
"""
from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from clusterkit_node.contract.console import UsageError
from clusterkit_node.contract.enroot_uri import ImageRequest, import_uri, locked_location
from clusterkit_node.contract.layout import IMAGE_NAME_RE, image_file, image_name_problem

LOCK_VERSION = 1
PLATFORMS = ("linux/amd64", "linux/arm64")
NAME_RE = IMAGE_NAME_RE
DIGEST_RE = re.compile(r"sha256:([0-9a-f]{64})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HINT = "regenerate it with `clusterkit lock NAME`"


@dataclass(frozen=True)
class LockedImage:
    """One image of the lock: what the spec named (``source``) pinned to one platform manifest."""

    name: str  # the image's name in the spec and its directory in the store
    source: str  # the spec's uri, as written when the lock was made
    registry: str
    repository: str
    digest: str  # sha256:<64 hex> of the platform manifest
    enroot_uri: str  # docker://[REGISTRY#]REPOSITORY@<digest>: what enroot >= 4 imports
    platform: str  # one of PLATFORMS
    compressed_size: Optional[int]  # bytes of the layers; None: unknown (an offline lock)
    expect: Dict[str, str]  # versions the image must report (compat rules check them on the node)
    # versions the image config's Env declares, read when the lock resolved the image (declared_versions.py),
    # and where they came from or why none could be read without pulling layers; both optional in the file
    declared: Dict[str, str] = dataclasses.field(default_factory=dict)
    declared_from: str = ""
    # the NVIDIA_* settings enroot's NVIDIA hook reads from the image config's Env (clusterkit_node.image.nvidia_hook),
    # and "image config Env" when the lock read the config (none set: the hook gives no GPU) or why it did not;
    # both optional in the file: a lock without them is one made before they were recorded (not read)
    nvidia: Dict[str, str] = dataclasses.field(default_factory=dict)
    nvidia_from: str = ""

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]

    @property
    def short(self) -> str:
        return self.hex[:12]

    @property
    def rel_file(self) -> str:
        return image_file(self.name, self.hex)

    @property
    def location(self) -> Tuple[str, str]:
        """(registry, repository) the image was locked from."""
        return locked_location(self.enroot_uri)

    @property
    def tag(self) -> Optional[str]:
        """The tag the spec named (``source``: ``[docker://]NAME[:TAG][@DIGEST]``), if any."""
        name = self.source.split("://", 1)[-1].split("@", 1)[0]
        last = re.split(r"[/#]", name)[-1]
        return last.split(":", 1)[1] if ":" in last else None

    def answers(self, request: ImageRequest) -> bool:
        """Does a job's ``--container-image`` (as enroot would fetch it) name this locked image? Same
        registry and repository, and the locked digest or the tag the lock was made from."""
        if (request.registry, request.repository) != self.location:
            return False
        return request.reference == (self.digest if request.digest else self.tag)


@dataclass(frozen=True)
class ImageLock:
    """The whole lock file."""

    cluster: str
    images: Tuple[LockedImage, ...]
    lock_version: int


def find_locked(images: List[LockedImage], request: ImageRequest) -> Optional[LockedImage]:
    """The locked image a request names, or None (first match: names are unique, locations may repeat)."""
    return next((img for img in images if img.answers(request)), None)


# --- the rules ---------------------------------------------------------------------------------------

def lock_problems(lock: ImageLock) -> List[Tuple[str, str]]:
    """Every value of a well-typed lock that breaks the contract, as (path, problem); [] when none.

    Paths are the positioned reader's (``images[1].digest``) so the CLI can point at the line."""
    problems: List[Tuple[str, str]] = []
    if lock.lock_version != LOCK_VERSION:
        problems.append(("lock_version", f"{lock.lock_version!r} is not supported (this ClusterKit reads "
                                         f"{LOCK_VERSION})"))
    problems += _text_problems("cluster", lock.cluster)
    seen = set()
    for index, image in enumerate(lock.images):
        base = f"images[{index}]"
        problems += [(f"{base}.{key}", problem) for key, problem in image_problems(image)]
        if image.name in seen:
            problems.append((f"{base}.name", f"image '{image.name}' appears twice"))
        seen.add(image.name)
    return problems


def image_problems(image: LockedImage) -> List[Tuple[str, str]]:
    """Every value of one locked image that a node cannot use, as (field, problem)."""
    problems: List[Tuple[str, str]] = []
    for key in ("name", "source", "registry", "repository", "enroot_uri", "platform"):
        problems += _text_problems(key, getattr(image, key))
    name_problem = image_name_problem(image.name)
    if name_problem and image.name:
        problems.append(("name", name_problem))
    if not DIGEST_RE.fullmatch(image.digest):
        problems.append(("digest", f"{image.digest!r} is not sha256:<64 lowercase hex>"))
    elif not image.enroot_uri.endswith("@" + image.digest):
        problems.append(("enroot_uri", f"{image.enroot_uri!r} does not pin digest {image.digest}"))
    else:
        try:
            import_uri(image.enroot_uri, "")
        except ValueError as exc:
            problems.append(("enroot_uri", str(exc)))
    if image.platform not in PLATFORMS:
        problems.append(("platform", f"{image.platform!r} is not one of {', '.join(PLATFORMS)}"))
    if image.compressed_size is not None and image.compressed_size < 0:
        problems.append(("compressed_size", f"{image.compressed_size!r} is not a byte count or null"))
    for key, value in image.expect.items():
        problems += _text_problems(f"expect.{key}", key) + _text_problems(f"expect.{key}", value)
    for key, value in image.declared.items():
        problems += _text_problems(f"declared.{key}", key) + _text_problems(f"declared.{key}", value)
    if image.declared_from:
        problems += _text_problems("declared_from", image.declared_from)
    for key, value in image.nvidia.items():
        if not re.fullmatch(r"NVIDIA_[A-Za-z0-9_]*", key):
            problems.append((f"nvidia.{key}", f"{key!r} is not an NVIDIA_* variable name"))
        elif _CONTROL.search(value):
            problems.append((f"nvidia.{key}", f"{value!r} contains a control character"))
    if image.nvidia_from:
        problems += _text_problems("nvidia_from", image.nvidia_from)
    elif image.nvidia:
        problems.append(("nvidia_from", "must say where the NVIDIA_* settings were read"))
    return problems


def _text_problems(path: str, text: str) -> List[Tuple[str, str]]:
    if not text:
        return [(path, "must be a non-empty string")]
    if _CONTROL.search(text):
        return [(path, f"{text!r} contains a control character")]
    return []


# --- the node's reader -------------------------------------------------------------------------------

def load_lock(path: str) -> List[LockedImage]:
    """The lock's images by name; every problem is reported at once (UsageError)."""
    return sorted(load_image_lock(path).images, key=lambda image: image.name)


def load_image_lock(path: str) -> ImageLock:
    """The whole lock (its cluster too: the sync's per-cluster record is named after it); UsageError as load_lock."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 ({exc.reason})"
        raise UsageError([f"{path}: cannot read image lock: {reason} (is --lock right?)"])
    lock, problems = parse_lock(text, path)
    if lock is None or problems:
        raise UsageError(problems)
    return lock


def parse_lock(text: str, file: str) -> Tuple[Optional[ImageLock], List[str]]:
    """(the lock, []) or (None or the lock, one line per problem naming ``file``) from the file's text."""
    try:
        doc = decode(text)
    except LockSyntaxError as exc:
        where = f"{file}:{exc.line}:{exc.col}" if exc.line else file
        return None, [f"{where}: {exc.message} ({_HINT})"]
    problems: List[Tuple[str, str]] = []
    lock = _build(ImageLock, doc, "", problems)
    if lock is not None:
        problems = lock_problems(lock)
    return lock, [f"{file}: {where}: {problem} ({_HINT})" for where, problem in problems]


class LockSyntaxError(ValueError):
    """The text is not the JSON a lock is written in (``line`` 0: no position)."""

    def __init__(self, line: int, col: int, message: str):
        super().__init__(message)
        self.line, self.col, self.message = line, col, message


def decode(text: str, *, allow_duplicates: bool = False) -> Any:
    """The lock's JSON, refusing what the model has no use for and YAML would read differently: numbers
    with a fraction or exponent, NaN and Infinity (the CLI reads the same text as YAML, where ``1e5`` is
    a string). A key given twice is refused too, unless the caller reports it with a position itself."""
    hook = None if allow_duplicates else _unique_keys
    try:
        return json.loads(text, parse_float=_no_number, parse_constant=_no_number, object_pairs_hook=hook)
    except json.JSONDecodeError as exc:
        raise LockSyntaxError(exc.lineno, exc.colno, f"not valid JSON: {exc.msg}") from None
    except _Refused as exc:
        raise LockSyntaxError(0, 0, str(exc)) from None


class _Refused(ValueError):
    pass


def _no_number(text: str) -> Any:
    raise _Refused(f"{text} is not a value a lock holds (only whole numbers)")


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {key!r} given twice")
        out[key] = value
    return out


def _build(cls: Any, raw: Any, path: str, problems: List[Tuple[str, str]]) -> Any:
    where = path or "lock"
    if not isinstance(raw, dict):
        problems.append((where, "must be an object"))
        return None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    ok = True
    for key in sorted(set(raw) - set(fields)):
        problems.append((_join(path, key), "unknown key"))
        ok = False
    values: Dict[str, Any] = {}
    for name in fields:
        if name not in raw and _optional(fields[name]):
            continue
        if name not in raw:
            problems.append((where, f"missing required key '{name}'"))
            ok = False
            continue
        value = _value(_FIELD_TYPES[cls, name], raw[name], _join(path, name), problems)
        ok = ok and value is not _BAD
        values[name] = value
    return cls(**values) if ok else None


_BAD = object()


def _optional(f: "dataclasses.Field[Any]") -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _value(kind: str, raw: Any, path: str, problems: List[Tuple[str, str]]) -> Any:
    if kind == "str" and isinstance(raw, str):
        return raw
    if kind in ("int", "int?") and isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if kind == "int?" and raw is None:
        return None
    if kind == "dict" and isinstance(raw, dict) and all(isinstance(v, str) for v in raw.values()):
        return dict(raw)
    if kind == "images" and isinstance(raw, list):
        items = [_build(LockedImage, item, f"{path}[{i}]", problems) for i, item in enumerate(raw)]
        return _BAD if any(item is None for item in items) else tuple(items)
    problems.append((path, f"expected {_KIND_NAMES[kind]}, got {_json_kind(raw)}"))
    return _BAD


# Each field's JSON shape, derived from the dataclasses' own hints (an unknown hint fails at import).
_KINDS: Dict[Any, str] = {str: "str", int: "int", Optional[int]: "int?", Dict[str, str]: "dict",
                          Tuple[LockedImage, ...]: "images"}
_FIELD_TYPES = {(cls, name): _KINDS[hint] for cls in (LockedImage, ImageLock)
                for name, hint in typing.get_type_hints(cls).items()}
_KIND_NAMES = {"str": "a string", "int": "an integer", "int?": "an integer or null",
               "dict": "a mapping of strings", "images": "a list"}


def _json_kind(raw: Any) -> str:
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "a boolean"
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(raw), type(raw).__name__)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
