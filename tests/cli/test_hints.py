"""Hints computed from what works where the user is (issue 35, item 6): one line per cause, no follow-on line that
the command it names would not fix, and the command that works for that file (outside the checkout, offline).

In process (``clusterkit.cli.main.main`` + capsys) on specs this file writes into a temporary directory, which is
the current directory: paths print relative to it, as a user sees them.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.cli.main import main
from clusterkit.paths import CONFIG_DIR
from clusterkit.spec.files import lock_command
from tests.spec_text import BASE_SPEC

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
IMAGES = f"""\
containers:
  images:
    - name: nccl
      uri: public.ecr.aws/hpc-cloud/nccl-tests:v1@{A}
      expect:
        nccl: 2.30.4
    - name: pytorch
      uri: nvcr.io/nvidia/pytorch:25.01-py3@{B}
      expect:
        cuda: "12.8"
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    return code, capsys.readouterr().err.splitlines()


def locked_spec(capsys: pytest.CaptureFixture[str], here: Path, text: str = BASE_SPEC + IMAGES) -> Path:
    """``x/t.yaml`` with its lock written offline, as `clusterkit lock --offline` writes it."""
    (here / "x").mkdir()
    spec = here / "x" / "t.yaml"
    spec.write_text(text, encoding="utf-8")
    assert run(capsys, "lock", "--offline", "x/t.yaml") == (0, [])
    return spec


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_mistyped_expect_value_is_one_line_without_a_lock_line(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was also: `image 'pytorch': expect {"cuda":"12.8x"} differs from the locked {"cuda":"12.8"} (run ...)`."""
    spec = locked_spec(capsys, here)
    edit(spec, 'cuda: "12.8"', 'cuda: "12.8x"')
    assert run(capsys, "validate", "x/t.yaml") == (2, [
        "x/t.yaml:19:15: containers.images[1].expect.cuda: '12.8x' is not a version like 12.9 or 2.29.3 (ASCII "
        "digits and dots)"])


def test_a_duplicate_image_name_is_one_line_without_lock_lines(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was also three lock lines: nccl's digest and expect differ, pytorch is in the lock but not in the spec."""
    spec = locked_spec(capsys, here)
    edit(spec, "- name: pytorch", "- name: nccl")
    assert run(capsys, "validate", "x/t.yaml") == (2, [
        "x/t.yaml:16:13: containers.images[1].name: duplicate image name 'nccl' (names must be unique)"])


def test_a_stale_image_beside_another_images_error_still_gets_its_lock_line(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only the lines an error causes go: the other image's own change is still reported, with its fix, at its entry
    (was: at `containers.images`, the list)."""
    spec = locked_spec(capsys, here)
    edit(spec, 'cuda: "12.8"', 'cuda: "12.8x"')
    edit(spec, "nccl: 2.30.4", "nccl: 2.30.5")
    code, lines = run(capsys, "validate", "x/t.yaml")
    assert code == 2
    assert lines == [
        "x/t.yaml:12:7: containers.images[0]: image 'nccl': expect {\"nccl\":\"2.30.5\"} differs from the locked "
        "{\"nccl\":\"2.30.4\"} (run `clusterkit lock --offline x/t.yaml`)",
        "x/t.yaml:19:15: containers.images[1].expect.cuda: '12.8x' is not a version like 12.9 or 2.29.3 (ASCII "
        "digits and dots)"]


def test_a_misnamed_cluster_gets_no_lock_line(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = locked_spec(capsys, here)
    edit(spec, "name: t\n", "name: tt\n")
    assert run(capsys, "validate", "x/t.yaml") == (2, [
        "x/t.yaml:1:7: name: 'tt' differs from the file name 't' (rename the file to tt.yaml or set name: t)"])


def test_the_lock_hint_is_the_command_that_works_there(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An offline lock outside the checkout: `clusterkit lock --offline PATH` (was `make lock`-style or online);
    once an image has no digest, offline locking cannot do it: the online command, for that file."""
    spec = locked_spec(capsys, here)
    edit(spec, 'cuda: "12.8"', 'cuda: "12.9"')
    assert run(capsys, "validate", "x/t.yaml")[1] == [
        "x/t.yaml:16:7: containers.images[1]: image 'pytorch': expect {\"cuda\":\"12.9\"} differs from the locked "
        "{\"cuda\":\"12.8\"} (run `clusterkit lock --offline x/t.yaml`)"]
    edit(spec, f"pytorch:25.01-py3@{B}", "pytorch:25.02-py3")
    assert run(capsys, "validate", "x/t.yaml")[1] == [  # one edit of one entry, one relock: one line (was two)
        "x/t.yaml:16:7: containers.images[1]: image 'pytorch': uri 'nvcr.io/nvidia/pytorch:25.02-py3' differs from the "
        f"locked source 'nvcr.io/nvidia/pytorch:25.01-py3@{B}'; expect {{\"cuda\":\"12.9\"}} differs from the locked "
        "{\"cuda\":\"12.8\"} (run `clusterkit lock x/t.yaml`)"]


def test_in_the_checkout_the_offline_lock_is_not_the_makefiles() -> None:
    """`make lock` always asks the registries: an offline lock's fix in the checkout is the CLI's --offline."""
    demo = CONFIG_DIR / "demo.yaml"
    assert lock_command(demo) == "make lock CLUSTER=demo"
    assert lock_command(demo, offline=True) == "clusterkit lock --offline demo"


def test_validate_of_a_rendered_config_or_a_lock_is_one_line(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was 13 lines: every ParallelCluster key (or lock key) an unknown spec key."""
    locked_spec(capsys, here)
    assert main(["render", "x/t.yaml"]) == 0
    capsys.readouterr()
    assert run(capsys, "validate", "x/rendered/t.yaml", "x/t.images.lock") == (2, [
        "x/rendered/t.yaml: a rendered ParallelCluster config, not a cluster spec (validate the spec it was "
        "rendered from instead: clusterkit validate x/t.yaml)",
        "x/t.images.lock: an image lock, not a cluster spec (validate the spec it locks instead: clusterkit "
        "validate x/t.yaml)"])
    (here / "copy.yaml").write_text((here / "x" / "rendered" / "t.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    assert run(capsys, "validate", "copy.yaml") == (2, [
        "copy.yaml: a rendered ParallelCluster config, not a cluster spec (validate the spec it was rendered from "
        "instead: the spec t.yaml)"])


PLATFORM = """\
name: shared
region: us-east-1
availability_zone: us-east-1a
network:
  new:
    cidr: 10.1.0.0/16
storage:
  fsx_lustre:
    new:
      capacity_gib: 1200
      deployment_type: PERSISTENT_2
      throughput_mb_per_tib: 125
"""


def test_a_platform_warning_points_at_the_platform_files_line(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: `x/t.yaml:1:1: warning[image-fanout-slow]: storage.fsx_lustre...` (the cluster's `name:` line, a key
    only the platform file has)."""
    (here / "x" / "platforms").mkdir(parents=True)
    (here / "x" / "platforms" / "shared.yaml").write_text(PLATFORM, encoding="utf-8")
    spec = here / "x" / "t.yaml"
    spec.write_text(BASE_SPEC.replace("max: 2", "max: 40").replace("name: t\n", "name: t\nplatform: shared\n")
                    + IMAGES, encoding="utf-8")
    assert run(capsys, "lock", "--offline", "x/t.yaml") == (0, [])
    code, lines = run(capsys, "validate", "x/t.yaml")
    assert code == 0
    (line,) = [ln for ln in lines if "image-fanout-slow" in ln]
    assert line.startswith("x/platforms/shared.yaml:12:30: warning[image-fanout-slow]: "
                           "storage.fsx_lustre.new.throughput_mb_per_tib: cluster t: image fan-out: 40 nodes")
    assert line.endswith("none in the lock: `clusterkit lock x/t.yaml` with registry access records them)")


def test_the_synth_summary_says_when_the_rendered_config_is_stale(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: `make synth` after a spec edit still named the old render as the cluster's config."""
    from clusterkit.cli.summary_command import summarize

    locked_spec(capsys, here)
    (here / "cdk.out").mkdir()
    (here / "cdk.out" / "manifest.json").write_text('{"artifacts": {}}', encoding="utf-8")

    def rendered_line() -> str:
        (line,) = [ln for ln in summarize(here / "cdk.out", "x/t.yaml") if "rendered ParallelCluster" in ln]
        return line.strip()

    assert rendered_line() == ("rendered ParallelCluster config: x/rendered/t.yaml (not written: run "
                               "`clusterkit render x/t.yaml`)")
    assert main(["render", "x/t.yaml"]) == 0
    assert rendered_line() == "rendered ParallelCluster config: x/rendered/t.yaml"
    edit(here / "x" / "t.yaml", "max: 2", "max: 3")
    assert rendered_line() == ("rendered ParallelCluster config: x/rendered/t.yaml (stale: the spec changed since; "
                               "run `clusterkit render x/t.yaml`)")


def test_an_image_without_digest_names_the_online_lock_for_that_file(
        here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: `(or run `make lock` with registry access)` for a spec outside the checkout."""
    (here / "x").mkdir()
    (here / "x" / "t.yaml").write_text(BASE_SPEC + IMAGES.replace(f"@{B}", ""), encoding="utf-8")
    assert run(capsys, "lock", "--offline", "x/t.yaml") == (2, [
        "t: image 'pytorch' (nvcr.io/nvidia/pytorch:25.01-py3) has no @sha256 digest; offline locking needs one (or "
        "run `clusterkit lock x/t.yaml` with registry access)"])


def test_the_simulation_note_names_the_commands_for_that_spec(here: Path) -> None:
    """Was: `clusterkit validate t --aws` and `make deploy CLUSTER=t`, which mean cluster_configs/t.yaml."""
    from clusterkit.paths import ROOT
    from clusterkit.pcluster.simulation import note

    result = {"path": "x/rendered/t.yaml", "simulated": [{"kind": "sg", "id": "sg-1"}], "suppressed": []}
    real = note(result, region="us-east-1", cluster="t", spec=here / "x" / "t.yaml").real_account_only
    assert real[-2].endswith("`clusterkit validate x/t.yaml --aws` reads the real ones)")
    assert real[-1] == (f"`make -C {ROOT} deploy CLUSTER={here.resolve()}/x/t.yaml` is the first check against your "
                        "account")
    inside = note(result, region="us-east-1", cluster="demo", spec=CONFIG_DIR / "demo.yaml").real_account_only
    assert inside[-2:] == ("the rules of the existing security groups sg-1 (the simulation gave them EFA's and "
                           "Lustre's; `clusterkit validate demo --aws` reads the real ones)",
                           "`make deploy CLUSTER=demo` is the first check against your account")


def test_the_missing_venv_hint_works_outside_the_checkout(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was `make pcluster-venv`, which only works in the checkout (its Makefile)."""
    from clusterkit.paths import ROOT
    from clusterkit.pcluster.runner import PclusterVenvMissing, require_pcluster_python

    monkeypatch.setenv("CLUSTERKIT_PCLUSTER_PYTHON", str(here / "none" / "python"))
    with pytest.raises(PclusterVenvMissing) as caught:
        require_pcluster_python()
    assert str(caught.value).startswith(f"ParallelCluster venv missing: run `make -C {ROOT} pcluster-venv`")


def test_status_names_the_deploy_of_that_spec(here: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Was `make deploy CLUSTER=t`: the checkout's cluster_configs/t.yaml, not the spec status was given."""
    from botocore.exceptions import ClientError

    from clusterkit.deployed import status_report
    from clusterkit.paths import ROOT

    class NoStacks:
        """CloudFormation of an account where no stack of the cluster exists (its own error, as boto3 raises it)."""

        def describe_stacks(self, StackName: str) -> dict[str, object]:  # noqa: N803 (boto3's keyword)
            raise ClientError({"Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not "
                                                                                "exist"}}, "DescribeStacks")

    monkeypatch.setattr(status_report, "cloudformation_client", lambda region: NoStacks())
    locked_spec(capsys, here)
    assert main(["status", "x/t.yaml"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"  no cluster: `make -C {ROOT} deploy CLUSTER={here.resolve()}/x/t.yaml` creates it (network and storage "
        "are reused)")
