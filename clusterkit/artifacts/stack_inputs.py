"""Files the CDK app hands its stacks, read and written here so that the stacks do no file I/O.

- The node artifacts (``clusterkit.artifacts.bundle``) become S3 assets. CDK's asset staging copies a file from a
  path, so ``stage`` writes each artifact's bytes into the cloud assembly (``<outdir>/.clusterkit-staging/
  <sha256>/<name>``: gitignored, rewritten each synth, never a leaked temp dir) and the Cluster stack gets
  ``StagedArtifacts``: the paths, hashes and keys, no bytes to write.
- The version guard's Lambda handler (``stacks/version_guard_handler.py``) ships inline, as its source text.

app.py calls these; tests that build a stack by hand call them too.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit.paths import VERSION_GUARD_HANDLER

if TYPE_CHECKING:
    from clusterkit.artifacts.bundle import Artifact, NodeArtifacts

STAGING_DIR = ".clusterkit-staging"


@dataclass(frozen=True)
class StagedArtifact:
    """One node artifact on disk, with the content hash and the S3 key the rendered config names."""

    name: str
    sha256: str
    key: str
    path: Path


@dataclass(frozen=True)
class StagedArtifacts:
    """The same five artifacts as ``bundle.NodeArtifacts`` (render reads ``key`` and ``sha256`` of either)."""

    stage0: StagedArtifact
    launcher: StagedArtifact
    compute_start: StagedArtifact
    compute_configured: StagedArtifact
    bundle: StagedArtifact
    login_stage0: StagedArtifact | None = None

    def all(self) -> list[StagedArtifact]:
        login = [self.login_stage0] if self.login_stage0 is not None else []
        return [self.stage0, self.launcher, self.compute_start, self.compute_configured, self.bundle, *login]


def stage(artifacts: NodeArtifacts, outdir: str | Path) -> StagedArtifacts:
    """Write every artifact under ``<outdir>/.clusterkit-staging/`` (idempotent) and say where."""
    def one(artifact: Artifact) -> StagedArtifact:
        path = Path(outdir) / STAGING_DIR / artifact.sha256 / artifact.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(artifact.data)
        return StagedArtifact(artifact.name, artifact.sha256, artifact.key, path)

    return StagedArtifacts(stage0=one(artifacts.stage0), launcher=one(artifacts.launcher),
                           compute_start=one(artifacts.compute_start),
                           compute_configured=one(artifacts.compute_configured), bundle=one(artifacts.bundle),
                           login_stage0=one(artifacts.login_stage0) if artifacts.login_stage0 else None)


def version_guard_code() -> str:
    """The version guard handler's source, shipped inline (CloudFormation ``Code.ZipFile``)."""
    return VERSION_GUARD_HANDLER.read_text(encoding="utf-8")
