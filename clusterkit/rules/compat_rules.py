"""Compatibility rules (clusterkit/data/compat_rules.json) applied to the versions a spec expects.

The evaluator is clusterkit_node.contract.compat, imported here: the same code runs on compute nodes (stdlib
Python 3.9, shipped in the node zipapp), so a rule cannot mean one thing at validate time and another
at boot. Validate only knows each image's ``expect`` versions (the lock holds digests, not versions); the
versions actually recorded from the .sqsh files are checked on every compute node at boot, together with
the host's NVIDIA driver.
"""
from __future__ import annotations

import functools
import json

from clusterkit import paths
from clusterkit.rules.limits import EXPECT_VERSION
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks
from clusterkit_node.contract import compat as node_compat

# Module attributes, read at call time (a test points them at a broken rules file).
REPO = paths.ROOT
RULES_PATH = paths.COMPAT_RULES


@functools.lru_cache(maxsize=1)
def rules() -> node_compat.RuleSet:
    return node_compat.load_rules(str(RULES_PATH))


def _rules_problem(lines: list[str]) -> Problem:
    """A broken rules file is ClusterKit's own bug, reported like any other file problem."""
    first = lines[0]
    shown = str(RULES_PATH.relative_to(REPO))
    line = col = 0
    try:
        json.loads(RULES_PATH.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        line, col = exc.lineno, exc.colno
    except OSError:
        pass
    message = first.split(": ", 1)[-1] if first.startswith(str(RULES_PATH)) else first
    extra = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    return Problem(shown, line, col, "", f"compatibility rules unusable: {message}{extra}")


def expect_problems(spec: ClusterSpec, marks: Marks) -> list[Problem]:
    """Warnings for images whose expected versions break a rule, at containers.images[i].expect.<key>."""
    if not spec.containers.images:
        return []
    try:
        ruleset = rules()
    except node_compat.RulesError as exc:
        return [_rules_problem(exc.lines)]
    problems = []
    for i, image in enumerate(spec.containers.images):
        expect = image.expect.as_dict()
        if not expect or not all(EXPECT_VERSION.fullmatch(v) for v in expect.values()):
            continue  # a malformed version is rules/containers.py's error; no rule can judge it
        for finding in node_compat.check(ruleset, image.name, expect):
            hint = f"{finding.why}; rule {finding.rule} in {RULES_PATH.relative_to(REPO)}"
            problems.append(marks.problem(f"containers.images[{i}].expect.{finding.component}",
                                          finding.message, hint, level="warning",
                                          id="image-combination-untested" if finding.coverage
                                          else "image-expect-incompatible"))
    return problems
