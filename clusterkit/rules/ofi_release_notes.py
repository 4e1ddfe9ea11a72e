"""What aws-ofi-nccl's own RELEASENOTES.md says each release needs and was tested with.

The compatibility rules for the NCCL plugin come from its makers' notes (clusterkit.rules.compat_build), not
from memory. The notes are prose written over many years: lines wrap mid-sentence, links wrap versions,
headings say ``v1.13.2-aws (2024-12-06)``, ``v1.12.0-aws release notes`` or ``v0.9 release notes``. Each
section's text is flattened first (links to their text, whitespace to one space), then read with a few
patterns, one per statement:

* NCCL minimum: "backward compatibility with older NCCL versions (NCCL vA and later)" / "(up to NCCL vA)";
* NCCL tested: "has been tested with NCCL vX[, NCCL vY, and NCCL vZ]", "supports NCCL vX", "tested
  extensively / lightly tested with NCCL vX";
* libfabric minimum: "This release / The plugin requires [at least] Libfabric vB";
* libfabric minimum of the AWS build: "building with platform-aws requires [Libfabric] vC", "compiling
  AWS-specific support requires at least Libfabric vC";
* libfabric tested: "tested with Libfabric vD", "tested with [Libfabric] versions up to Libfabric vE".

A section of a release >= 1.8 that states no NCCL minimum stops the parse with one line naming it, unless
``SILENT_SECTIONS`` says (after a reading of the notes) that it is a bugfix-only section of a series whose
first release stated them: then it takes that release's statements, and says so (``stated_in``).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from clusterkit.spec.errors import ClusterKitError
from clusterkit_node.contract.compat import compare_versions

# Releases from which every section must state its NCCL minimum (older ones were not as regular).
STRICT_FROM = "1.8"

# Sections that state no versions at all, and the section whose statements they keep (read in the notes:
# v1.12.1-aws is a two-line bugfix for v1.12.0-aws). A new silent section fails the parse until it is added
# here; a listed section that starts stating its own versions fails too, so the table cannot go stale.
SILENT_SECTIONS: dict[str, str] = {"1.12.1": "1.12.0"}

_HEADING_RE = re.compile(r"^# v(?P<version>\d+(?:\.\d+)*)(?P<aws>-aws)?(?: release notes)?"
                         r"(?: \((?P<date>\d{4}-\d\d(?:-\d\d)?)\))?\s*$")
_LINK_RE = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_VER = r"(\d+(?:\.\d+)+(?:amzn\d+(?:\.\d+)*)?|\d+\.\d+(?=\.x))"
_NCCL_VER = r"NCCL v?(\d+(?:\.\d+)+)(?:-\d+)?\+?"
_NCCL_MIN_RE = re.compile(r"backward compatibility with older NCCL versions \(+ ?(?:up ?to )?" + _NCCL_VER)
_NCCL_TESTED_RE = re.compile(r"(?:supports|tested(?: extensively| lightly)? with) "
                             r"(" + _NCCL_VER + r"(?:(?:,| and|, and) " + _NCCL_VER + r")*)")
_NCCL_IN_RE = re.compile(_NCCL_VER)
_LIBFABRIC_MIN_RE = re.compile(r"(?:release|release which|release that|plugin|\+ and) requires (?:at least )?"
                               r"libfabric v?" + _VER, re.IGNORECASE)
_LIBFABRIC_AWS_RE = re.compile(r"(?:platform-aws|AWS-specific support) (?:now )?requires (?:at least )?"
                               r"(?:libfabric )?(?:version )?v?" + _VER, re.IGNORECASE)
_LIBFABRIC_TESTED_RE = re.compile(r"tested with (?:libfabric )?(?:versions ?up ?to libfabric |libfabric )v?" + _VER,
                                  re.IGNORECASE)


class NotesError(ClusterKitError):
    """The release notes cannot be read as expected; the message names the section."""


@dataclass(frozen=True)
class Release:
    """One ``# v...`` section. Versions are as the notes write them, less the leading v and NCCL's -N build."""

    version: str                          # "1.13.2" (a "-aws" suffix in the heading is dropped)
    heading: str                          # "v1.13.2-aws (2024-12-06)", as written: sources quote it
    date: str | None                      # "2024-12-06", "2026-08", or None (older sections have none)
    nccl_min: str | None
    nccl_tested: tuple[str, ...]
    libfabric_min: str | None
    libfabric_aws_min: str | None
    libfabric_tested: tuple[str, ...]
    stated_in: str | None = None          # SILENT_SECTIONS: the version whose statements this one keeps


def flatten(text: str) -> str:
    """Markdown links to their text, every run of whitespace (line wraps included) to one space."""
    return " ".join(_LINK_RE.sub(r"\1", text).split())


def _distinct(versions: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for v in versions:
        if v not in out:
            out.append(v)
    return tuple(sorted(out, key=functools.cmp_to_key(compare_versions)))


def parse_section(*, heading: str, body: str, where: str) -> Release:
    """One section (``heading`` without the newline, ``body`` the text up to the next section)."""
    m = _HEADING_RE.match(heading)
    if not m:
        raise NotesError(f"{where}: section '{heading}': heading is not '# vX.Y.Z[-aws] [release notes] [(date)]'")
    text = flatten(body)
    nccl_min = _NCCL_MIN_RE.search(text)
    libfabric_min = _LIBFABRIC_MIN_RE.search(text)
    libfabric_aws = _LIBFABRIC_AWS_RE.search(text)
    tested = [v for clause in _NCCL_TESTED_RE.finditer(text) for v in _NCCL_IN_RE.findall(clause.group(1))]
    return Release(
        version=m.group("version"), heading=heading[2:].replace(" release notes", "").strip(),
        date=m.group("date"),
        nccl_min=nccl_min.group(1) if nccl_min else None, nccl_tested=_distinct(tested),
        libfabric_min=libfabric_min.group(1) if libfabric_min else None,
        libfabric_aws_min=libfabric_aws.group(1) if libfabric_aws else None,
        libfabric_tested=_distinct(_LIBFABRIC_TESTED_RE.findall(text)))


def _states_nothing(release: Release) -> bool:
    return not (release.nccl_min or release.nccl_tested or release.libfabric_min or release.libfabric_aws_min
                or release.libfabric_tested)


def parse(text: str, *, where: str) -> tuple[Release, ...]:
    """Every release section, newest first as the notes order them; NotesError names the first bad section."""
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# v"):
            sections.append((line.rstrip(), []))
        elif sections:
            sections[-1][1].append(line)
    if not sections:
        raise NotesError(f"{where}: no release sections ('# vX.Y.Z ...' headings)")
    releases = [parse_section(heading=h, body="\n".join(b), where=where) for h, b in sections]
    by_version = {r.version: r for r in releases}
    if len(by_version) != len(releases):
        raise NotesError(f"{where}: two sections for one release")
    out = []
    for release in releases:
        shown = f"{where}: section '# {release.heading}'"
        kept = SILENT_SECTIONS.get(release.version)
        if kept is not None:
            if not _states_nothing(release):
                raise NotesError(f"{shown} now states versions of its own: remove it from "
                                 f"ofi_release_notes.SILENT_SECTIONS")
            if kept not in by_version:
                raise NotesError(f"{shown}: SILENT_SECTIONS keeps the statements of v{kept}, which has no section")
            source = by_version[kept]
            release = replace(source, version=release.version, heading=release.heading, date=release.date,
                              stated_in=source.version)
        if release.nccl_min is None and compare_versions(release.version, STRICT_FROM) >= 0:
            raise NotesError(f"{shown}: no NCCL minimum found (expected 'backward compatibility with older NCCL "
                             f"versions (NCCL vX and later)')")
        out.append(release)
    return tuple(out)
