"""Rollback rehearsal: deploy, update, failure, CloudFormation rollback, through the real node scripts.

Real: head_node_stage0.sh, head_node_launcher.sh and head_node.sh under bash (the launcher and head_node.sh run
from inside the bundles, as on a node), the Args of the config clusterkit renders (render_config of the demo
spec, with bundles A and B), bundles whose keys are the content keys CDK publishes (``Artifact.key``),
python3's zipfile, sha256sum, the files written. Stand-ins (node_sandbox.py): `aws` (a folder as S3, a file
per SSM parameter), systemctl, scontrol, enroot, the node zipapp.

What CloudFormation and ParallelCluster 3.16.1 do, which the steps below replay:
- ``Custom::PclusterCluster`` depends on the bundle parameter (stacks/cluster.py), so an update writes the
  parameter first and then updates the cluster; PC re-runs HeadNode OnNodeUpdated with the new Args.
- If a later resource of the Cluster stack fails, CloudFormation rolls back in reverse order: the cluster first
  (the provider calls update_cluster with the previous ClusterConfiguration; aws-parallelcluster
  cloudformation/custom_resource/cluster.yaml ``create_or_update``), so PC re-runs OnNodeUpdated with the
  previous Args while the parameter still names the new bundle; the parameter is rolled back after that.
  (Another order, parameter first, is rehearsed too.)
"""
from __future__ import annotations

import dataclasses
import io
import zipfile
from pathlib import Path

import pytest
from node_sandbox import HEAD_ARGS, SCRIPTS, Sandbox, bundle_zip, standin_zipapp

from clusterkit.artifacts.bundle import LAUNCHER, Artifact, build_zip, node_artifacts
from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from clusterkit.render.pcluster_config import placeholder_refs, render_config

BUCKET = "cdk-assets-bucket"
LINK = "opt/parallelcluster/shared/clusterkit"
# head_node.sh's settings (node.args in the bundle): the sandbox's head Args less the bundle location
NODE_ARGS = [a for a in HEAD_ARGS if not a.startswith("CK_BUNDLE=")]


def _bundle(tmp: Path, tag: str, *settings: str) -> Artifact:
    """A bundle as bundle.py lays it out: the real head_node.sh and launcher, node.args, a tagged zipapp."""
    with zipfile.ZipFile(bundle_zip(tmp / f"{tag}-files.zip", zipapp=standin_zipapp(tag))) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    for script in ("head_node.sh", LAUNCHER):
        files[script] = (SCRIPTS / script).read_bytes()
    files["node.args"] = ("\n".join([*NODE_ARGS, *settings]) + "\n").encode()
    return Artifact("bundle.zip", build_zip(files))


@dataclasses.dataclass
class Cloud:
    """The fake S3 bucket and SSM parameter, and the Args clusterkit renders for a given bundle."""

    sandbox: Sandbox
    s3: Path

    def __post_init__(self) -> None:
        loaded = load("demo")
        self.effective = expand(loaded)
        self.artifacts = node_artifacts(loaded)
        self.refs = dataclasses.replace(placeholder_refs(self.effective), assets_bucket=BUCKET)

    def head_actions(self, bundle: Artifact) -> dict:
        arts = dataclasses.replace(self.artifacts, bundle=bundle)
        return render_config(self.effective, self.refs, arts)["HeadNode"]["CustomActions"]

    def publish(self, bundle: Artifact) -> None:
        """CDK asset publishing: the bundle at its content key (never overwritten, never deleted)."""
        path = self.s3 / BUCKET / f"{self.refs.assets_prefix}{bundle.key}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bundle.data)

    def set_parameter(self, bundle: Artifact) -> None:
        path = self.s3 / "ssm" / self.effective.names.bundle_parameter.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"s3://{BUCKET}/{self.refs.assets_prefix}{bundle.key}\n")

    def run(self, script: str, args: list[str], **env: str):
        return self.sandbox.run(script, *args, env={"CK_TEST_S3_DIR": str(self.s3), **env})

    def on_node_configured(self, bundle: Artifact):
        return self.run("head_node_stage0.sh", self.head_actions(bundle)["OnNodeConfigured"]["Args"])

    def on_node_updated(self, bundle: Artifact, **env: str):
        """PC runs the config's OnNodeUpdated Script (that deploy's launcher; same bytes here) with its Args."""
        return self.run(LAUNCHER, self.head_actions(bundle)["OnNodeUpdated"]["Args"], **env)


@pytest.fixture
def cloud(sandbox: Sandbox, tmp_path: Path) -> Cloud:
    sandbox.allow_tools("bash", "date", "tee", "dirname", "cut")  # the launcher's and stage 0's tools
    return Cloud(sandbox, tmp_path / "s3")


def _live(sandbox: Sandbox) -> tuple[str, str]:
    """Which bundle the shared link names, and the tag of the zipapp behind it."""
    target = (sandbox.root / LINK).readlink().name
    return target, sandbox.read(f"{LINK}/clusterkit_node.pyz").rsplit("# ", 1)[1].strip()


def _assert_on(sandbox: Sandbox, bundle: Artifact, tag: str) -> None:
    assert _live(sandbox) == (f".clusterkit-{bundle.sha256[:16]}", tag)
    shared = sandbox.root / "opt/parallelcluster/shared"
    leftovers = [p.name for p in shared.iterdir() if p.name.startswith((".clusterkit-tmp", ".clusterkit-link"))]
    assert leftovers == [], f"half-done switch left {leftovers}"
    with zipfile.ZipFile(io.BytesIO(bundle.data)) as zf:
        assert sandbox.read(f"{LINK}/images.lock").encode() == zf.read("images.lock")


def _deploy_then_update(cloud: Cloud, tmp_path: Path) -> tuple[Artifact, Artifact]:
    a, b = _bundle(tmp_path, "A"), _bundle(tmp_path, "B")
    cloud.publish(a)
    cloud.set_parameter(a)
    created = cloud.on_node_configured(a)
    assert created.returncode == 0, created.stdout + created.stderr
    _assert_on(cloud.sandbox, a, "A")
    # update: assets published, parameter written (the cluster depends on it), then PC runs OnNodeUpdated
    cloud.publish(b)
    cloud.set_parameter(b)
    updated = cloud.on_node_updated(b)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    _assert_on(cloud.sandbox, b, "B")
    return a, b


def test_rollback_while_the_parameter_still_names_the_new_bundle(cloud: Cloud, tmp_path: Path) -> None:
    """A later resource fails; CloudFormation rolls the cluster back first: PC re-runs OnNodeUpdated with A's
    Args while the parameter says B. Before: the launcher read the parameter, found B, and died ("a newer
    deploy in flight?"), so the rollback failed too (UPDATE_ROLLBACK_FAILED)."""
    a, _ = _deploy_then_update(cloud, tmp_path)
    rolled = cloud.on_node_updated(a)
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    _assert_on(cloud.sandbox, a, "A")
    assert "ERROR" not in rolled.stdout
    cloud.set_parameter(a)  # then the parameter rolls back: the stable Args name A again
    assert cloud.on_node_configured(a).returncode == 0
    _assert_on(cloud.sandbox, a, "A")


def test_rollback_after_the_parameter_is_back(cloud: Cloud, tmp_path: Path) -> None:
    """The other order: the parameter already names A when PC re-runs OnNodeUpdated with A's Args."""
    a, _ = _deploy_then_update(cloud, tmp_path)
    cloud.set_parameter(a)
    rolled = cloud.on_node_updated(a)
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    _assert_on(cloud.sandbox, a, "A")


def test_failed_on_node_updated_leaves_the_previous_bundle_live(cloud: Cloud, tmp_path: Path) -> None:
    """The update fails on the head node itself (here: `scontrol reconfigure` after B's new pyxis setting).
    ParallelCluster then rolls its stack back WITHOUT re-running OnNodeUpdated (its custom action runner acts
    only while the stack is UPDATE_IN_PROGRESS), and the Cluster stack's rollback finds "No changes found":
    nothing re-runs A. Before: the shared link stayed on B. Now head_node.sh switches it back as it fails."""
    a = _bundle(tmp_path, "A")
    b = _bundle(tmp_path, "B", "PYXIS_CONTAINER_SCOPE=global")
    for bundle in (a, b):
        cloud.publish(bundle)
    cloud.set_parameter(a)
    assert cloud.on_node_configured(a).returncode == 0
    cloud.set_parameter(b)
    failed = cloud.on_node_updated(b, CK_TEST_SCONTROL_RC="1")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "scontrol reconfigure failed" in failed.stdout + failed.stderr
    assert f"points at .clusterkit-{a.sha256[:16]} again" in failed.stdout
    _assert_on(cloud.sandbox, a, "A")


def test_rollback_rerun_is_idempotent(cloud: Cloud, tmp_path: Path) -> None:
    """cfn-hup may run the update twice (a retried signal): the second run keeps A and switches nothing."""
    a, _ = _deploy_then_update(cloud, tmp_path)
    assert cloud.on_node_updated(a).returncode == 0
    again = cloud.on_node_updated(a)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already unpacked" in again.stdout and "is live" in again.stdout
    _assert_on(cloud.sandbox, a, "A")


def test_stable_location_naming_another_bundle_keeps_its_one_line_error(cloud: Cloud, tmp_path: Path) -> None:
    """Where the launcher still reads a stable place with a hash (a config rendered before content-addressed
    OnNodeUpdated Args, or export's stable key), another bundle there is still a newer deploy in flight:
    one line naming both hashes and what to do, and the live bundle stays as it was."""
    a, b = _deploy_then_update(cloud, tmp_path)
    param = cloud.effective.names.bundle_parameter
    r = cloud.run(LAUNCHER, [f"CK_REGION={cloud.effective.region}", f"CK_BUNDLE_PARAMETER={param}",
                             f"CK_BUNDLE_SHA256={a.sha256}"])
    assert r.returncode == 1
    errors = [line for line in r.stdout.splitlines() if "ERROR" in line]
    assert errors == [f"{errors[0][:20]} launcher: ERROR: bundle s3://{BUCKET}/{cloud.refs.assets_prefix}{b.key} "
                      f"(from {param}) has sha256 {b.sha256}, the cluster config expects {a.sha256} "
                      "(a newer deploy in flight? wait for it, or rerun 'clusterkit deploy')"]
    _assert_on(cloud.sandbox, b, "B")


def test_overwritten_content_key_is_refused(cloud: Cloud, tmp_path: Path) -> None:
    """A content-addressed key holding other bytes is not a deploy in flight: the error says so."""
    a, b = _deploy_then_update(cloud, tmp_path)
    (cloud.s3 / BUCKET / f"{cloud.refs.assets_prefix}{a.key}").write_bytes(b.data)
    r = cloud.on_node_updated(a)
    assert r.returncode == 1
    assert f"has sha256 {b.sha256}, not {a.sha256} as its content-addressed key says" in r.stdout
    _assert_on(cloud.sandbox, b, "B")


def test_on_node_updated_args_name_the_bundle_by_content(cloud: Cloud, tmp_path: Path) -> None:
    """The rendered Args themselves: the bundle's content key and hash, not the parameter (which stays in the
    frozen OnNodeConfigured Args only)."""
    a = _bundle(tmp_path, "A")
    actions = cloud.head_actions(a)
    assert actions["OnNodeUpdated"]["Args"] == [
        f"CK_REGION={cloud.effective.region}", f"CK_BUNDLE_URI=s3://{BUCKET}/{cloud.refs.assets_prefix}{a.key}",
        f"CK_BUNDLE_SHA256={a.sha256}"]
    assert actions["OnNodeConfigured"]["Args"] == [
        f"CK_REGION={cloud.effective.region}", f"CK_BUNDLE_PARAMETER={cloud.effective.names.bundle_parameter}"]
