"""The structural diff under ``clusterkit diff``: matching by name, lists as sets, absent vs null.

Pure Python, no git and no ParallelCluster: the documents are written inline.
"""
from __future__ import annotations

from clusterkit.diff.structure import MISSING, Change, Item, diff_values
from clusterkit.diff.text import before_after, show


def dotted(changes: list[Change]) -> list[str]:
    return [c.dotted for c in changes]


def test_named_elements_match_by_name_not_position() -> None:
    old = {"SlurmQueues": [{"Name": "gpu", "MaxCount": 4}, {"Name": "cpu", "MaxCount": 8}]}
    new = {"SlurmQueues": [{"Name": "cpu", "MaxCount": 8}, {"Name": "gpu", "MaxCount": 6}]}
    (change,) = diff_values(old, new)
    assert change.path == ("SlurmQueues", Item("gpu"), "MaxCount")
    assert (change.dotted, change.old, change.new, change.kind) == ("SlurmQueues[gpu].MaxCount", 4, 6, "changed")


def test_reordering_a_named_list_is_no_change() -> None:
    tags = [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]
    assert diff_values({"Tags": tags}, {"Tags": list(reversed(tags))}) == []


def test_added_and_removed_elements_are_whole_changes() -> None:
    old = {"images": [{"name": "pytorch", "digest": "x"}, {"name": "old", "digest": "y"}]}
    new = {"images": [{"name": "pytorch", "digest": "x"}, {"name": "new", "digest": "z"}]}
    changes = diff_values(old, new)
    assert [(c.dotted, c.kind) for c in changes] == [("images[old]", "removed"), ("images[new]", "added")]
    assert changes[1].new == {"name": "new", "digest": "z"} and changes[1].old is MISSING


def test_unnamed_mappings_match_by_index() -> None:
    old = {"Sequence": [{"Script": "a.sh", "Args": []}, {"Script": "b.sh", "Args": []}]}
    new = {"Sequence": [{"Script": "a.sh", "Args": ["X=1"]}, {"Script": "b.sh", "Args": []}]}
    (change,) = diff_values(old, new)
    assert change.dotted == "Sequence[0].Args"


def test_plain_and_one_key_lists_change_as_a_whole_and_show_only_what_differs() -> None:
    old = {"Args": ["CK_CLUSTER=demo", "CK_BUNDLE_SHA256=" + "a" * 64],
           "AdditionalIamPolicies": [{"Policy": "arn:one"}, {"Policy": "arn:two"}]}
    new = {"Args": ["CK_CLUSTER=demo", "CK_BUNDLE_SHA256=" + "b" * 64],
           "AdditionalIamPolicies": [{"Policy": "arn:two"}, {"Policy": "arn:three"}]}
    args, policies = diff_values(old, new)
    assert (args.dotted, policies.dotted) == ("Args", "AdditionalIamPolicies")
    assert before_after(args) == ("CK_BUNDLE_SHA256=aaaaaaaaaaaa…", "CK_BUNDLE_SHA256=bbbbbbbbbbbb…")
    assert before_after(policies) == ("Policy: arn:one", "Policy: arn:three")


def test_absent_null_and_type_changes_are_told_apart() -> None:
    assert [(c.kind, c.old, c.new) for c in diff_values({"a": None}, {})] == [("removed", None, MISSING)]
    assert diff_values({"a": 1}, {"a": 1}) == []
    assert len(diff_values({"a": 1}, {"a": True})) == 1  # YAML `true` is not `1`
    assert len(diff_values({"a": 1}, {"a": "1"})) == 1


def test_whole_documents_added_or_removed() -> None:
    (change,) = diff_values(MISSING, {"name": "x"})
    assert (change.dotted, change.kind) == ("(whole file)", "added")
    assert diff_values(MISSING, MISSING) == []


def test_values_show_on_one_line_with_hashes_shortened() -> None:
    assert show({"Enabled": True, "Id": None}) == "{Enabled: true, Id: null}"
    assert show("sha256:" + "0123456789abcdef" * 4) == "sha256:0123456789ab…"
    assert len(show("x" * 500)) == 90
    assert show(MISSING) == ""


def test_cost_delta_without_the_cost_module_says_so(monkeypatch) -> None:
    import sys

    from clusterkit.diff.report import _cost_delta

    monkeypatch.setitem(sys.modules, "clusterkit.cost.estimate", None)  # import now raises ImportError
    assert _cost_delta("name: x\n", "name: x\n").startswith("cost delta unavailable (")


def test_markdown_is_cut_to_fit_a_github_comment() -> None:
    from clusterkit.diff.report import ClusterDiff, Report
    from clusterkit.diff.text import MARKDOWN_LIMIT, render_markdown

    spec = tuple(Change(("queues", Item(f"q{i}"), "max"), i, i + 1) for i in range(5000))
    text = render_markdown(Report("main", "0" * 40, (ClusterDiff("big", "changed", spec=spec),)))
    assert len(text) <= MARKDOWN_LIMIT + 200
    assert text.endswith("… truncated to fit a GitHub comment: run `python -m clusterkit diff` for all of it.\n")
    small = render_markdown(Report("main", "0" * 40, (ClusterDiff("big", "changed", spec=spec[:3]),)))
    assert "truncated" not in small and "| `queues[q2].max` | `2` | `3` |" in small
