"""The documentation: a README that is a front door, and docs/ pages whose links all lead somewhere.

Checks, over README.md and docs/*.md: the README stays under 12 KiB; every relative markdown link
(``[text](path)``, ``[text](path#anchor)``, ``[text](#anchor)``, images too) names a file that exists and,
with an anchor, a heading of that file, by GitHub's anchor rules (the heading's text, lowercased,
punctuation other than ``-`` and ``_`` dropped, each space a ``-``, ``-1``, ``-2``... for repeats); every
docs page is linked from the README. Links and headings inside code fences and code spans do not count.
The checker is shown to fail on broken links (a missing file, a missing anchor) in a scratch copy.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_LIMIT = 12 * 1024

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The lines outside code fences, with code spans blanked."""
    lines, fence = [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fence = not fence
            continue
        if not fence:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading's markdown text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    fence = False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if _FENCE.match(line):
            fence = not fence
            continue
        match = None if fence else _HEADING.match(line)
        if match:
            base = anchor(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    return [m.group(1) for line in _prose_lines(path.read_text(encoding="utf-8")) for m in _LINK.finditer(line)]


def broken_links(files: list[Path], root: Path) -> list[str]:
    """``file: target (why)`` for every relative link that leads nowhere."""
    problems = []
    for path in files:
        for target in links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            ref, _, fragment = target.partition("#")
            dest = (path.parent / ref).resolve() if ref else path
            where = f"{path.relative_to(root)}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                problems.append(f"{where} (no heading #{fragment} in {dest.relative_to(root)})")
    return problems


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_readme_is_under_12_kib() -> None:
    size = len(README.read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes (limit {README_LIMIT}): move detail into docs/"


def test_every_relative_link_resolves() -> None:
    assert _pages(), "docs/ has no pages"
    problems = broken_links([README, *_pages()], REPO)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README) if t.partition("#")[0]}
    unlinked = [str(p.relative_to(REPO)) for p in _pages() if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link (add them to its Documentation list): {unlinked}"


def test_anchor_rules() -> None:
    assert anchor("Upgrading ParallelCluster") == "upgrading-parallelcluster"
    assert anchor("ParallelCluster's own validation") == "parallelclusters-own-validation"
    assert anchor("The `pcluster` path: `clusterkit export`") == "the-pcluster-path-clusterkit-export"
    assert anchor("Deploy rehearsal, and what a real deploy still adds") == (
        "deploy-rehearsal-and-what-a-real-deploy-still-adds")
    assert anchor("Container start: extraction vs squashfuse (`benchmarks/squashfuse_start.py`)") == (
        "container-start-extraction-vs-squashfuse-benchmarkssquashfuse_startpy")


def test_the_checker_fails_on_broken_links(tmp_path: Path) -> None:
    """A scratch tree: a good link and anchor pass; a missing file, a missing anchor and a missing
    same-page anchor are each reported; links in code are not links."""
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\n## Two words\n\n```\n## not a heading\n[x](nowhere.md)\n```\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text("[ok](docs/page.md) [ok](docs/page.md#two-words) `[code](nowhere.md)`\n"
                      "[gone](docs/gone.md) [bad](docs/page.md#not-a-heading) [self](#nope)\n", encoding="utf-8")
    assert broken_links([readme, page], tmp_path) == [
        "README.md: docs/gone.md (no such file)",
        "README.md: docs/page.md#not-a-heading (no heading #not-a-heading in docs/page.md)",
        "README.md: #nope (no heading #nope in README.md)",
    ]
