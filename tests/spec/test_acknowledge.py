"""Acknowledged warnings: a spec's ``acknowledge: [{id, reason}]`` accepts warnings by id, ``validate`` stops
reporting them (``--strict`` then passes), a stale entry is itself a warning, and a bad entry is an error on
its line. Real: the CLI, loader, rules and advice on copies of the shipped demo spec and its lock, exact lines
asserted. The copies warn exactly ``image-fanout-slow``: they leave out the demo's own acknowledge block and the
nccl-tests image's ``aws_ofi_nccl`` expectation, whose untested pairing that block acknowledges."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from clusterkit.cli.main import main
from clusterkit.paths import CONFIG_DIR
from clusterkit.pipeline.loader import load
from clusterkit.render.rendered_files import rendered_text
from clusterkit.spec.errors import SpecError

SHIPPED = (CONFIG_DIR / "demo.yaml").read_text(encoding="utf-8")
DEMO = SHIPPED[: SHIPPED.index("\nacknowledge:\n") + 1].replace("        aws_ofi_nccl: 1.19.0\n", "")
DEMO_LINES = DEMO.count("\n")  # the k-th appended line is line DEMO_LINES + k
FANOUT = "storage.fsx_lustre.new.throughput_mb_per_tib"
SMALL_CPU_ROOT = ("    root_volume_gib: 100   #", "    root_volume_gib: 40   #")  # the cpu queue: 100 GiB needed

GPU = "; GPU nodes: nvidia-container-cli 1.18.2 (deb, via the store)"  # what the ok line says of GPU queues


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def demo(tmp_path: Path, acknowledge: str = "", *, replace: tuple[str, str] | None = None) -> Path:
    """A copy of demo.yaml (with its lock) in tmp_path, with ``acknowledge`` (YAML) appended."""
    lock = json.loads((CONFIG_DIR / "demo.images.lock").read_text(encoding="utf-8"))
    for image in lock["images"]:  # as DEMO: without the aws_ofi_nccl expectation
        image["expect"].pop("aws_ofi_nccl", None)
    (tmp_path / "demo.images.lock").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    text = DEMO
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    path = tmp_path / "demo.yaml"
    path.write_text(text + textwrap.dedent(acknowledge), encoding="utf-8")
    return path


ACK_FANOUT = """\
acknowledge:
  - id: image-fanout-slow
    reason: demo jobs start on a few nodes at a time
"""


# --- ids are shown ------------------------------------------------------------------------------------------------

def test_text_shows_the_id_after_the_position(capsys):
    code, out, err = run(capsys, "validate", "demo")
    assert code == 0
    assert out == f"cluster_configs/demo.yaml: ok (demo{GPU}; 1 acknowledged warning: image-combination-untested)\n"
    assert err.startswith(f"cluster_configs/demo.yaml:26:30: warning[image-fanout-slow]: {FANOUT}: image fan-out: ")


def test_json_has_the_id_and_an_empty_acknowledged_list(capsys, tmp_path):
    code, out, _ = run(capsys, "validate", "--format", "json", str(demo(tmp_path)))
    data = json.loads(out)
    (warning,) = data["problems"]
    assert (code, warning["id"], warning["path"], data["acknowledged"]) == (0, "image-fanout-slow", FANOUT, [])


# --- acknowledging ------------------------------------------------------------------------------------------------

def test_acknowledging_removes_exactly_that_warning(tmp_path):
    """demo with a 40 GiB CPU root volume warns twice; acknowledging the fan-out leaves the other one."""
    both = load(str(demo(tmp_path, replace=SMALL_CPU_ROOT))).warnings
    assert sorted(w.id for w in both) == ["compute-root-volume-small", "image-fanout-slow"]
    loaded = load(str(demo(tmp_path, ACK_FANOUT, replace=SMALL_CPU_ROOT)))
    assert loaded.warnings == [w for w in both if w.id != "image-fanout-slow"]
    (accepted,) = loaded.acknowledged
    assert accepted.problem == next(w for w in both if w.id == "image-fanout-slow")
    assert accepted.reason == "demo jobs start on a few nodes at a time"


def test_acknowledged_text_and_json(tmp_path, capsys):
    path = demo(tmp_path, ACK_FANOUT)
    code, out, err = run(capsys, "validate", str(path))
    assert (code, err) == (0, "")
    assert out == f"{path}: ok (demo{GPU}; 1 acknowledged warning: image-fanout-slow)\n"
    code, out, _ = run(capsys, "validate", "--format", "json", str(path))
    data = json.loads(out)
    assert (code, data["ok"], data["problems"]) == (0, True, [])
    (accepted,) = data["acknowledged"]
    assert set(accepted) == {"file", "line", "col", "path", "message", "hint", "level", "id", "reason"}
    assert (accepted["id"], accepted["path"], accepted["line"], accepted["col"], accepted["level"]) == (
        "image-fanout-slow", FANOUT, 26, 30, "warning")
    assert accepted["reason"] == "demo jobs start on a few nodes at a time"
    assert run(capsys, "validate", "--format", "github", str(path))[:2] == (0, "")


def test_an_acknowledged_warning_stays_quiet_beside_errors(tmp_path):
    """A spec with an error still reports every error, and no warning it acknowledges."""
    not_in_az = ("instance_type: p5.48xlarge", "instance_type: p4de.24xlarge")  # the catalog: not in us-east-1a
    for ack, expected in (("", [("error", ""), ("warning", "instance-type-not-in-az")]), (
            "acknowledge:\n  - id: instance-type-not-in-az\n    reason: reserved capacity in 1a\n", [("error", "")])):
        path = demo(tmp_path, ack, replace=not_in_az)
        path.write_text(path.read_text().replace("ttl_hours: 72", "ttl_hours: 1"))  # an error: below 2 hours
        with pytest.raises(SpecError) as info:
            load(str(path))
        assert sorted((p.level, p.id) for p in info.value.problems) == expected, info.value.lines()


def test_an_unused_acknowledgement_warns_on_its_line(tmp_path, capsys):
    path = demo(tmp_path, ACK_FANOUT + "  - id: capacity-block-partial\n    reason: the old block\n")
    code, out, err = run(capsys, "validate", str(path))
    line = DEMO_LINES + 4  # acknowledge:, the fan-out's id and reason, then this id
    assert code == 0 and out == f"{path}: ok (demo{GPU}; 1 acknowledged warning: image-fanout-slow)\n"
    assert err == (f"{path}:{line}:9: warning[acknowledgement-unused]: acknowledge[1].id: capacity-block-partial is "
                   "acknowledged, but this spec raises no such warning (remove the entry: what it accepted is gone)\n")


# --- --strict -----------------------------------------------------------------------------------------------------

def test_strict_fails_on_an_unacknowledged_warning(capsys):
    code, out, err = run(capsys, "validate", "--strict", "demo")
    assert (code, out) == (2, "")
    assert err.startswith(f"cluster_configs/demo.yaml:26:30: error[image-fanout-slow]: {FANOUT}: ")
    data = json.loads(run(capsys, "validate", "--strict", "--format", "json", "demo")[1])
    assert [(p["level"], p["id"]) for p in data["problems"]] == [("error", "image-fanout-slow")]


def test_strict_passes_when_every_warning_is_acknowledged(tmp_path, capsys):
    path = demo(tmp_path, ACK_FANOUT)
    assert run(capsys, "validate", "--strict", str(path)) == (
        0, f"{path}: ok (demo{GPU}; 1 acknowledged warning: image-fanout-slow)\n", "")


def test_strict_fails_on_what_is_left_and_on_unused_entries(tmp_path, capsys):
    path = demo(tmp_path, ACK_FANOUT, replace=SMALL_CPU_ROOT)
    code, _, err = run(capsys, "validate", "--strict", str(path))
    assert code == 2 and [line.split(": ")[1] for line in err.splitlines()] == ["error[compute-root-volume-small]"]
    path = demo(tmp_path, ACK_FANOUT + "  - id: head-root-volume-small\n    reason: imports run elsewhere\n")
    code, _, err = run(capsys, "validate", "--strict", str(path))
    assert code == 2 and [line.split(": ")[1] for line in err.splitlines()] == ["error[acknowledgement-unused]"]


# --- bad entries --------------------------------------------------------------------------------------------------

BAD = [
    ("unknown id, close to a real one", "  - id: image-fanout-slo\n    reason: ok\n",
     ["{n1}:9: acknowledge[0].id: unknown warning id 'image-fanout-slo' (did you mean 'image-fanout-slow'?)"]),
    ("unknown id, nothing close", "  - id: everything\n    reason: ok\n",
     ["{n1}:9: acknowledge[0].id: unknown warning id 'everything' (one of container-start-extracts, "
      "container-start-extracts-slow-reader, image-fanout-slow, head-root-volume-small, "
      "compute-root-volume-small, capacity-block-exceeded, capacity-block-partial, capacity-block-size-unlisted, "
      "instance-type-not-in-az, image-expect-incompatible, image-combination-untested, gpu-check-in-job-start, "
      "gpu-check-none)"]),
    ("missing reason", "  - id: image-fanout-slow\n",
     ["{n1}:5: acknowledge[0]: missing required key 'reason' (why it is accepted, on one line (validate --format "
      "json shows it with the warning))"]),
    ("null reason", "  - id: image-fanout-slow\n    reason:\n",
     ["{n2}:12: acknowledge[0].reason: expected a string, got nothing (null)"]),
    ("empty reason", '  - id: image-fanout-slow\n    reason: ""\n',
     ["{n2}:13: acknowledge[0].reason: the reason is empty (say why the warning is accepted, e.g. who decided and "
      "until when)"]),
    ("blank reason", '  - id: image-fanout-slow\n    reason: "   "\n',
     ["{n2}:13: acknowledge[0].reason: the reason is empty (say why the warning is accepted, e.g. who decided and "
      "until when)"]),
    ("reason with a newline", '  - id: image-fanout-slow\n    reason: "fine\\nreally"\n',
     ["{n2}:13: acknowledge[0].reason: 'fine\\nreally' contains a control character (newline, tab, ...) (write it "
      "on one line; a YAML block scalar (| or >) keeps its final newline)"]),
    ("an id no spec may acknowledge", "  - id: acknowledgement-unused\n    reason: tidy later\n",
     ["{n1}:9: acknowledge[0].id: acknowledgement-unused cannot be acknowledged (remove the stale acknowledge "
      "entry instead)"]),
    ("ParallelCluster's own warnings", "  - id: pcluster-validator\n    reason: no key pair on purpose\n",
     ["{n1}:9: acknowledge[0].id: pcluster-validator cannot be acknowledged (ParallelCluster's own findings are "
      "not ClusterKit's to accept; --strict leaves them warnings)"]),
    ("the same id twice", ACK_FANOUT.split("\n", 1)[1] + "  - id: image-fanout-slow\n    reason: again\n",
     ["{n3}:9: acknowledge[1].id: image-fanout-slow is acknowledged twice (one entry per id: remove this one)"]),
    ("not a list", "  id: image-fanout-slow\n",
     ["{n1}:3: acknowledge: expected a list, got a mapping"]),
]


@pytest.mark.parametrize("entries,expected", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_entry_is_an_error_on_its_line(tmp_path, capsys, entries, expected):
    path = demo(tmp_path, "acknowledge:\n" + entries)
    code, out, err = run(capsys, "validate", str(path))
    lines = {f"n{i}": f"{path}:{DEMO_LINES + 1 + i}" for i in range(1, 4)}  # n1: the first entry's line
    assert (code, out) == (2, "")
    assert err.splitlines() == [line.format(**lines) for line in expected]


# --- nothing else changes -----------------------------------------------------------------------------------------

def test_acknowledge_renders_nothing(tmp_path):
    """Acknowledgements are validate's business: the ParallelCluster config is the same, byte for byte."""
    unacknowledged = tmp_path / "plain"
    unacknowledged.mkdir()
    assert rendered_text(load(str(demo(tmp_path, ACK_FANOUT)))) == rendered_text(load(str(demo(unacknowledged))))
