"""cdk-nag's report of the last synth, read back: ``<outdir>/validation-report.json``.

cdk-nag 3 (a CDK policy-validation plugin, wired in ``stacks/nag.py``) writes every finding of a synth,
acknowledged or not, into the cloud assembly. Reading that file is plain JSON, so it lives here, on the
side that may read files; the stacks only acknowledge findings.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

REPORT_FILE = "validation-report.json"


@dataclass(frozen=True)
class Finding:
    rule: str
    path: str
    reason: str | None  # None: not acknowledged


def findings(outdir: str | Path) -> list[Finding]:
    """Every cdk-nag finding of the last synth into ``outdir``, acknowledged ones with their reason."""
    path = Path(outdir) / REPORT_FILE
    if not path.exists():
        return []
    report = json.loads(path.read_text(encoding="utf-8"))
    found: list[Finding] = []
    for plugin in report.get("pluginReports", []):
        for violation in plugin.get("violations", []):
            for where in violation.get("violatingConstructs", []):
                found.append(Finding(violation["ruleName"], where["constructPath"], None))
        for violation in plugin.get("suppressedViolations", []):
            for where in violation.get("violatingConstructs", []):
                found.append(Finding(violation["ruleName"], where["constructPath"], violation.get("reason", "")))
    return sorted(found, key=lambda f: (f.path, f.rule))
