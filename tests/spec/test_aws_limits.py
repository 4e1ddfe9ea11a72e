"""AWS and ParallelCluster limits (clusterkit.rules.aws_limits, data in clusterkit/data/aws_limits.json).

Real: the shipped specs, edited one line at a time, parsed by the spec loader's own parser; the data file; the
instance-type catalog; the installed aws-parallelcluster wheel and its validation when .venv-pcluster exists.
Stand-in: moto for AWS in that validation (clusterkit.pcluster.check, as in tests/pcluster).
Each bad spec gets exactly the one-line problems asserted, file:line:col first, as `validate` prints them.
"""
from __future__ import annotations

import datetime
import re
import shutil
from pathlib import Path

import pytest
import yaml

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.catalog import lookup as catalog
from clusterkit.effective.expand import expand_spec
from clusterkit.pcluster.runner import pcluster_python, run_check
from clusterkit.pipeline.loader import CONFIG_DIR, Loaded
from clusterkit.render.pcluster_config import placeholder_refs, render_config
from clusterkit.render.rendered_files import NoAliasDumper
from clusterkit.rules import aws_limits
from clusterkit.spec.model import LoadedSpec, parse_spec
from tests import shipped

CHECKED = "2026-12-01"
TAG = "  project: clusterkit-demo\n"
FSX = "      compression: LZ4\n"
KMS_KEY = "arn:aws:kms:{region}:123456789012:key/12345678-1234-1234-1234-123456789012"
MRK_KEY = "arn:aws:kms:{region}:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab"
CHARS = "letters, digits, spaces and _ . : / = + - @"
LONG_KEY = "k" * 129


def _spec_file(tmp_path: Path, base: str, old: str, new: str) -> Path:
    """cluster_configs/<base>.yaml with one edit, written to tmp_path next to a copy of its image lock."""
    text = (CONFIG_DIR / f"{base}.yaml").read_text(encoding="utf-8")
    assert old in text, old
    path = tmp_path / f"{base}.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    lock = CONFIG_DIR / f"{base}.images.lock"
    if lock.exists():
        shutil.copy(lock, tmp_path / lock.name)
    return path


def _problems(path: Path) -> list[str]:
    """What aws_limits.check says of a spec file that parses cleanly, without the leading `<path>:`."""
    spec, marks, parse_problems = parse_spec(path.read_text(encoding="utf-8"), str(path))
    assert spec is not None and parse_problems == [], [p.render() for p in parse_problems]
    lines = [p.render() for p in aws_limits.check(spec, marks)]
    prefix = f"{path}:"
    assert all(line.startswith(prefix) and "\n" not in line for line in lines), lines
    return [line[len(prefix):] for line in lines]


CASES = [
    ("39 tags: ParallelCluster's 40 less the two added",
     "demo", TAG, TAG + "".join(f"  t{i}: x\n" for i in range(38)),
     [("69:3: tags: 39 tags, at most 38 fit (ParallelCluster allows 40 cluster tags and clusterkit:cluster, "
       "parallelcluster:custom_resource are added to yours)")]),
    ("aws: prefix in any case", "demo", TAG, TAG + "  AWS:owner: me\n",
     [("70:3: tags.AWS:owner: tag key 'AWS:owner' starts with aws:, which AWS reserves for its own tags "
       "(rename the key)")]),
    ("parallelcluster: prefix", "demo", TAG, TAG + "  parallelcluster:team: ml\n",
     [("70:3: tags.parallelcluster:team: tag key 'parallelcluster:team' starts with parallelcluster:, which "
       "ParallelCluster reserves (rename the key; ParallelCluster refuses the cluster otherwise)")]),
    ("user tag replacing ClusterKit's own", "demo", TAG, TAG + "  clusterkit:cluster: other\n",
     [("70:3: tags.clusterkit:cluster: tag key 'clusterkit:cluster' would replace ClusterKit's own tag "
       "(ClusterKit sets it to the cluster name on every resource; use another key)")]),
    ("character AWS tags refuse, in a key", "demo", TAG, TAG + "  cost,center: x\n",
     [f"70:3: tags.cost,center: tag key 'cost,center' contains ',', which AWS tags do not allow ({CHARS})"]),
    ("character AWS tags refuse, in a value", "demo", TAG, '  project: "clusterkit demo; 2026"\n',
     [(f"69:12: tags.project: tag value 'clusterkit demo; 2026' contains ';', which AWS tags do not allow "
       f"({CHARS})")]),
    ("newline in a key, still one line", "demo", TAG, TAG + '  "cost\\ncenter": x\n',
     [f"70:3: tags.cost\\ncenter: tag key 'cost\\ncenter' contains '\\n', which AWS tags do not allow ({CHARS})"]),
    ("key too long", "demo", TAG, TAG + f"  {LONG_KEY}: x\n",
     [f"70:3: tags.{LONG_KEY}: tag key is 129 characters long (AWS allows 1 to 128)"]),
    ("value too long", "demo", TAG, "  project: " + "v" * 257 + "\n",
     ["69:12: tags.project: tag value is 257 characters long (AWS allows at most 256)"]),
    ("KMS key in another region", "demo", FSX, FSX + f"      kms_key_arn: {KMS_KEY.format(region='us-west-2')}\n",
     [("28:20: storage.fsx_lustre.new.kms_key_arn: the KMS key is in us-west-2, the cluster in us-east-1 (KMS keys "
       "are regional: use a key (or a multi-Region replica) in us-east-1)")]),
    ("multi-Region key in another region", "demo", FSX,
     FSX + f"      kms_key_arn: {MRK_KEY.format(region='eu-west-1')}\n",
     [("28:20: storage.fsx_lustre.new.kms_key_arn: the KMS key is in eu-west-1, the cluster in us-east-1 (KMS keys "
       "are regional: use a key (or a multi-Region replica) in us-east-1)")]),
    ("head node root volume over ParallelCluster's gp3 limit", "demo",
     "  root_volume_gib: 200\n", "  root_volume_gib: 20000\n",
     [("19:20: head_node.root_volume_gib: 20000 GiB is larger than ParallelCluster allows for a gp3 root volume "
       "(at most 16384 GiB: EBS allows more since 2025, ParallelCluster still checks the old limit)")]),
    ("capacity block on a family without Capacity Blocks", "p5-capacity-block",
     "instance_type: p5.48xlarge", "instance_type: g6e.48xlarge",
     [("30:24: queues[0].compute_resources[0].instance_type: g6e.48xlarge has no Capacity Blocks: EC2 sells none "
       "for the g6e family (Capacity Blocks exist for p4d, p4de, p5, p5e, p5en, p6-b200, p6-b300, p6e-gb200, trn1, "
       "trn2, trn2u; else use ondemand or spot)")]),
    ("capacity block nodes beyond the largest block, without its count", "p5-capacity-block",
     "        min: 16\n        max: 16\n", "        min: 100\n        max: 100\n",
     [("32:14: queues[0].compute_resources[0].max: 100 instances is more than one Capacity Block holds (EC2 sells "
       "blocks of 1, 2, 4, 8, 16, 32, 64 instances)")]),
    ("capacity block on a size AWS does not list", "p5-capacity-block",
     "instance_type: p5.48xlarge", "instance_type: trn1.2xlarge",
     [("30:24: warning[capacity-block-size-unlisted]: queues[0].compute_resources[0].instance_type: trn1.2xlarge is "
       "not among the Capacity Block sizes AWS lists (listed trn1 sizes: trn1.32xlarge)")]),
]


@pytest.mark.parametrize("base,old,new,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_limit_reports_exact_line(tmp_path, base, old, new, expected):
    assert _problems(_spec_file(tmp_path, base, old, new)) == expected


@pytest.mark.parametrize("base,old,new", [
    ("demo", TAG, TAG + "".join(f"  t{i}: x\n" for i in range(37))),  # 38 tags: exactly the ceiling
    ("demo", FSX, FSX + f"      kms_key_arn: {KMS_KEY.format(region='us-east-1')}\n"),
    ("demo", FSX, FSX + f"      kms_key_arn: {MRK_KEY.format(region='us-east-1')}\n"),  # replica in the region
    ("demo", TAG, '  project: "Équipe ML / team+gpu=1 @hq"\n'),  # Unicode letters and every allowed symbol
    ("demo", "  root_volume_gib: 200\n", "  root_volume_gib: 16384\n"),
    ("p5-capacity-block", "instance_type: p5.48xlarge", "instance_type: p5en.48xlarge"),
], ids=["38 tags", "KMS key in the region", "multi-Region replica in the region", "every allowed character",
        "16384 GiB head root", "p5en capacity block"])
def test_within_limits(tmp_path, base, old, new):
    assert _problems(_spec_file(tmp_path, base, old, new)) == []


@pytest.mark.parametrize("path", shipped.spec_paths(), ids=lambda p: p.stem)
def test_shipped_specs_pass(path):
    assert _problems(path) == []


def test_every_entry_names_its_source_and_date():
    entries = aws_limits.raw()
    assert entries
    for name, entry in entries.items():
        assert "value" in entry, name
        assert isinstance(entry.get("source"), str) and len(entry["source"]) > 20, name
        assert datetime.date.fromisoformat(entry["checked"]).isoformat() == CHECKED, name


def test_capacity_block_types_are_in_the_catalog():
    """Every instance type the Capacity Blocks pages name is one the catalog knows, but p6e-gb200 (Grace,
    never in the catalog); a new type on the page then shows up here before it could be checked wrongly."""
    entries = aws_limits.raw()
    listed = {t for name in ("capacity_block_instance_types", "capacity_block_ultraserver_instance_types",
                             "capacity_block_other_instance_types") for t in entries[name]["value"]}
    assert sorted(t for t in listed if catalog.instance_type(t) is None) == ["p6e-gb200.36xlarge"]


def test_kms_key_region():
    assert aws_limits.kms_key_region(KMS_KEY.format(region="eu-central-1")) == "eu-central-1"
    assert aws_limits.kms_key_region(MRK_KEY.format(region="ap-south-1")) == "ap-south-1"
    assert aws_limits.kms_key_region("arn:aws:kms:us-east-1:123456789012:alias/mine") is None


def _pcluster_source(rel: str) -> str:
    root = Path(__file__).resolve().parents[2]
    found = sorted(root.glob(f".venv-pcluster/lib/python3*/site-packages/pcluster/{rel}"))
    if not found:
        pytest.skip(".venv-pcluster is not installed (make pcluster-venv)")
    return found[-1].read_text(encoding="utf-8")


def test_data_agrees_with_installed_parallelcluster():
    """The ParallelCluster facts in the data file are the installed wheel's: a PC upgrade that moves one fails here."""
    v = {name: entry["value"] for name, entry in aws_limits.raw().items()}
    constants = _pcluster_source("constants.py")
    max_tags = re.search(r"^MAX_TAGS_COUNT = (\d+)", constants, re.MULTILINE)
    assert max_tags and int(max_tags.group(1)) == v["parallelcluster_cluster_tags_max"]
    prefix = re.search(r'^PCLUSTER_PREFIX = "([^"]+)"', constants, re.MULTILINE)
    assert prefix and prefix.group(1) == v["tag_key_reserved_prefix_parallelcluster"]
    bounds = re.search(r'"gp3": \((\d+), (\d+) \* 1024\)', _pcluster_source("validators/ebs_validators.py"))
    gp3 = v["parallelcluster_gp3_size_gib"]
    assert bounds and (int(bounds.group(1)), int(bounds.group(2)) * 1024) == (gp3["min"], gp3["max"])


# (edit of demo.yaml, ParallelCluster validator expected to refuse it or None): each side of a limit above
AGREEMENT = [
    ((TAG, TAG + "".join(f"  t{i}: x\n" for i in range(37))), None),  # 38 tags: the most that fit
    ((TAG, TAG + "".join(f"  t{i}: x\n" for i in range(38))), "ComputeResourceTagsValidator"),
    (("  root_volume_gib: 200\n", "  root_volume_gib: 16384\n"), None),
    (("  root_volume_gib: 200\n", "  root_volume_gib: 16385\n"), "EbsVolumeTypeSizeValidator"),
    ((TAG, TAG + "  parallelcluster:team: ml\n"), "ConfigSchemaValidator"),
    ((TAG, TAG + "  ParallelCluster:team: ml\n"), None),  # ParallelCluster's prefix check is case-sensitive
]


def test_parallelcluster_draws_the_same_lines():
    """Real ParallelCluster 3.16.1 validation (moto for AWS, as in tests/pcluster) of the rendered demo with each
    edit, plus the parallelcluster:custom_resource tag its CloudFormation provider appends before validating:
    it refuses exactly the edits aws_limits reports, so the limits are neither looser nor stricter."""
    if not pcluster_python().exists():
        pytest.skip("run `make pcluster-venv`")
    demo = (CONFIG_DIR / "demo.yaml").read_text(encoding="utf-8")
    configs, ours = [], []
    for (old, new), _ in AGREEMENT:
        spec, marks, problems = parse_spec(demo.replace(old, new, 1), "demo.yaml")
        assert spec is not None and not problems
        ours.append([p.render() for p in aws_limits.check(spec, marks) if p.level == "error"])
        loaded = Loaded(spec=spec, source=LoadedSpec(spec=spec, path=CONFIG_DIR / "demo.yaml", marks=marks))
        effective = expand_spec(spec)
        config = render_config(effective, placeholder_refs(effective), node_artifacts(loaded))
        config["Tags"] += [{"Key": key, "Value": "cluster"}
                           for key in aws_limits.raw()["parallelcluster_provider_tag_keys"]["value"]]
        configs.append((spec.name, "demo.yaml", yaml.dump(config, Dumper=NoAliasDumper, sort_keys=False), spec.region))
    for (_, theirs), mine, result in zip(AGREEMENT, ours, run_check(configs, "validate"), strict=True):
        refused = {e["type"] for e in result["errors"] if e["level"] == "ERROR"}
        assert (theirs in refused if theirs else not refused), result["errors"]
        assert bool(mine) == bool(theirs), mine
