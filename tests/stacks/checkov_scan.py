"""Checkov over synthesized templates: one offline process over a directory, its JSON report read back.

Checkov runs from its own pinned venv (``.venv-checkov``, ``make checkov-venv``; requirements-checkov.txt), never
reaching a network: ``--skip-download`` and ``BC_SKIP_MAPPING`` keep it from the Prisma platform (no API key is
passed on), ``CKV_SKIP_PACKAGE_UPDATE_CHECK`` from PyPI's version check, and any request it still tried would
meet a proxy on a closed loopback port. Without the venv the tests skip, except under CI=true or
CK_REQUIRE_CHECKOV=1 (.ci/run), where they fail.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKOV_ENV_VAR = "CK_CHECKOV"  # another checkov executable, e.g. to try a new release
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
REQUIREMENTS = REPO / "requirements-checkov.txt"
REQUIRE_ENV = "CK_REQUIRE_CHECKOV"
SECURITY_DOC = REPO / "docs" / "security.md"
UPDATE_DOC_ENV = "CK_UPDATE_SECURITY_DOC"
REGENERATE = f"{UPDATE_DOC_ENV}=1 .venv/bin/python -m pytest tests/stacks/test_checkov.py"
BEGIN, END = "<!-- checkov-acks:begin -->", "<!-- checkov-acks:end -->"
CLOSED_PORT = "http://127.0.0.1:9"  # discard port: nothing listens, so a request fails at once
PLATFORM_ENV = ("BC_API_KEY", "PRISMA_API_URL", "BC_API_URL", "BC_REPO_ID")
STACK_KINDS = ("Network", "Storage", "Cluster")


@dataclass(frozen=True, order=True)
class Result:
    """One check on one resource: ``status`` FAILED or SKIPPED (``comment`` is the skip's reason)."""

    template: str  # relative to the scanned directory
    resource: str  # Type.LogicalId, as Checkov prints it
    check_id: str
    status: str
    comment: str = ""

    def line(self) -> str:
        return f"{self.check_id} {self.resource} in {self.template}"


def checkov_executable() -> Path:
    configured = os.environ.get(CHECKOV_ENV_VAR)
    return Path(configured) if configured else CHECKOV


def required() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get(REQUIRE_ENV) == "1"


def require_checkov() -> Path:
    """The executable; else a skip (a failure in CI) naming the make target that installs it."""
    path = checkov_executable()
    if not path.exists():
        why = f"Checkov venv missing: no {path} (run `make checkov-venv`)"
        if required():
            pytest.fail(why)
        pytest.skip(why)
    return path


def pinned_version() -> str:
    match = re.search(r"^checkov==(\S+)$", REQUIREMENTS.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"{REQUIREMENTS.name} pins no checkov"
    return match.group(1)


def offline_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PLATFORM_ENV}
    env.update(BC_SKIP_MAPPING="TRUE", CKV_SKIP_PACKAGE_UPDATE_CHECK="TRUE", CKV_CACHE_DIR=str(cache),
               HTTP_PROXY=CLOSED_PORT, HTTPS_PROXY=CLOSED_PORT, http_proxy=CLOSED_PORT, https_proxy=CLOSED_PORT,
               NO_PROXY="", no_proxy="")
    return env


def scan(checkov: Path, root: Path) -> tuple[str, list[Result]]:
    """Checkov's CloudFormation checks over every template under ``root``: (its version, failed + skipped)."""
    proc = subprocess.run(
        [str(checkov), "-d", str(root), "--framework", "cloudformation", "-o", "json", "--compact",
         "--skip-download"], capture_output=True, text=True, env=offline_env(root.parent / "checkov-cache"),
        cwd=root, timeout=300)
    if proc.returncode not in (0, 1):  # 1: some check failed
        raise AssertionError(f"checkov exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    versions = {r["summary"]["checkov_version"] for r in reports}
    errors = [e for r in reports for e in r["results"].get("parsing_errors", [])]
    assert len(versions) == 1 and not errors, f"checkov versions {versions}, unparsed templates {errors}"
    results = [_result(check, "FAILED") for r in reports for check in r["results"]["failed_checks"]]
    results += [_result(check, "SKIPPED") for r in reports for check in r["results"]["skipped_checks"]]
    return versions.pop(), sorted(results)


def _result(check: dict[str, Any], status: str) -> Result:
    return Result(template=check["file_path"].lstrip("/"), resource=check["resource"], check_id=check["check_id"],
                  status=status, comment=check["check_result"].get("suppress_comment") or "")


def under(results: Iterable[Result], folder: str, status: str) -> list[Result]:
    return [r for r in results if r.template.startswith(f"{folder}/") and r.status == status]


def metadata_skips(template: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(Type.LogicalId, check id) -> reason, for every skip in the template's resource Metadata."""
    return {(f"{res['Type']}.{logical_id}", skip["id"]): skip["comment"]
            for logical_id, res in template.get("Resources", {}).items()
            for skip in res.get("Metadata", {}).get("checkov", {}).get("skip", [])}


def without_skips(template: dict[str, Any]) -> dict[str, Any]:
    """A copy with the Checkov skips removed: what Checkov reports when nothing is acknowledged."""
    copy = json.loads(json.dumps(template))
    for res in copy.get("Resources", {}).values():
        res.get("Metadata", {}).pop("checkov", None)
    return copy


# --- docs/security.md's table ------------------------------------------------------------------------

def _stack_kind(template: str) -> str:
    stem = Path(template).name.removesuffix(".template.json")
    kind = stem.rsplit("-", 1)[-1]
    assert kind in STACK_KINDS, f"{template}: not a Network/Storage/Cluster stack"
    return kind


def table(skipped: Iterable[Result]) -> str:
    """The acknowledgements as a Markdown table, one row per stack kind, resource and check."""
    rows = sorted({(STACK_KINDS.index(_stack_kind(r.template)), r.resource, r.check_id, r.comment) for r in skipped})
    lines = ["| check | resource | reason |", "|---|---|---|"]
    for kind, resource, check_id, comment in rows:
        rtype, logical_id = resource.rsplit(".", 1)
        lines.append(f"| {check_id} | `<Name>-{STACK_KINDS[kind]}` `{logical_id}` ({rtype}) | "
                     f"{comment.replace('|', '/')} |")
    return "\n".join(lines)


def doc_section(text: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    assert 0 <= start < end, f"{SECURITY_DOC.name} lacks the {BEGIN} ... {END} markers"
    return text[start + len(BEGIN):end].strip()


def with_section(text: str, body: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    return f"{text[:start + len(BEGIN)]}\n{body}\n{text[end:]}"
