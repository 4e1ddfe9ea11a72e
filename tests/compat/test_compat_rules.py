"""The rules data file and its evaluator (clusterkit_node/contract/compat.py).

Real: the committed clusterkit/data/compat_rules.json and the evaluator both clusterkit and the nodes
run. Every hand-written rule in the file has a passing and a failing case below (a new rule without cases
fails test_every_rule_has_cases); the driver tables are pinned to NVIDIA's published values, so editing one
is a deliberate act in two places. The rules generated from aws-ofi-nccl's release notes (ids ofi-notes-*)
are tested in test_compat_build.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "clusterkit" / "data" / "compat_rules.json"

# NVIDIA CUDA Toolkit Release Notes: Table 2 (minor version compatibility floor per major; 11.x's
# 450.80.02 from its footnote, 12.x's 525.60.13 = CUDA 12.0 GA) and Table 3 (driver of each GA release).
FLOOR = {"11": "450.80.02", "12": "525.60.13", "13": "580"}
TOOLKIT = {"12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06",
           "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26",
           "12.9": "575.51.03", "13.0": "580.65.06", "13.1": "590.44.01", "13.2": "595.45.04"}

# rule id -> (versions that pass, versions that fail, driver or None, text the failure must contain)
CASES = {
    "cuda-driver-floor": (
        {"cuda": "13.0.2"}, {"cuda": "13.0.2"}, ("580.65.06", "570.86.15"),
        "host driver 570.86.15 cannot run image img (CUDA 13.0.2 needs >= 580)"),
    "cuda-toolkit-driver": (
        {"cuda": "12.8.1"}, {"cuda": "12.8.1"}, ("570.124.06", "560.35.03"),
        "host driver 560.35.03 is older than 570.26, the driver of CUDA 12.8.1: image img runs in CUDA "
        "minor version compatibility mode only"),
    "nccl-2.19-needs-efa-installer-1.29": (
        {"nccl": "2.19.3", "efa_installer": "1.29.0"}, {"nccl": "2.19.3", "efa_installer": "1.28.0"}, None,
        "image img: NCCL 2.19.3 needs EFA installer >= 1.29 (it has 1.28.0)"),
}


def rule_ids(check_result) -> list[str]:
    return sorted(f.rule for f in check_result)


# --- the data file ------------------------------------------------------------------------------------

def test_data_file_is_canonical_json_with_provenance():
    text = RULES.read_text()
    doc = json.loads(text)
    assert text == json.dumps(doc, indent=2, sort_keys=True) + "\n", "keep it sorted, 2-space, newline"
    assert doc["source"] and re.fullmatch(r"\d{4}-\d\d-\d\d", doc["as_of"])
    for rule in doc["rules"]:
        assert re.search(r"https://\S+", rule["source"]), f"{rule['id']}: source needs a URL"
        assert len(rule["why"]) > 20, rule["id"]


def test_every_rule_has_cases(ruleset):
    assert sorted(i for i in ruleset.ids() if not i.startswith("ofi-notes-")) == sorted(CASES)


def test_driver_tables_match_nvidia_release_notes(ruleset):
    tables = {r.id: dict(r.min_driver) for r in ruleset.rules if r.kind == "driver_for_cuda"}
    assert tables == {"cuda-driver-floor": FLOOR, "cuda-toolkit-driver": TOOLKIT}
    levels = {r.id: r.level for r in ruleset.rules}
    assert levels["cuda-driver-floor"] == "error" and levels["cuda-toolkit-driver"] == "warning"


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_passes_and_fails(compat, ruleset, rule_id):
    good, bad, drivers, text = CASES[rule_id]
    ok_driver, bad_driver = drivers or (None, None)
    assert rule_id not in rule_ids(compat.check(ruleset, "img", good, ok_driver))
    found = [f for f in compat.check(ruleset, "img", bad, bad_driver) if f.rule == rule_id]
    assert len(found) == 1
    level = {r.id: r.level for r in ruleset.rules}[rule_id]
    assert found[0].level == level and found[0].message == text
    assert found[0].source and found[0].why


@pytest.mark.parametrize("table,rule_id", [(FLOOR, "cuda-driver-floor"), (TOOLKIT, "cuda-toolkit-driver")])
def test_every_driver_table_entry_at_its_boundary(compat, ruleset, table, rule_id):
    """At the minimum driver: fine. One below (patch, or previous branch for a bare major): broken."""
    for cuda, minimum in table.items():
        image_cuda = cuda + ".1" if "." in cuda else cuda + ".0.1"
        parts = [int(p) for p in minimum.split(".")]
        below = ".".join(map(str, parts[:-1] + [parts[-1] - 1])) if len(parts) > 1 else f"{parts[0] - 1}.99"
        assert rule_id not in rule_ids(compat.check(ruleset, "img", {"cuda": image_cuda}, minimum)), cuda
        broken = rule_ids(compat.check(ruleset, "img", {"cuda": image_cuda}, below))
        if compat.compare_versions(below, FLOOR[cuda.split(".")[0]]) < 0:
            assert broken == ["cuda-driver-floor"], (cuda, below)  # "cannot run" replaces the warning
        else:
            assert rule_id in broken, (cuda, below)


# --- evaluation semantics -----------------------------------------------------------------------------

def test_unknown_versions_are_never_guessed(compat, ruleset):
    # NCCL 2.21 with no EFA installer recorded (a source-built libfabric): nothing to judge.
    assert compat.check(ruleset, "img", {"nccl": "2.21.5"}) == []
    # CUDA known but no host driver (validate, or a CPU node): no driver finding.
    assert compat.check(ruleset, "img", {"cuda": "12.8"}) == []


def test_cannot_run_suppresses_the_compatibility_mode_warning(compat, ruleset):
    found = compat.check(ruleset, "img", {"cuda": "12.8.1"}, "470.256.02")
    assert [(f.rule, f.level) for f in found] == [("cuda-driver-floor", "error")]
    assert found[0].message == "host driver 470.256.02 cannot run image img (CUDA 12.8.1 needs >= 525.60.13)"


def test_uncovered_cuda_major_is_reported(compat, ruleset):
    found = compat.check(ruleset, "img", {"cuda": "14.0"}, "600.1")
    assert [(f.rule, f.level, f.component) for f in found] == [("compat-coverage", "warning", "cuda")]
    assert "no rule gives the minimum NVIDIA driver for CUDA 14.0" in found[0].message


def test_most_specific_cuda_key_wins(compat, ruleset):
    rule = next(r for r in ruleset.rules if r.id == "cuda-toolkit-driver")
    assert compat.driver_entry(rule, "12.8.1") == ("12.8", "570.26")
    assert compat.driver_entry(rule, "12.80") is None
    assert compat.driver_entry(rule, "12.7") is None  # there was no CUDA 12.7: only the floor applies


@pytest.mark.parametrize("a,b,expected", [
    ("2.19", "2.19.0", 0), ("2.19.3", "2.19", 1), ("2.18.6", "2.19", -1), ("1.22.0amzn4.0", "1.22.0", 1),
    ("1.22.0amzn4.0", "1.22.1", -1), ("1.22.0amzn3.0", "1.22.0amzn4.0", -1), ("2.1.0amzn3.0", "1.22.0amzn4.0", 1),
    ("580", "580.65.06", -1), ("580.65.06", "580", 1), ("570.124.06", "570.26", 1), ("2.30.4-1", "2.30.4", 1),
    ("1.10.0", "1.9.2", 1),
])
def test_version_order(compat, a, b, expected):
    assert compat.compare_versions(a, b) == expected
    assert compat.compare_versions(b, a) == -expected


@pytest.mark.parametrize("version,constraint,ok", [
    ("1.13.2", ">=1.10,<1.14", True), ("1.14.0", ">=1.10,<1.14", False), ("2.19.3", "!=2.19.3", False),
    ("2.19.3", "==2.19.3", True), ("2.19", "> 2.18", True), ("1.28.0", "<=1.28", True),
])
def test_constraints(compat, version, constraint, ok):
    assert compat.satisfies(version, constraint) is ok


# --- a broken rules file names every problem ----------------------------------------------------------

def test_rules_file_problems_are_all_reported(compat):
    doc = {
        "source": "", "as_of": "2026-11-30", "extra": 1,
        "rules": [
            {"id": "a", "kind": "requires", "level": "fatal", "if": {"ncl": ">=2"}, "then": {"nccl": "~2"},
             "why": "w", "source": "s"},
            {"id": "a", "kind": "driver_for_cuda", "level": "error", "min_driver": {"twelve": "525"},
             "message": "{driver} {gpu}", "why": "", "source": "s"},
            {"id": "b", "kind": "conflicts", "level": "error", "why": "w", "source": "s"},
        ],
    }
    with pytest.raises(compat.RulesError) as info:
        compat.parse_rules(doc, "r.json")
    assert info.value.lines == [
        "r.json: extra: unknown key (known: as_of, generated, rules, rules_version, source)",
        "r.json: source: missing or empty (say where the rules come from and when they were checked)",
        "r.json: rules[0] (a): level: 'fatal' is not one of error, warning",
        "r.json: rules[0] (a): if.ncl: unknown component (known: aws_ofi_nccl, cuda, efa_installer, "
        "libfabric, nccl, pytorch)",
        "r.json: rules[0] (a): then.nccl: '~2' is not a comparison like >=2.19",
        "r.json: rules[1] (a): id: duplicate rule id",
        "r.json: rules[1] (a): why: missing or empty (every rule explains itself and names its source)",
        "r.json: rules[1] (a): min_driver: key 'twelve' is not a CUDA major or major.minor like 12 or 12.8",
        "r.json: rules[1] (a): message: unknown placeholder(s) gpu (known: cuda, driver, image, min_driver)",
        "r.json: rules[2] (b): kind: 'conflicts' is not one of requires, driver_for_cuda",
    ]


def test_requires_message_templates_are_checked(compat):
    doc = {"source": "s", "as_of": "2026-11-30", "generated": [], "rules": [
        {"id": "no-if", "kind": "requires", "level": "warning", "then": {"nccl": "<3"}, "why": "w", "source": "s"},
        {"id": "bad-field", "kind": "requires", "level": "warning", "if": {"aws_ofi_nccl": ">=1"},
         "then": {"nccl": "<3"}, "message": "{image} {cuda}", "why": "w", "source": "s"},
        {"id": "empty", "kind": "requires", "level": "warning", "then": {"nccl": "<3"}, "message": "", "why": "w",
         "source": "s"},
    ]}
    with pytest.raises(compat.RulesError) as info:
        compat.parse_rules(doc, "r.json")
    assert info.value.lines == [
        "r.json: generated: not an object (the generated rules' provenance)",
        "r.json: rules[0] (no-if): message: required when the rule has no 'if' (say what the finding means)",
        "r.json: rules[1] (bad-field): message: unknown placeholder(s) cuda (known: aws_ofi_nccl, image, nccl)",
        "r.json: rules[2] (empty): message: not a template string",
    ]


def test_requires_without_if_and_with_a_message(compat):
    doc = {"source": "s", "as_of": "2026-11-30", "rules": [
        {"id": "range", "kind": "requires", "level": "warning", "then": {"aws_ofi_nccl": ">=1,<=1.21.1"},
         "message": "image {image}: aws-ofi-nccl {aws_ofi_nccl} is not covered", "why": "w", "source": "s"},
        {"id": "two", "kind": "requires", "level": "error", "if": {"aws_ofi_nccl": ">=1"},
         "then": {"nccl": ">=2.17", "libfabric": ">=1.18"},
         "message": "image {image}: ofi {aws_ofi_nccl} nccl {nccl} libfabric {libfabric}", "why": "w", "source": "s"},
    ]}
    rules = compat.parse_rules(doc)
    assert [f.message for f in compat.check(rules, "img", {"aws_ofi_nccl": "1.22.0"})] == [
        "image img: aws-ofi-nccl 1.22.0 is not covered"]
    assert compat.check(rules, "img", {"nccl": "2.1"}) == []  # aws-ofi-nccl unknown: nothing to judge
    # a component the image does not reveal reads "unknown" in the template, it never raises
    assert [f.message for f in compat.check(rules, "img", {"aws_ofi_nccl": "1.9", "nccl": "2.4"})] == [
        "image img: ofi 1.9 nccl 2.4 libfabric unknown"]


def test_unreadable_rules_file(compat, tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text('{"rules": [\n')
    with pytest.raises(compat.RulesError) as info:
        compat.load_rules(str(bad))
    assert info.value.lines[0].startswith(f"{bad}:2:1: not valid JSON")
    with pytest.raises(compat.RulesError) as info:
        compat.load_rules(str(tmp_path / "missing.json"))
    assert "cannot read compatibility rules" in info.value.lines[0]


def test_coverage_marks_untested_rather_than_incompatible():
    """``coverage: true`` keeps the finding's level and marks it as the makers' notes not covering the pairing
    (validate reports it as image-combination-untested); anything but a boolean is refused."""
    from clusterkit_node.contract import compat as node_compat
    rule = {"id": "r", "kind": "requires", "level": "warning", "if": {"aws_ofi_nccl": "==1.21.1"},
            "then": {"nccl": "<2.32"}, "coverage": True, "why": "w", "source": "s"}
    ruleset = node_compat.parse_rules({"source": "s", "as_of": "2026-12-02", "rules": [rule]})
    (finding,) = node_compat.check(ruleset, "img", {"aws_ofi_nccl": "1.21.1", "nccl": "2.32.3"})
    assert (finding.coverage, finding.level) == (True, "warning")
    assert node_compat.check(ruleset, "img", {"aws_ofi_nccl": "1.21.1", "nccl": "2.31.5"}) == []
    with pytest.raises(node_compat.RulesError, match=r"coverage: 'yes' is not true or false"):
        node_compat.parse_rules({"source": "s", "as_of": "2026-12-02", "rules": [{**rule, "coverage": "yes"}]})
