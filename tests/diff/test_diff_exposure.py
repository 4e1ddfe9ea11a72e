"""What a running compute node keeps until ParallelCluster replaces it, said by `clusterkit diff` (docs/security.md
"Residual risks"): the IMDS lock runs at OnNodeStart, which a running node never runs again."""
from __future__ import annotations

import copy

import yaml

from clusterkit.diff.impact import exposure_notes
from clusterkit.diff.structure import diff_values
from clusterkit.paths import CONFIG_DIR

RENDERED = CONFIG_DIR / "rendered" / "demo.yaml"


def _with_imds(config: dict, value: str | None) -> dict:
    out = copy.deepcopy(config)
    for queue in out["Scheduling"]["SlurmQueues"]:
        for action in ("OnNodeStart", "OnNodeConfigured"):
            args = [a for a in queue["CustomActions"][action]["Args"] if not a.startswith("CK_COMPUTE_IMDS=")]
            if value is not None:
                args.insert(5, f"CK_COMPUTE_IMDS={value}")
            queue["CustomActions"][action]["Args"] = args
    return out


def test_an_older_render_without_the_lock_says_running_nodes_stay_open_until_replaced():
    head = yaml.safe_load(RENDERED.read_text(encoding="utf-8"))
    base = _with_imds(head, None)
    (note,) = exposure_notes(diff_values(base, head), head)
    assert note == ("security.compute_imds root_only reaches queue(s) cpu, gpu only as their nodes are replaced "
                    "(nodes replaced as their jobs finish): until then a running node keeps IMDS, and the compute "
                    "role, open to its jobs (the job-user guard covers it from this deploy on)")
    head["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] = "TERMINATE"
    (note,) = exposure_notes(diff_values(base, head), head)
    assert "(running jobs stopped, nodes replaced)" in note


def test_opening_imds_again_says_running_nodes_stay_locked():
    head = yaml.safe_load(RENDERED.read_text(encoding="utf-8"))
    (note,) = exposure_notes(diff_values(head, _with_imds(head, "all_users")), _with_imds(head, "all_users"))
    assert note.startswith("security.compute_imds all_users: running nodes of queue(s) cpu, gpu keep IMDS locked")


def test_other_changes_say_nothing():
    head = yaml.safe_load(RENDERED.read_text(encoding="utf-8"))
    other = copy.deepcopy(head)
    other["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeStart"]["Args"][-1] = "PYXIS_USE_SQUASHFUSE=0"
    assert exposure_notes(diff_values(head, other), other) == []
    assert exposure_notes(diff_values(head, head), head) == []
