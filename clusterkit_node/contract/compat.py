"""Evaluate ClusterKit's compatibility rules (compat_rules.json) against known software versions.

One evaluator for both sides, so a rule means the same thing everywhere:
- ``python -m clusterkit validate`` imports this module (clusterkit.rules.compat_rules) and checks the versions a
  spec *expects* in each image;
- ``clusterkit_node.pyz fingerprint`` on every compute node checks the versions the head node *recorded*
  in the store manifest against the host's NVIDIA driver, and refuses to boot a node that cannot run them.
Stdlib only, Python 3.9+, no import of the rest of the node package (it ships in the node zipapp).

Rule kinds (deliberately few and declarative; every rule names its public source):

  requires         {"if": {"nccl": ">=2.19"}, "then": {"efa_installer": ">=1.29"}}
                   when every "if" component is known and in range, every known "then" component must
                   be in range. A component the image does not reveal is never guessed: no finding.
                   Without "if" the rule always applies. An optional "message" (a str.format template
                   using {image} and the components the rule names, e.g. {nccl}) words the finding, e.g.
                   "not covered" for a version the maker never tested rather than "needs"; a rule
                   without "if" must have one. "coverage": true marks a rule whose finding means "the
                   makers' notes do not cover this combination" (untested) rather than "incompatible":
                   validate reports it under its own warning id, image-combination-untested.
  driver_for_cuda  {"min_driver": {"12": "525.60.13", "13": "580"}}
                   the host NVIDIA driver must be >= the entry whose key is the longest version prefix of
                   the image's CUDA version (keys "12" and "12.8" both match CUDA 12.8.1; "12.8" wins).

Versions compare part by part: digit runs as numbers, letter runs as text, so 1.22.0amzn4.0 sorts after
1.22.0 and before 1.22.1, and 2.19 == 2.19.0. (Pre-release tags such as PyTorch's 2.6.0a0 also sort
after the release; no rule constrains such a component.)
Constraints are comma-separated comparisons: ">=2.17.1", ">=1.10,<1.14", "==1.29", "!=2.19.3".
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

KINDS = ("requires", "driver_for_cuda")
LEVELS = ("error", "warning")

# Components a rule may name: what the image sync reads out of an image (manifest "versions").
COMPONENTS: Dict[str, str] = {
    "aws_ofi_nccl": "aws-ofi-nccl",
    "cuda": "CUDA",
    "efa_installer": "EFA installer",
    "libfabric": "libfabric",
    "nccl": "NCCL",
    "pytorch": "PyTorch",
}

_RULE_KEYS = {
    "requires": {"id", "kind", "level", "if", "then", "message", "coverage", "why", "source"},
    "driver_for_cuda": {"id", "kind", "level", "min_driver", "message", "why", "source"},
}
# "generated": provenance of the rules clusterkit.rules.compat_build writes (from aws-ofi-nccl's notes).
_TOP_KEYS = {"source", "as_of", "generated", "rules", "rules_version"}
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+_~-]*$")
_CLAUSE_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9A-Za-z.+_~-]*)\s*$")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
# Placeholders a driver_for_cuda message may use.
_MESSAGE_FIELDS = {"driver", "image", "cuda", "min_driver"}


class RulesError(Exception):
    """The rules file is unusable; ``lines`` holds one problem per line (all of them at once)."""

    def __init__(self, lines: List[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Rule:
    id: str
    kind: str
    level: str
    why: str
    source: str
    when: Tuple[Tuple[str, str], ...] = ()        # requires: (component, constraint) that trigger it
    then: Tuple[Tuple[str, str], ...] = ()        # requires: (component, constraint) that must hold
    min_driver: Tuple[Tuple[str, str], ...] = ()  # driver_for_cuda: (CUDA version prefix, driver)
    message: str = ""                             # str.format template (driver_for_cuda; optional for requires)
    coverage: bool = False                        # requires: breaking it means "untested", not "incompatible"


@dataclass(frozen=True)
class RuleSet:
    source: str
    as_of: str
    rules: Tuple[Rule, ...]

    def ids(self) -> List[str]:
        return [r.id for r in self.rules]


@dataclass(frozen=True)
class Finding:
    """One broken rule for one image. ``component`` is the version that has to change."""

    rule: str
    kind: str  # requires: the image's own versions clash; driver_for_cuda: this host cannot run it
    level: str
    image: str
    component: str
    message: str
    why: str
    source: str
    coverage: bool = False  # the makers' notes do not cover this combination (untested, not known broken)

    def as_dict(self) -> Dict[str, str]:
        return {"rule": self.rule, "kind": self.kind, "level": self.level, "image": self.image,
                "component": self.component, "message": self.message}

    def text(self) -> str:
        return f"{self.message} [{self.rule}: {self.why}]"


# ------------------------------------------------------------------------------------------- versions

def version_parts(version: str) -> List[object]:
    """'1.22.0amzn4.0' -> [1, 22, 0, 'amzn', 4, 0]; separators are dropped."""
    return [int(p) if p.isdigit() else p for p in re.findall(r"\d+|[A-Za-z]+", version)]


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1. A missing part counts as 0 against a number and as 'older' against text, so
    2.19 == 2.19.0 and 1.22.0 < 1.22.0amzn4.0; at one position a number sorts after text."""
    pa, pb = version_parts(a), version_parts(b)
    for i in range(max(len(pa), len(pb))):
        x = pa[i] if i < len(pa) else None
        y = pb[i] if i < len(pb) else None
        if x is None:
            x = 0 if isinstance(y, int) else ""
        if y is None:
            y = 0 if isinstance(x, int) else ""
        if isinstance(x, int) != isinstance(y, int):
            return 1 if isinstance(x, int) else -1
        if x != y:
            return -1 if x < y else 1  # type: ignore[operator]
    return 0


def parse_constraint(text: str) -> List[Tuple[str, str]]:
    """'>=1.10,<1.14' -> [('>=', '1.10'), ('<', '1.14')]; ValueError names a bad clause."""
    clauses = []
    for raw in str(text).split(","):
        m = _CLAUSE_RE.match(raw)
        if not m:
            raise ValueError(f"'{raw.strip()}' is not a comparison like >=2.19")
        clauses.append((m.group(1), m.group(2)))
    return clauses


def satisfies(version: str, constraint: str) -> bool:
    for op, want in parse_constraint(constraint):
        c = compare_versions(version, want)
        ok = {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "==": c == 0, "!=": c != 0}[op]
        if not ok:
            return False
    return True


def prefix_matches(prefix: str, version: str) -> bool:
    """'12.8' covers 12.8 and 12.8.1, not 12.80; '12' covers every 12.x."""
    if version == prefix:
        return True
    return version.startswith(prefix) and not version[len(prefix)].isalnum()


# ------------------------------------------------------------------------------------------- loading

def load_rules(path: str) -> RuleSet:
    """Read and validate the rules file; RulesError lists every problem."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise RulesError([f"{path}: cannot read compatibility rules: {exc.strerror}"])
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RulesError([f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"])
    return parse_rules(doc, path)


def parse_rules(doc: object, where: str = "compat_rules.json") -> RuleSet:
    problems: List[str] = []
    if not isinstance(doc, dict):
        raise RulesError([f"{where}: not a JSON object"])
    for key in sorted(set(doc) - _TOP_KEYS):
        problems.append(f"{where}: {key}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    for key in ("source", "as_of"):
        if not isinstance(doc.get(key), str) or not doc.get(key):
            problems.append(f"{where}: {key}: missing or empty (say where the rules come from and when "
                            f"they were checked)")
    if "generated" in doc and not isinstance(doc["generated"], dict):
        problems.append(f"{where}: generated: not an object (the generated rules' provenance)")
    raw_rules = doc.get("rules")
    if not isinstance(raw_rules, list):
        raise RulesError(problems + [f"{where}: rules: missing or not a list"])
    rules: List[Rule] = []
    seen = set()
    for i, raw in enumerate(raw_rules):
        at = f"{where}: rules[{i}]"
        if not isinstance(raw, dict):
            problems.append(f"{at}: not an object")
            continue
        rule_id = raw.get("id")
        if isinstance(rule_id, str):
            at = f"{where}: rules[{i}] ({rule_id})"
        before = len(problems)
        if not isinstance(rule_id, str) or not _ID_RE.fullmatch(rule_id):
            problems.append(f"{at}: id: {rule_id!r} is not a rule id (lowercase letters, digits, . and -)")
        elif rule_id in seen:
            problems.append(f"{at}: id: duplicate rule id")
        seen.add(rule_id)
        kind = raw.get("kind")
        if kind not in KINDS:
            problems.append(f"{at}: kind: {kind!r} is not one of {', '.join(KINDS)}")
            continue
        for key in sorted(set(raw) - _RULE_KEYS[kind]):
            problems.append(f"{at}: {key}: unknown key for a {kind} rule")
        if raw.get("level") not in LEVELS:
            problems.append(f"{at}: level: {raw.get('level')!r} is not one of {', '.join(LEVELS)}")
        for key in ("why", "source"):
            text = raw.get(key)
            if not isinstance(text, str) or not text.strip():
                problems.append(f"{at}: {key}: missing or empty (every rule explains itself and names "
                                f"its source)")
        if kind == "requires":
            when = _component_ranges(raw.get("if"), f"{at}: if", problems) if "if" in raw else ()
            then = _component_ranges(raw.get("then"), f"{at}: then", problems)
            template = raw.get("message", "")
            coverage = raw.get("coverage", False)
            if not isinstance(coverage, bool):
                problems.append(f"{at}: coverage: {coverage!r} is not true or false")
            fields = {"image"} | {c for c, _ in when + then}
            if not isinstance(template, str) or ("message" in raw and not template):
                problems.append(f"{at}: message: not a template string")
            elif not template and "if" not in raw:
                problems.append(f"{at}: message: required when the rule has no 'if' (say what the finding means)")
            else:
                used = set(re.findall(r"{(\w*)}", template))
                if used - fields:
                    problems.append(f"{at}: message: unknown placeholder(s) {', '.join(sorted(used - fields))} "
                                    f"(known: {', '.join(sorted(fields))})")
            # a non-string id was a problem above: the isinstance only narrows it for the type checker
            if len(problems) == before and isinstance(rule_id, str) and isinstance(template, str):
                rules.append(Rule(id=rule_id, kind=kind, level=raw["level"], why=raw["why"],
                                  source=raw["source"], when=when, then=then, message=template,
                                  coverage=coverage is True))
        else:
            table = raw.get("min_driver")
            entries: List[Tuple[str, str]] = []
            if not isinstance(table, dict) or not table:
                problems.append(f"{at}: min_driver: must map CUDA versions to driver versions")
            else:
                for cuda, driver in sorted(table.items(), key=lambda kv: version_parts(kv[0])):
                    if not re.fullmatch(r"\d+(\.\d+)?", str(cuda)):
                        problems.append(f"{at}: min_driver: key {cuda!r} is not a CUDA major or "
                                        f"major.minor like 12 or 12.8")
                    elif not isinstance(driver, str) or not _VERSION_RE.fullmatch(driver):
                        problems.append(f"{at}: min_driver.{cuda}: {driver!r} is not a driver version")
                    else:
                        entries.append((cuda, driver))
            message = raw.get("message")
            if not isinstance(message, str) or not message:
                problems.append(f"{at}: message: missing (a template using {{driver}}, {{image}}, "
                                f"{{cuda}}, {{min_driver}})")
            else:
                used = set(re.findall(r"{(\w*)}", message))
                if used - _MESSAGE_FIELDS:
                    problems.append(f"{at}: message: unknown placeholder(s) "
                                    f"{', '.join(sorted(used - _MESSAGE_FIELDS))} (known: "
                                    f"{', '.join(sorted(_MESSAGE_FIELDS))})")
            if len(problems) == before and isinstance(rule_id, str) and isinstance(message, str):
                rules.append(Rule(id=rule_id, kind=kind, level=raw["level"], why=raw["why"],
                                  source=raw["source"], min_driver=tuple(entries), message=message))
    if problems:
        raise RulesError(problems)
    return RuleSet(source=doc["source"], as_of=doc["as_of"], rules=tuple(rules))


def _component_ranges(raw: object, at: str, problems: List[str]) -> Tuple[Tuple[str, str], ...]:
    if not isinstance(raw, dict) or not raw:
        problems.append(f"{at}: must map components to version constraints")
        return ()
    out = []
    for comp, constraint in sorted(raw.items()):
        if comp not in COMPONENTS:
            problems.append(f"{at}.{comp}: unknown component (known: {', '.join(sorted(COMPONENTS))})")
            continue
        try:
            parse_constraint(constraint)
        except ValueError as exc:
            problems.append(f"{at}.{comp}: {exc}")
            continue
        out.append((comp, str(constraint)))
    return tuple(out)


# ----------------------------------------------------------------------------------------- evaluating

class _Named(Dict[str, str]):
    """Template values; a component the image does not reveal reads "unknown" (another "then" fired)."""

    def __missing__(self, key: str) -> str:
        return "unknown"


def _pretty(constraint: str) -> str:
    return ", ".join(f"{op} {v}" for op, v in parse_constraint(constraint))


def driver_entry(rule: Rule, cuda: str) -> Optional[Tuple[str, str]]:
    """The most specific (CUDA prefix, minimum driver) entry of a driver_for_cuda rule for ``cuda``."""
    best = None
    for prefix, driver in rule.min_driver:
        if prefix_matches(prefix, cuda) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, driver)
    return best


def check(rules: RuleSet, image: str, versions: Dict[str, str],
          driver: Optional[str] = None) -> List[Finding]:
    """Every rule the known ``versions`` of ``image`` (and the host ``driver``, when given) break.

    Unknown versions never produce a finding. One extra warning (rule ``compat-coverage``) says when
    the image's CUDA is covered by no error-level driver rule: then no node can check its driver.
    """
    found: List[Finding] = []
    for rule in rules.rules:
        if rule.kind == "requires":
            if not all(c in versions and satisfies(versions[c], con) for c, con in rule.when):
                continue
            trigger = ", ".join(f"{COMPONENTS[c]} {versions[c]}" for c, _ in rule.when)
            for comp, con in rule.then:
                if comp in versions and not satisfies(versions[comp], con):
                    if rule.message:
                        named = {c: versions[c] for c, _ in rule.when + rule.then if c in versions}
                        message = rule.message.format_map(_Named(image=image, **named))
                    else:
                        message = (f"image {image}: {trigger} needs {COMPONENTS[comp]} {_pretty(con)} "
                                   f"(it has {versions[comp]})")
                    found.append(Finding(
                        rule=rule.id, kind=rule.kind, level=rule.level, image=image, component=comp,
                        message=message, why=rule.why, source=rule.source, coverage=rule.coverage))
        elif rule.kind == "driver_for_cuda":
            cuda = versions.get("cuda")
            entry = driver_entry(rule, cuda) if cuda else None
            if entry is None or not driver or compare_versions(driver, entry[1]) >= 0:
                continue
            found.append(Finding(
                rule=rule.id, kind=rule.kind, level=rule.level, image=image, component="cuda",
                message=rule.message.format(driver=driver, image=image, cuda=cuda, min_driver=entry[1]),
                why=rule.why, source=rule.source))
    if any(f.kind == "driver_for_cuda" and f.level == "error" for f in found):
        # "cannot run" says it all; a "runs in compatibility mode" warning would contradict it.
        found = [f for f in found if not (f.kind == "driver_for_cuda" and f.level == "warning")]
    cuda = versions.get("cuda")
    if cuda and not any(r.kind == "driver_for_cuda" and r.level == "error" and driver_entry(r, cuda)
                        for r in rules.rules):
        found.append(Finding(
            rule="compat-coverage", kind="driver_for_cuda", level="warning", image=image,
            component="cuda",
            message=f"image {image}: no rule gives the minimum NVIDIA driver for CUDA {cuda}, so nodes "
                    f"cannot check their driver against it",
            why="add the CUDA major version to an error-level driver_for_cuda rule",
            source="compat_rules.json"))
    return found
