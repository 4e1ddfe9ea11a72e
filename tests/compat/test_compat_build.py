"""The aws-ofi-nccl rules of compat_rules.json, generated from the plugin's own RELEASENOTES.md.

Real: the vendored, unmodified upstream tarball ../shared/vendor/aws-ofi-nccl-1.21.1.tar.gz (CI always has
../shared beside the clone, so a missing tarball FAILS here, it is never skipped), the parser
(clusterkit/rules/ofi_release_notes.py), the builder (clusterkit/rules/compat_build.py), the committed rules
file and the evaluator the nodes run (clusterkit_node/contract/compat.py). Stand-ins: small hand-written notes for
the malformed-notes cases, packed into a tarball in tmp_path.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from clusterkit.rules import compat_build, ofi_release_notes
from clusterkit_node.contract import compat

RULES = Path(compat_build.paths.COMPAT_RULES)
STALE = ("clusterkit/data/compat_rules.json is not the build of the vendored aws-ofi-nccl notes: "
         f"run `{compat_build.REBUILD}`")
HAND_WRITTEN = ("cuda-driver-floor", "cuda-toolkit-driver", "nccl-2.19-needs-efa-installer-1.29")


@pytest.fixture(scope="module")
def tarball() -> Path:
    """The vendored tarball. Like every tier that needs ../shared/vendor (tests/real_runtime/tier.py), a clone
    without it beside skips these tests, except in CI (CI=true or CK_REQUIRE_ARTIFACTS=1, .ci/run): there they fail."""
    try:
        return compat_build.find_tarball(directory=compat_build.vendor_dir())
    except compat_build.VendorMissing as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get("CK_REQUIRE_ARTIFACTS") == "1":
            pytest.fail(f"the vendored aws-ofi-nccl tarball is required here (CI has ../shared): {exc}")
        pytest.skip(f"no vendored aws-ofi-nccl tarball (../shared/vendor beside the clone): {exc}")


@pytest.fixture(scope="module")
def notes(tarball):
    return compat_build.read_notes(tarball=tarball)


@pytest.fixture(scope="module")
def by_version(notes):
    return {r.version: r for r in notes.releases}


@pytest.fixture(scope="module")
def ruleset():
    return compat.load_rules(str(RULES))


def fired(ruleset, versions: dict[str, str]) -> list[tuple[str, str]]:
    return [(f.level, f.rule) for f in compat.check(ruleset, "img", versions)]


# --- (a) facts read in the real notes ------------------------------------------------------------------

def test_newest_release_as_the_notes_state_it(by_version):
    r = by_version["1.21.1"]
    assert (r.heading, r.date) == ("v1.21.1 (2026-08)", "2026-08")
    assert r.nccl_tested == ("2.31.2",) and r.nccl_min == "2.17.1"
    assert (r.libfabric_min, r.libfabric_aws_min, r.libfabric_tested) == ("1.11.0", "1.22.0", ("2.6.0amzn1.0",))


def test_older_wordings(by_version):
    v180 = by_version["1.8.0"]  # wrapped lines, "-aws", no date, a separate "Testing:" paragraph
    assert (v180.heading, v180.date, v180.nccl_min, v180.libfabric_min) == ("v1.8.0-aws", None, "2.4.8", "1.18.0")
    assert v180.nccl_tested == ("2.19.4", "2.20.3") and v180.libfabric_tested == ("1.19.0",)
    for version in ("1.13.0", "1.13.1", "1.13.2"):  # "building with platform-aws requires [1.22.0amzn4.0](...)"
        r = by_version[version]
        assert (r.libfabric_aws_min, r.libfabric_min, r.nccl_min, r.nccl_tested) == (
            "1.22.0amzn4.0", None, "2.17.1", ("2.23.4",)), version
    assert by_version["1.20.0"].nccl_tested == ("2.28.9", "2.29.7", "2.30.4")
    assert by_version["1.14.1"].libfabric_tested == ("2.1.0",)  # "tested with versions upto Libfabric 2.1.0"
    assert by_version["1.9.2"].nccl_min == "2.4.8" and by_version["1.10.0"].nccl_min == "2.17.1"
    assert by_version["1.5.0"].nccl_min == "2.4.8"  # "(up to NCCL v2.4.8)"
    assert by_version["1.12.1"].stated_in == "1.12.0"  # a bugfix-only section (SILENT_SECTIONS)
    assert by_version["0.9"].nccl_min is None  # older than STRICT_FROM: no NCCL minimum is stated


def test_every_release_from_1_8_states_an_nccl_minimum(notes):
    strict = [r for r in notes.releases if compat.compare_versions(r.version, ofi_release_notes.STRICT_FROM) >= 0]
    assert len(strict) == 31 and all(r.nccl_min and r.nccl_tested for r in strict)
    assert (notes.releases[0].version, notes.newest.version) == ("0.9", "1.21.1")


# --- (b) the committed file is the build of the vendored notes --------------------------------------------

def test_committed_rules_are_the_build_of_the_vendored_notes(tarball):
    assert compat_build.regenerate(rules_path=RULES, tarball=tarball) == RULES.read_text(encoding="utf-8"), STALE


def test_provenance_and_sources(notes):
    doc = json.loads(RULES.read_text(encoding="utf-8"))
    assert doc["generated"] == {
        "builder": "make compat-rules (python -m clusterkit.rules.compat_build); do not edit these rules by hand",
        "member": "aws-ofi-nccl-1.21.1/RELEASENOTES.md", "newest_release": "1.21.1", "newest_release_date": "2026-08",
        "rule_ids": "ofi-notes-*", "sha256": notes.sha256, "tarball": "aws-ofi-nccl-1.21.1.tar.gz"}
    generated = [r for r in doc["rules"] if r["id"].startswith(compat_build.PREFIX)]
    assert [r["id"] for r in doc["rules"] if r not in generated] == list(HAND_WRITTEN)
    for rule in generated:
        assert rule["source"].startswith("aws-ofi-nccl RELEASENOTES.md, section"), rule["id"]
        assert f"in aws-ofi-nccl-1.21.1.tar.gz sha256 {notes.sha256}" in rule["source"], rule["id"]
    nccl_min = next(r for r in generated if r["id"] == "ofi-notes-1.10.0-to-1.21.1-nccl-min")
    assert nccl_min["if"] == {"aws_ofi_nccl": ">=1.10.0,<=1.21.1"} and nccl_min["then"] == {"nccl": ">=2.17.1"}


def test_hand_written_rules_keep_their_bytes(tarball, tmp_path):
    """The builder only replaces ofi-notes-* rules: a hand-written rule, even an odd one, passes through."""
    doc = json.loads(RULES.read_text(encoding="utf-8"))
    extra = {"id": "zz-hand", "kind": "requires", "level": "warning", "if": {"nccl": ">=9"},
             "then": {"cuda": ">=99"}, "why": "a hand-written rule", "source": "https://example.invalid"}
    doc["rules"].insert(1, extra)
    doc["rules"] = [r for r in doc["rules"] if r["id"] != "ofi-notes-1.20.0-nccl-tested"]  # a stale generation
    path = tmp_path / "rules.json"
    path.write_text(compat_build.render(doc))
    out = json.loads(compat_build.regenerate(rules_path=path, tarball=tarball))
    committed = json.loads(RULES.read_text(encoding="utf-8"))
    assert out["rules"][:4] == committed["rules"][:1] + [extra] + committed["rules"][1:3]
    assert out["rules"][4:] == committed["rules"][3:]


def test_cli_check_and_write(tarball, tmp_path, capsys):
    path = tmp_path / "rules.json"
    path.write_text(RULES.read_text(encoding="utf-8"))
    assert compat_build.main(["--tarball", str(tarball), "--out", str(path), "--check"]) == 0
    path.write_text(RULES.read_text(encoding="utf-8").replace('"nccl": ">=2.17.1"', '"nccl": ">=2.17.0"'))
    assert compat_build.main(["--tarball", str(tarball), "--out", str(path), "--check"]) == 1
    assert f"is stale: run `{compat_build.REBUILD}`" in capsys.readouterr().err
    assert compat_build.main(["--tarball", str(tarball), "--out", str(path)]) == 0
    assert path.read_bytes() == RULES.read_bytes()


def test_missing_vendor_directory_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CK_VENDOR_DIR", str(tmp_path / "no-vendor"))
    assert compat_build.main(["--out", str(tmp_path / "rules.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no aws-ofi-nccl-*.tar.gz" in err and "Traceback" not in err


# --- (c) what the generated rules say about images --------------------------------------------------------

def test_nccl_series_newer_than_tested_is_not_covered(ruleset):
    found = compat.check(ruleset, "img", {"aws_ofi_nccl": "1.21.1", "nccl": "2.32.3"})
    assert [(f.level, f.rule, f.component) for f in found] == [
        ("warning", "ofi-notes-1.21.0-to-1.21.1-nccl-tested", "nccl")]
    assert found[0].message == (
        "image img: NCCL 2.32.3 is newer than every NCCL aws-ofi-nccl 1.21.1 was tested with (2.31.2, aws-ofi-nccl "
        "release notes v1.21.0 to v1.21.1): not covered")
    assert fired(ruleset, {"aws_ofi_nccl": "1.21.1", "nccl": "2.31.5"}) == []  # same series: covered


def test_nccl_below_the_minimum_is_an_error(ruleset):
    found = compat.check(ruleset, "img", {"aws_ofi_nccl": "1.21.1", "nccl": "2.16"})
    assert [(f.level, f.rule) for f in found] == [("error", "ofi-notes-1.10.0-to-1.21.1-nccl-min")]
    assert found[0].message == ("image img: aws-ofi-nccl 1.21.1 needs NCCL >= 2.17.1, it has 2.16 (aws-ofi-nccl "
                                "release notes v1.10.0-aws to v1.21.1)")
    assert fired(ruleset, {"aws_ofi_nccl": "1.9", "nccl": "2.5"}) == []  # 1.9.x: NCCL 2.4.8 and later


def test_debian_libfabric_misses_only_the_aws_build(ruleset):
    found = compat.check(ruleset, "img", {"aws_ofi_nccl": "1.21.1", "libfabric": "1.17.0"})  # Debian bookworm's
    assert [(f.level, f.rule) for f in found] == [("warning", "ofi-notes-1.19.0-to-1.21.1-libfabric-aws-min")]
    assert "needs libfabric >= 1.22.0, it has 1.17.0: AWS-specific support missing" in found[0].message
    assert fired(ruleset, {"aws_ofi_nccl": "1.21.1", "libfabric": "1.10.0"}) == [
        ("error", "ofi-notes-1.19.0-to-1.21.1-libfabric-min"),
        ("warning", "ofi-notes-1.19.0-to-1.21.1-libfabric-aws-min")]
    assert fired(ruleset, {"aws_ofi_nccl": "1.13.2", "libfabric": "1.22.0amzn3.0"}) == [
        ("warning", "ofi-notes-1.13.0-to-1.18.0-libfabric-aws-min")]
    assert fired(ruleset, {"aws_ofi_nccl": "1.8.1", "libfabric": "1.17.1"}) == [
        ("error", "ofi-notes-1.8.0-to-1.12.1-libfabric-min")]


@pytest.mark.parametrize("version", ["1.22.0", "0.8"])
def test_releases_the_notes_do_not_describe_are_not_covered(ruleset, version):
    found = compat.check(ruleset, "img", {"aws_ofi_nccl": version, "nccl": "2.31.2"})
    assert [(f.level, f.rule, f.component) for f in found] == [("warning", "ofi-notes-aws-ofi-nccl-covered",
                                                                "aws_ofi_nccl")]
    assert found[0].message == (f"image img: aws-ofi-nccl {version} is not covered by its release notes (v0.9 to "
                                f"v1.21.1 in aws-ofi-nccl-1.21.1.tar.gz): its NCCL and libfabric needs are not checked")


def test_unrevealed_components_give_no_finding(ruleset):
    assert fired(ruleset, {"nccl": "2.99.1", "libfabric": "1.0"}) == []  # no aws-ofi-nccl: nothing to judge
    assert fired(ruleset, {"aws_ofi_nccl": "1.21.1"}) == []


# --- (d) notes that do not read as expected fail with one line naming the section --------------------------

GOOD = """# AWS OFI NCCL Release notes

# v1.9.0-aws release notes
This release requires [Libfabric v1.18.0](https://x) or later and supports [NCCL 2.21.5-1](https://x)
while maintaining backward compatibility with older NCCL versions
([NCCL v2.4.8](https://x) and later).

# v1.8.0-aws release notes
This release requires [Libfabric v1.18.0](https://x)
or later and supports [NCCL v2.19.4-1](https://x)
while maintaining backward compatibility with older NCCL versions
([NCCL v2.4.8](https://x) and later).
"""


def _tarball(tmp_path: Path, notes: str, name: str = "aws-ofi-nccl-9.9.9") -> Path:
    path = tmp_path / f"{name}.tar.gz"
    data = notes.encode()
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo(f"{name}/RELEASENOTES.md")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return path


def test_small_notes_build(tmp_path):
    notes = compat_build.read_notes(tarball=_tarball(tmp_path, GOOD))
    assert [(r.version, r.nccl_min, r.nccl_tested) for r in notes.releases] == [
        ("1.8.0", "2.4.8", ("2.19.4",)), ("1.9.0", "2.4.8", ("2.21.5",))]
    ids = [r["id"] for r in compat_build.generated_rules(notes=notes)]
    assert ids == ["ofi-notes-1.8.0-to-1.9.0-nccl-min", "ofi-notes-1.8.0-to-1.9.0-libfabric-min",
                   "ofi-notes-1.8.0-nccl-tested", "ofi-notes-1.9.0-nccl-tested", "ofi-notes-aws-ofi-nccl-covered"]


def test_section_without_nccl_minimum_fails_naming_it(tmp_path, capsys):
    broken = GOOD.replace("while maintaining backward compatibility with older NCCL versions\n([NCCL v2.4.8]"
                          "(https://x) and later).\n\n# v1.8.0", "\n# v1.8.0")
    assert broken != GOOD
    tarball = _tarball(tmp_path, broken)
    with pytest.raises(ofi_release_notes.NotesError) as info:
        compat_build.read_notes(tarball=tarball)
    line = ("aws-ofi-nccl-9.9.9.tar.gz:aws-ofi-nccl-9.9.9/RELEASENOTES.md: section '# v1.9.0-aws': no NCCL "
            "minimum found (expected 'backward compatibility with older NCCL versions (NCCL vX and later)')")
    assert str(info.value) == line
    rules = tmp_path / "rules.json"
    rules.write_text(RULES.read_text(encoding="utf-8"))
    assert compat_build.main(["--tarball", str(tarball), "--out", str(rules)]) == 2
    assert capsys.readouterr().err == f"compat_build: {line}\n"
    assert rules.read_bytes() == RULES.read_bytes()  # nothing written


def test_silent_sections_table_cannot_go_stale(tmp_path):
    talking = GOOD.replace("# v1.8.0-aws", "# v1.12.1-aws release notes\nsupports NCCL v2.23.4\n\n# v1.8.0-aws")
    with pytest.raises(ofi_release_notes.NotesError, match=r"section '# v1.12.1-aws' now states versions of its "
                                                           r"own: remove it from ofi_release_notes.SILENT_SECTIONS"):
        ofi_release_notes.parse(talking, where="n")
    orphan = GOOD.replace("# v1.8.0-aws", "# v1.12.1-aws\nBug fixes only.\n\n# v1.8.0-aws")
    with pytest.raises(ofi_release_notes.NotesError, match=r"keeps the statements of v1.12.0, which has no section"):
        ofi_release_notes.parse(orphan, where="n")


@pytest.mark.parametrize("notes,message", [
    ("no sections here\n", "n: no release sections ('# vX.Y.Z ...' headings)"),
    ("# v1.9.0 (yesterday)\ntext\n", "n: section '# v1.9.0 (yesterday)': heading is not "
                                     "'# vX.Y.Z[-aws] [release notes] [(date)]'"),
])
def test_unreadable_notes(notes, message):
    with pytest.raises(ofi_release_notes.NotesError) as info:
        ofi_release_notes.parse(notes, where="n")
    assert str(info.value) == message


def test_tarball_without_notes(tmp_path):
    path = tmp_path / "aws-ofi-nccl-9.9.9.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo("aws-ofi-nccl-9.9.9/README.md")
        tf.addfile(info, io.BytesIO(b""))
    with pytest.raises(ofi_release_notes.NotesError, match="no member aws-ofi-nccl-9.9.9/RELEASENOTES.md"):
        compat_build.read_notes(tarball=path)
