"""Generate the aws-ofi-nccl rules of clusterkit/data/compat_rules.json from aws-ofi-nccl's own release notes.

The notes are ``<top>/RELEASENOTES.md`` inside the vendored, unmodified upstream tarball
``<repo>/../shared/vendor/aws-ofi-nccl-<version>.tar.gz`` (``CK_VENDOR_DIR`` overrides the directory, as
for tests/real_runtime), read straight out of the tarball. Only the rules whose id starts with ``PREFIX``
are rewritten; the hand-written ones (the CUDA driver tables, the EFA installer rule from an issue thread)
keep their bytes. Per aws-ofi-nccl release (consecutive releases with the same statement share one rule):

* error: NCCL below the release's NCCL minimum ("backward compatibility ... (NCCL vA and later)");
* error: libfabric below the plugin's libfabric minimum ("requires [at least] Libfabric vB");
* warning: libfabric below the minimum of the AWS build ("building with platform-aws requires ...");
* warning, not covered: NCCL of a newer series (major.minor) than every NCCL the release was tested with;
* warning, not covered: an aws-ofi-nccl release the notes do not describe (older or newer).

Output is deterministic: sorted keys, two-space JSON, and no date but the notes' own (the provenance block
``generated`` names the tarball, its sha256, the member and the newest release with its date).

    python -m clusterkit.rules.compat_build [--tarball PATH] [--out PATH] [--check]
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import sys
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterkit import paths
from clusterkit.atomic import write_text
from clusterkit.rules.ofi_release_notes import NotesError, Release, parse
from clusterkit.spec.errors import ClusterKitError
from clusterkit_node.contract import compat

REBUILD = "make compat-rules"
PREFIX = "ofi-notes-"  # ids of the generated rules: everything else in the file is hand-written
TARBALL_GLOB = "aws-ofi-nccl-*.tar.gz"
NOTES_URL = "https://github.com/aws/aws-ofi-nccl/blob/v{version}/RELEASENOTES.md"


_by_version = functools.cmp_to_key(compat.compare_versions)


class VendorMissing(ClusterKitError):
    """The vendored aws-ofi-nccl tarball is not where CI and the builder expect it."""


@dataclass(frozen=True)
class Notes:
    tarball: str   # file name, e.g. aws-ofi-nccl-1.21.1.tar.gz
    sha256: str
    member: str    # aws-ofi-nccl-1.21.1/RELEASENOTES.md
    releases: tuple[Release, ...]  # oldest first

    @property
    def newest(self) -> Release:
        return self.releases[-1]


def vendor_dir() -> Path:
    return Path(os.environ.get("CK_VENDOR_DIR", paths.ROOT.parent / "shared" / "vendor"))


def find_tarball(*, directory: Path) -> Path:
    """The vendored tarball (the newest, should there be several)."""
    found = sorted(directory.glob(TARBALL_GLOB), key=lambda p: _by_version(p.name))
    if not found:
        raise VendorMissing(f"{directory}: no {TARBALL_GLOB} (the vendored upstream aws-ofi-nccl; CI has ../shared "
                            f"beside the clone, CK_VENDOR_DIR names another directory)")
    return found[-1]


def read_notes(*, tarball: Path) -> Notes:
    """RELEASENOTES.md read from the tarball (nothing is extracted to disk), parsed."""
    top = tarball.name.removesuffix(".tar.gz")
    member = f"{top}/RELEASENOTES.md"
    try:
        data = tarball.read_bytes()
        with tarfile.open(tarball) as tf:
            handle = tf.extractfile(member)
            if handle is None:
                raise NotesError(f"{tarball}: {member} is not a regular file")
            text = handle.read().decode("utf-8")
    except KeyError:
        raise NotesError(f"{tarball}: no member {member}") from None
    except (OSError, tarfile.TarError, UnicodeDecodeError) as exc:
        raise NotesError(f"{tarball}: cannot read {member}: {exc}") from None
    releases = parse(text, where=f"{tarball.name}:{member}")
    ordered = sorted(releases, key=lambda r: _by_version(r.version))
    return Notes(tarball=tarball.name, sha256=hashlib.sha256(data).hexdigest(), member=member,
                 releases=tuple(ordered))


# ------------------------------------------------------------------------------------------------- rules

@dataclass(frozen=True)
class Group:
    """Consecutive releases (oldest first) that state the same ``value``."""

    releases: tuple[Release, ...]
    value: Any

    @property
    def constraint(self) -> str:
        lo, hi = self.releases[0].version, self.releases[-1].version
        return f"=={lo}" if lo == hi else f">={lo},<={hi}"

    @property
    def span(self) -> str:
        """'v1.10.0-aws to v1.21.1' (headings as the notes write them, without dates)."""
        first, last = (r.heading.split(" (")[0] for r in (self.releases[0], self.releases[-1]))
        return first if first == last else f"{first} to {last}"

    @property
    def slug(self) -> str:
        lo, hi = self.releases[0].version, self.releases[-1].version
        return lo if lo == hi else f"{lo}-to-{hi}"


def groups(releases: Sequence[Release], value: Callable[[Release], Any]) -> Iterator[Group]:
    """Runs of consecutive releases with the same non-empty ``value``; a release without one ends a run."""
    run: list[Release] = []
    for release in releases:
        if run and value(release) != value(run[-1]):
            yield Group(tuple(run), value(run[-1]))
            run = []
        if value(release):
            run.append(release)
    if run:
        yield Group(tuple(run), value(run[-1]))


def source(notes: Notes, group: Group | None = None) -> str:
    if group is None:
        where = f"sections v{notes.releases[0].version} to {notes.newest.heading}"
    else:
        first, last = group.releases[0].heading, group.releases[-1].heading
        where = f"section {first}" if first == last else f"sections {first} to {last}"
        kept = [f"{r.heading.split(' (')[0]} states none and keeps v{r.stated_in}'s" for r in group.releases
                if r.stated_in]
        where += "".join(f" ({k})" for k in kept)
    return (f"aws-ofi-nccl RELEASENOTES.md, {where}, in {notes.tarball} sha256 {notes.sha256}, "
            f"{NOTES_URL.format(version=notes.newest.version)}")


def next_series(version: str) -> str:
    """'2.31.2' -> '2.32': the first NCCL series (major.minor) newer than ``version``'s."""
    major, minor = (int(p) for p in version.split(".")[:2])
    return f"{major}.{minor + 1}"


def _rule(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def generated_rules(*, notes: Notes) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    releases = notes.releases
    for g in groups(releases, lambda r: r.nccl_min):
        rules.append(_rule(
            id=f"{PREFIX}{g.slug}-nccl-min", kind="requires", level="error",
            **{"if": {"aws_ofi_nccl": g.constraint}}, then={"nccl": f">={g.value}"},
            message=f"image {{image}}: aws-ofi-nccl {{aws_ofi_nccl}} needs NCCL >= {g.value}, it has {{nccl}} "
                    f"(aws-ofi-nccl release notes {g.span})",
            why=f"the makers keep backward compatibility with older NCCL versions only down to NCCL {g.value}",
            source=source(notes, g)))
    for g in groups(releases, lambda r: r.libfabric_min):
        rules.append(_rule(
            id=f"{PREFIX}{g.slug}-libfabric-min", kind="requires", level="error",
            **{"if": {"aws_ofi_nccl": g.constraint}}, then={"libfabric": f">={g.value}"},
            message=f"image {{image}}: aws-ofi-nccl {{aws_ofi_nccl}} needs libfabric >= {g.value}, it has "
                    f"{{libfabric}} (aws-ofi-nccl release notes {g.span})",
            why=f"the plugin requires libfabric {g.value} or later",
            source=source(notes, g)))
    for g in groups(releases, lambda r: r.libfabric_aws_min):
        rules.append(_rule(
            id=f"{PREFIX}{g.slug}-libfabric-aws-min", kind="requires", level="warning",
            **{"if": {"aws_ofi_nccl": g.constraint}}, then={"libfabric": f">={g.value}"},
            message=f"image {{image}}: aws-ofi-nccl {{aws_ofi_nccl}} with AWS-specific support (platform-aws) "
                    f"needs libfabric >= {g.value}, it has {{libfabric}}: AWS-specific support missing "
                    f"(aws-ofi-nccl release notes {g.span})",
            why=f"building the plugin's AWS-specific support (platform-aws, what the EFA installer and AWS "
                f"images ship) requires libfabric {g.value} or later; a generic build still works, so a warning",
            source=source(notes, g)))
    for g in groups(releases, lambda r: next_series(r.nccl_tested[-1]) if r.nccl_tested else None):
        tested = ", ".join(sorted({v for r in g.releases for v in r.nccl_tested}, key=_by_version))
        rules.append(_rule(
            id=f"{PREFIX}{g.slug}-nccl-tested", kind="requires", level="warning",
            **{"if": {"aws_ofi_nccl": g.constraint}}, then={"nccl": f"<{g.value}"}, coverage=True,
            message=f"image {{image}}: NCCL {{nccl}} is newer than every NCCL aws-ofi-nccl {{aws_ofi_nccl}} was "
                    f"tested with ({tested}, aws-ofi-nccl release notes {g.span}): not covered",
            why="the makers name the NCCL each release was tested with or supports; a newer NCCL series is "
                "untested with this plugin release, not known to be broken",
            source=source(notes, g)))
    oldest, newest = releases[0], notes.newest
    rules.append(_rule(
        id=f"{PREFIX}aws-ofi-nccl-covered", kind="requires", level="warning",
        then={"aws_ofi_nccl": f">={oldest.version},<={newest.version}"}, coverage=True,
        message=f"image {{image}}: aws-ofi-nccl {{aws_ofi_nccl}} is not covered by its release notes "
                f"(v{oldest.version} to v{newest.version} in {notes.tarball}): its NCCL and libfabric needs are "
                f"not checked",
        why=f"the vendored notes describe releases v{oldest.version} to v{newest.version}; vendor a newer "
            f"aws-ofi-nccl tarball and run `{REBUILD}`",
        source=source(notes)))
    return rules


def provenance(notes: Notes) -> dict[str, str]:
    return {"builder": f"{REBUILD} (python -m clusterkit.rules.compat_build); do not edit these rules by hand",
            "member": notes.member, "newest_release": notes.newest.version,
            "newest_release_date": notes.newest.date or "undated", "rule_ids": f"{PREFIX}*",
            "sha256": notes.sha256, "tarball": notes.tarball}


def build(*, current: dict[str, Any], notes: Notes) -> dict[str, Any]:
    """``current`` with its generated rules (and provenance) replaced; the hand-written rules untouched."""
    kept = [r for r in current.get("rules", []) if not str(r.get("id", "")).startswith(PREFIX)]
    doc = dict(current, rules=kept + generated_rules(notes=notes), generated=provenance(notes))
    compat.parse_rules(doc, "generated compat_rules.json")  # a rule the evaluator refuses never ships
    return doc


def render(doc: dict[str, Any]) -> str:
    """compat_rules.json text: sorted keys, two-space indent, a final newline."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def regenerate(*, rules_path: Path, tarball: Path) -> str:
    """The text ``rules_path`` should have: its hand-written rules plus those of ``tarball``'s notes."""
    try:
        current = json.loads(rules_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise NotesError(f"{rules_path}: cannot read the rules file: {exc}") from None
    return render(build(current=current, notes=read_notes(tarball=tarball)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterkit.rules.compat_build",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tarball", type=Path, help=f"default: the newest {TARBALL_GLOB} in ../shared/vendor")
    parser.add_argument("--out", type=Path, default=paths.COMPAT_RULES, help=f"default: {paths.COMPAT_RULES}")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is not what it would write")
    args = parser.parse_args(argv)
    try:
        tarball = args.tarball or find_tarball(directory=vendor_dir())
        text = regenerate(rules_path=args.out, tarball=tarball)
    except compat.RulesError as exc:
        print("\n".join(f"compat_build: {line}" for line in exc.lines), file=sys.stderr)
        return 2
    except ClusterKitError as exc:
        print("\n".join(f"compat_build: {line}" for line in exc.lines()), file=sys.stderr)
        return 2
    if args.check:
        if args.out.read_text(encoding="utf-8") != text:
            print(f"compat_build: {args.out} is stale: run `{REBUILD}`", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    write_text(args.out, text)
    print(f"wrote {args.out} ({len(text.encode())} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
