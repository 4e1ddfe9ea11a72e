"""What the spec accepts beyond the bad-spec cases (issue 25, item 5): YAML 1.1 merge keys, the mount
directories ParallelCluster allows, the spec reference and validate agreeing, a broken symlink as one line.
The refused values themselves are cases of test_bad_specs.py."""
from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from clusterkit.pipeline.loader import load
from clusterkit.render.spec_reference import spec_reference
from clusterkit.spec.model import REFUSED_OS, OsName, parse_spec
from tests import in_process
from tests.spec_text import BASE_SPEC

ROOT = Path(__file__).resolve().parents[2]

MERGED = """\
name: t
region: us-east-1
availability_zone: us-east-1a
tags:
  <<: {team: ml, owner: a}
  owner: b
queues:
  - name: gpu
    compute_resources:
      - &p5
        name: p5
        instance_type: p5.48xlarge
        max: 2
      - <<: *p5
        name: p5b
        max: 1
      - <<: [{efa: false}, *p5]
        name: p5c
"""


def test_merge_keys_are_read_as_pyyaml_reads_them(tmp_path):
    """Written keys win over merged ones, the first merged mapping over later ones, as yaml.safe_load does."""
    import yaml

    path = tmp_path / "t.yaml"
    path.write_text(MERGED)
    spec = load(str(path), check_lock=False).spec
    plain = yaml.safe_load(MERGED)
    for i, cr in enumerate(spec.queues[0].compute_resources):
        assert {k: getattr(cr, k) for k in plain["queues"][0]["compute_resources"][i]} == \
            plain["queues"][0]["compute_resources"][i]
    assert spec.tags == plain["tags"] == {"team": "ml", "owner": "b"}


def test_merged_values_keep_the_position_where_they_are_written():
    _, marks, problems = parse_spec(MERGED.replace("instance_type: p5.48xlarge", "instance_type: 5"), "t.yaml")
    # the anchor's value is wrong once in the file, and each entry that merges it says so at that line
    assert [p.render() for p in problems] == [
        f"t.yaml:12:24: queues[0].compute_resources[{i}].instance_type: expected a string, got integer '5' "
        '(quote it: "5")' for i in range(3)]
    assert marks.at("queues[0].compute_resources[1].max") == (16, 14)  # written in the entry: its own line


def test_merge_key_through_the_cli(tmp_path):
    """The CLI's entry point (tests/in_process.py) validates a spec with merge keys; it refused them before."""
    path = tmp_path / "t.yaml"
    path.write_text(MERGED)
    done = in_process.clusterkit("validate", str(path), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}: ok (t; GPU nodes: nvidia-container-cli 1.18.2 (rpm, via the store))"


def test_a_merge_that_contains_itself_is_one_line():
    text = BASE_SPEC + "tags: &t\n  <<: *t\n  team: ml\n"
    _, _, problems = parse_spec(text, "t.yaml")
    assert [p.render() for p in problems] == [
        "t.yaml:11:3: tags.<<: the merged mapping contains this merge key itself (merge another anchor)"]


@pytest.mark.parametrize("mount_dir", ["/fsx", "/mnt/fsx", "/var/fsx", "/opt/data", "/data/lustre", "/tmp/x"])
def test_mount_dirs_parallelcluster_allows_below_its_reserved_ones(tmp_path, mount_dir):
    path = tmp_path / "t.yaml"
    path.write_text(BASE_SPEC + f"storage:\n  fsx_lustre:\n    mount_dir: {mount_dir}\n")
    assert load(str(path), check_lock=False).spec.storage.fsx_lustre.mount_dir == mount_dir


def test_the_spec_reference_and_validate_agree_on_os(tmp_path):
    """Every OS the reference lists loads; every OS it says 'not' is refused with the same reason (issue 25:
    the reference listed rhel8, validate refused it)."""
    row = next(line for line in spec_reference().splitlines() if line.startswith("| `os` |"))
    listed = row.split(" | ")[1].split(" \\| ")
    assert listed == list(typing.get_args(OsName))
    path = tmp_path / "t.yaml"
    for os_name in listed:
        path.write_text(BASE_SPEC + f"os: {os_name}\n")
        assert load(str(path), check_lock=False).spec.os == os_name
    for os_name, why in REFUSED_OS.items():
        assert f"not {os_name}: {why}" in row
        _, _, problems = parse_spec(BASE_SPEC + f"os: {os_name}\n", "t.yaml")
        assert [p.message for p in problems] == [f"{os_name} is not supported: {why}"]
    committed = (ROOT / "docs" / "spec-reference.md").read_text()
    assert row in committed.splitlines(), "docs/spec-reference.md is stale: run `make render`"


def test_broken_symlink_is_one_line_naming_it_and_its_target(tmp_path, monkeypatch, capsys):
    from clusterkit.cli.main import main

    (tmp_path / "t.yaml").symlink_to("gone.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "t.yaml"]) == 2
    err = capsys.readouterr().err
    assert err == ("t.yaml: broken symbolic link to gone.yaml: nothing is there "
                   "(point the link at a spec, or remove it)\n")
    assert not re.search(r"Traceback|known clusters", err)
