"""Check rendered configs with ParallelCluster's own schema and validators (the installed, pinned version).

Runs inside the ParallelCluster venv (aws-parallelcluster cannot share a venv with aws-cdk-lib):

    .venv-pcluster/bin/python -m clusterkit.pcluster.check < request.json

Request (stdin)::

    {"mode": "schema" | "validate",
     "configs": [{"name": "demo", "path": "cluster_configs/rendered/demo.yaml",
                  "yaml": "<text>", "region": "us-east-1"}],
     "suppress_moto_gaps": true}          # optional; false shows what moto cannot satisfy

Response (stdout): one JSON object per config and line, in request order::

    {"name", "path", "mode", "ok", "errors": [{"level", "type", "message", "line", "col"}],
     "suppressed": [{"type", "message"}], "seconds", "simulated": [{"kind", "id"}]}

``schema`` loads the YAML with ``ClusterSchema(cluster_name=name)``: offline, no AWS call. ``validate``
also runs ``cfg.validate()`` under ``moto.mock_aws`` against fixtures built from the config (see
``moto_world``). A config is ok when no finding has level ERROR; WARNING/INFO are reported only.
Imports nothing from clusterkit outside this subpackage.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

from clusterkit.pcluster.tokens import (
    PLACEHOLDERS,
    find_tokens,
    is_id_like,
    placeholder,
    schema_standin,
    substitute,
    unmap,
)

# Validators that fail under moto whatever the config says. Each is suppressed by type (PC's own
# TypeMatchValidatorsSuppressor), only in validate mode, and the evidence is pinned by
# tests/pcluster/test_pcluster_check.py (test_moto_gap_*).
MOTO_GAP_SUPPRESSIONS: dict[str, str] = {
    "HeadNodeLaunchTemplateValidator": (
        "dry-run RunInstances: PC always sends 24 instance-store mappings (VirtualName ephemeralN, no Ebs) "
        "and moto rejects any block device mapping without Ebs ('The request must contain the parameter ebs')"
    ),
    "ComputeResourceLaunchTemplateValidator": (
        "dry-run RunInstances per queue: same moto block-device-mapping gap as HeadNodeLaunchTemplateValidator"
    ),
}

SCHEMA_ERROR_TYPE = "ConfigSchemaValidator"  # the type ParallelCluster itself gives schema failures


@dataclass(frozen=True)
class Finding:
    level: str  # ERROR | WARNING | INFO
    type: str
    message: str
    line: int | None = None
    col: int | None = None


@dataclass
class Result:
    name: str
    path: str
    mode: str
    ok: bool
    errors: list[Finding]
    suppressed: list[dict[str, str]]
    seconds: float
    # validate mode: [{"kind", "id"}] of the resources that existed only in moto (ids as the config writes them),
    # the official AMI included; empty in schema mode (no AWS call at all)
    simulated: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> str:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        return json.dumps(data, sort_keys=True)


# ---------------------------------------------------------------- environment


def prepare_environment(region: str) -> None:
    """Dummy credentials, no instance metadata, the request's region; moto tuned for speed/fidelity."""
    # Never reach a real account, whatever the caller's shell or ~/.aws holds.
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        os.environ.pop(name, None)
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    os.environ["AWS_DEFAULT_REGION"] = region
    os.environ["AWS_REGION"] = region
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    # moto: skip its 1,300 default AMIs (the official AMI is a fixture) and its bulk load of AWS managed
    # IAM policies (moto_world adds the referenced ones): together ~3 s per config otherwise.
    os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
    os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "false"


def share_botocore_models() -> None:
    """Let every botocore Loader in this process share one cache of parsed service models.

    moto swaps boto3's default session for a fresh one in each ``mock_aws`` context, and a fresh
    session re-parses the EC2/S3/FSx/IAM models from JSON (~1 s per config). All loaders here use the
    same search path, so one shared cache returns the same data; nothing else changes.
    """
    from botocore import loaders

    if getattr(loaders.Loader, "_clusterkit_shared", False):
        return
    shared: dict[Any, Any] = {}
    original_init = loaders.Loader.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._cache = shared

    loaders.Loader.__init__ = __init__
    loaders.Loader._clusterkit_shared = True


class _RegionSessions:
    """``boto3`` as ``pcluster.aws.common`` sees it, except that ``boto3.session.Session()`` returns one Session
    per value of ``AWS_DEFAULT_REGION`` instead of a new one (see ``share_region_sessions``)."""

    def __init__(self, boto3: Any) -> None:
        self._boto3 = boto3
        self._sessions: dict[str | None, Any] = {}
        self.session = SimpleNamespace(Session=self._session)

    def __getattr__(self, name: str) -> Any:  # client, resource, ...: boto3's own
        return getattr(self._boto3, name)

    def _session(self) -> Any:
        key = os.environ.get("AWS_DEFAULT_REGION")
        if key not in self._sessions:
            self._sessions[key] = self._boto3.session.Session()
        return self._sessions[key]


def share_region_sessions() -> None:
    """Let ParallelCluster's region lookups reuse a boto3 Session instead of building one per AWS call.

    ``pcluster.aws.common`` builds a fresh ``boto3.session.Session()`` only to read its ``region_name``, in
    ``get_region()`` and in its boto3 call logger, on nearly every AWS call: ~13 ms each (botocore registers
    its built-in handlers), ~0.35 s per config. Those two reads are the module's only uses of
    ``boto3.session``. Here the region comes only from ``AWS_DEFAULT_REGION`` (prepare_environment: no
    profile, ``AWS_CONFIG_FILE`` is /dev/null), so a Session kept per value of that variable answers the same;
    PC's own ``get_region`` still runs (and still raises when there is no region).
    """
    from pcluster.aws import common

    if not isinstance(common.boto3, _RegionSessions):
        common.boto3 = _RegionSessions(common.boto3)


def quiet_logging() -> None:
    """PC logs every failed boto3 call; findings already carry the message, so keep stderr clean."""
    if os.environ.get("CLUSTERKIT_PCLUSTER_DEBUG"):
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        return
    for name in ("pcluster", "botocore", "boto3", "moto"):
        logger = logging.getLogger(name)
        logger.handlers = [logging.NullHandler()]
        logger.propagate = False
    # pcluster also calls logging.warning(), which would install a stderr handler on the root logger.
    logging.getLogger().handlers = [logging.NullHandler()]
    warnings.simplefilter("ignore")


# ---------------------------------------------------------------- YAML positions


def _compose(text: str) -> Any:
    import yaml

    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def locate(root: Any, parts: list[str | int]) -> tuple[int | None, int | None]:
    """1-based line/col of the deepest node of ``parts`` present in the YAML (key node for mappings)."""
    import yaml

    node, mark = root, None
    for part in parts:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if match is None:
                break
            mark, node = match[0].start_mark, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            mark = node.start_mark
        else:
            break
    if mark is None and root is not None:
        mark = root.start_mark
    return (mark.line + 1, mark.column + 1) if mark is not None else (None, None)


def flatten_schema_messages(messages: Any, parts: list[str | int] | None = None
                            ) -> Iterator[tuple[list[str | int], str]]:
    """Yield (path parts, message) from marshmallow's nested error dict."""
    parts = parts or []
    if isinstance(messages, dict):
        for key in sorted(messages, key=lambda k: (isinstance(k, str), str(k).zfill(6))):
            sub = parts if key == "_schema" else parts + [key]
            yield from flatten_schema_messages(messages[key], sub)
    elif isinstance(messages, (list, tuple)):
        for item in messages:
            yield from flatten_schema_messages(item, parts)
    else:
        yield parts, str(messages)


def dotted(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---------------------------------------------------------------- checks


def load_schema(name: str, text: str, mapping: dict[str, str]) -> tuple[Any, list[Finding]]:
    """ClusterSchema.load on the substituted text; schema failures carry path, line and column."""
    import yaml
    from marshmallow import ValidationError
    from pcluster.schemas.cluster_schema import ClusterSchema

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        return None, [Finding("ERROR", "YamlSyntax", unmap(str(exc).replace("\n", " "), mapping), line, col)]
    if not isinstance(data, dict):
        return None, [Finding("ERROR", SCHEMA_ERROR_TYPE, "the config must be a YAML mapping", 1, 1)]
    try:
        return ClusterSchema(cluster_name=name).load(data), []
    except ValidationError as exc:
        root = _compose(text)
        findings = []
        for parts, message in flatten_schema_messages(exc.messages):
            line, col = locate(root, parts)
            where = dotted(parts)
            text_msg = f"{where}: {message}" if where else message
            findings.append(Finding("ERROR", SCHEMA_ERROR_TYPE, unmap(text_msg, mapping), line, col))
        return None, findings
    except Exception as exc:  # noqa: BLE001  PC raises plain errors for some shapes (e.g. a queue without ComputeResources)
        return None, [Finding("ERROR", SCHEMA_ERROR_TYPE, f"{type(exc).__name__}: {exc}", None, None)]


def placeholder_findings(text: str) -> list[Finding]:
    """Malformed ``${...}`` names are renderer bugs: nothing would fill them in at deploy time."""
    known = ", ".join(placeholder(name) for name in PLACEHOLDERS)
    return [
        Finding(
            "ERROR",
            "ClusterKitPlaceholder",
            f"unknown placeholder {use.token} (expected ${{<Stack>.<Output>}} ending in VpcId, SubnetId, "
            f"SecurityGroupId, FileSystemId, PolicyArn, Bucket or Region, e.g. {known}; or ${{AWS::Partition}}, "
            "${AWS::Region}, ${AWS::AccountId}, ${AWS::URLSuffix})",
            use.line,
            use.col,
        )
        for use in find_tokens(text)
        if use.kind == "unknown"
    ]


OFFLINE_ENDPOINT = "http://127.0.0.1:9"  # discard port on loopback: refused at once


def check_schema(name: str, text: str, region: str) -> list[Finding]:
    """ClusterSchema.load only. Offline by construction: any AWS call is refused locally.

    The load is meant to be offline, but SlurmClusterConfig's constructor describes the capacity
    reservations a config names (and ignores failures); pointing boto at a closed loopback port
    with one attempt keeps that from ever reaching AWS or waiting on a network.
    """
    saved = {key: os.environ.get(key) for key in ("AWS_ENDPOINT_URL", "AWS_MAX_ATTEMPTS")}
    os.environ["AWS_ENDPOINT_URL"] = OFFLINE_ENDPOINT
    os.environ["AWS_MAX_ATTEMPTS"] = "1"
    from pcluster.aws.aws_api import AWSApi

    AWSApi.reset()  # clients are built lazily from the environment: none may predate the endpoint
    try:
        return _check_schema(name, text, region)
    finally:
        AWSApi.reset()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _check_schema(name: str, text: str, region: str) -> list[Finding]:
    mapping = {
        use.token: schema_standin(use.token, use.kind, region)
        for use in find_tokens(text)
        if use.token.startswith("${") and use.kind != "unknown"
    }
    _, findings = load_schema(name, substitute(text, mapping), _unmappable(mapping))
    return findings


def _unmappable(mapping: dict[str, str]) -> dict[str, str]:
    """Regions and partitions are ordinary words in messages: only ids are mapped back to tokens."""
    return {token: value for token, value in mapping.items() if is_id_like(token)}


Simulated = list[dict[str, str]]


def check_validate(name: str, text: str, region: str, suppress: bool
                   ) -> tuple[list[Finding], set[str], Simulated]:
    """Schema first (offline); then, under moto with fixtures, ``cfg.validate()``.

    Returns the findings, the validator types that were actually suppressed for this config, and the resources
    that existed only in the simulation (``moto_world.World.simulated`` plus the official AMI).
    """
    import yaml
    from moto import mock_aws
    from pcluster.aws.aws_api import AWSApi
    from pcluster.aws.common import Cache
    from pcluster.config.common import TypeMatchValidatorsSuppressor
    from pcluster.validators.common import ValidatorContext

    from clusterkit.pcluster import moto_world

    class RecordingSuppressor(TypeMatchValidatorsSuppressor):
        """PC's own type-match suppressor, remembering what it skipped so the result can say so."""

        def __init__(self, kinds: set[str]):
            super().__init__(kinds)
            self.skipped: set[str] = set()

        def suppress_validator(self, validator: Any) -> bool:
            hit: bool = super().suppress_validator(validator)
            if hit:
                self.skipped.add(validator.type)
            return hit

    schema_findings = check_schema(name, text, region)
    if schema_findings:
        return schema_findings, set(), []
    tokens = [use for use in find_tokens(text) if use.kind != "unknown"]
    suppressor = RecordingSuppressor(set(MOTO_GAP_SUPPRESSIONS))
    simulated: Simulated = []
    with mock_aws():
        AWSApi.reset()
        Cache.clear_all()
        try:
            world = moto_world.build(region, text, yaml.safe_load(text) or {}, tokens)
            simulated = [{"kind": kind, "id": token} for kind, token in world.simulated]
            mapping = _unmappable(world.ids)
            cfg, findings = load_schema(name, substitute(text, world.ids), mapping)
            if cfg is None:
                return findings, set(), simulated
            cfg.official_ami = moto_world.create_official_ami(region, cfg.image.os, cfg.head_node.architecture)
            simulated.append({"kind": "official-ami", "id": f"ParallelCluster {cfg.image.os} "
                                                             f"{cfg.head_node.architecture} AMI"})
            failures = cfg.validate([suppressor] if suppress else [], ValidatorContext())
        except Exception as exc:  # noqa: BLE001  validate() calls AWS while registering validators; report, don't crash
            return [Finding("ERROR", type(exc).__name__, f"validate() raised: {exc}")], suppressor.skipped, simulated
        finally:
            AWSApi.reset()
            Cache.clear_all()
    findings = [Finding(str(f.level), f.validator_type, unmap(str(f.message), mapping)) for f in failures]
    return findings, suppressor.skipped, simulated


def check_config(config: dict[str, Any], mode: str, suppress: bool = True) -> Result:
    started = time.monotonic()
    name, text, region = config["name"], config["yaml"], config.get("region") or "us-east-1"
    prepare_environment(region)
    findings = placeholder_findings(text)
    skipped: set[str] = set()
    simulated: Simulated = []
    if mode == "schema":
        findings += check_schema(name, text, region)
    else:
        validated, skipped, simulated = check_validate(name, text, region, suppress)
        findings += validated
    suppressed = [{"type": kind, "message": MOTO_GAP_SUPPRESSIONS[kind]} for kind in sorted(skipped)]
    ok = not any(f.level == "ERROR" for f in findings)
    return Result(name, config.get("path", ""), mode, ok, findings, suppressed, time.monotonic() - started,
                  simulated)


def main(argv: list[str] | None = None) -> int:
    request = json.load(sys.stdin)
    mode = request.get("mode")
    if mode not in ("schema", "validate"):
        print(f"clusterkit.pcluster.check: mode must be 'schema' or 'validate', got {mode!r}", file=sys.stderr)
        return 2
    quiet_logging()
    share_botocore_models()
    share_region_sessions()
    suppress = bool(request.get("suppress_moto_gaps", True))
    for config in request.get("configs", []):
        print(check_config(config, mode, suppress).to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
