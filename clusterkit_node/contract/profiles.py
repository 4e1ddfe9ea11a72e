"""Node profiles: what ParallelCluster's official AMI of each OS holds for containers (node_profiles.json).

Why one file: the node code (the start-path line names what the AMI lacks and whether this node differs
from its profile), ``clusterkit validate`` (which start path nodes of the spec's OS will use) and the
real-runtime tests (the node root hides what the AMI lacks) must agree on the same facts, each with the
cookbook file it comes from. The file ships next to the zipapp in the bundle; from a checkout it is
``clusterkit/data/node_profiles.json``. Stdlib only, Python 3.9.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from clusterkit_node.contract.bundle_files import PROFILES_NAME, data_path
from clusterkit_node.contract.compat import parse_constraint, satisfies
from clusterkit_node.contract.console import UsageError


@dataclass(frozen=True)
class Fact:
    value: Any
    source: str  # the file it comes from, or "unsourced: why" for a stated guess


@dataclass(frozen=True)
class NodeProfile:
    os: str
    programs: Dict[str, Fact]  # program -> present (bool)
    hooks_linked: Fact         # hooks the cookbook links into /etc/enroot/hooks.d
    dev_fuse_mode: Fact        # "0666" (users may mount FUSE file systems) or e.g. "0600"
    python3: Fact
    nvidia_container_cli: Fact = Fact(False, "unsourced: not stated")  # does the AMI ship it (bool)
    package_format: Fact = Fact("rpm", "unsourced: not stated")        # "rpm" or "deb": how its packages come
    squashfuse_ll: Fact = Fact(None, "unsourced: not stated")  # the version of the AMI's squashfuse_ll, or None

    def has(self, program: str) -> bool:
        fact = self.programs.get(program)
        return bool(fact and fact.value)

    def lacks(self) -> Tuple[str, ...]:
        """Programs the profile knows about that this AMI does not have, sorted."""
        return tuple(sorted(name for name, fact in self.programs.items() if not fact.value))

    @property
    def fuse_for_users(self) -> bool:
        return int(str(self.dev_fuse_mode.value), 8) & 0o006 == 0o006


@dataclass(frozen=True)
class Pairing:
    """An enroot/pyxis pair on which an option does not work (it applies when both versions are known and meet
    their constraints)."""

    id: str
    when: Dict[str, str]  # "pyxis"/"enroot" -> constraint like ">=0.24.0"
    message: str          # {pyxis} and {enroot} are filled in
    source: str

    def applies(self, versions: Dict[str, Optional[str]]) -> bool:
        for component, constraint in self.when.items():
            version = versions.get(component)
            if not version or not re.fullmatch(r"\d+(\.\d+)*", version) or not satisfies(version, constraint):
                return False
        return True

    def text(self, versions: Dict[str, Optional[str]]) -> str:
        return self.message.format(pyxis=versions.get("pyxis"), enroot=versions.get("enroot"))


@dataclass(frozen=True)
class ContainerCli:
    """NVIDIA's nvidia-container-cli, which enroot's 98-nvidia.sh hook needs for any image that asks for GPUs: the
    packages GPU nodes install, the version ClusterKit pins by default, versions never to install, and where
    NVIDIA publishes them."""

    packages: Fact    # package names, in install order (library first)
    version: Fact     # the default pin, "1.18.2"
    avoid: Fact       # versions refused even when pinned
    repository: Fact  # NVIDIA's repository root

    def refused(self, version: str) -> Optional[str]:
        """Why ``version`` must not be installed, or None."""
        if version in self.avoid.value:
            return f"nvidia-container-cli {version} is a known-bad release: {self.avoid.source}"
        return None


@dataclass(frozen=True)
class Profiles:
    programs: Dict[str, str]  # program -> why it matters
    profiles: Dict[str, NodeProfile]
    pyxis: Fact
    container_cli: ContainerCli
    pairings: Tuple[Pairing, ...] = ()

    def get(self, os_name: str) -> Optional[NodeProfile]:
        return self.profiles.get(os_name)

    def pairing_problems(self, pyxis: Optional[str], enroot: Optional[str]) -> List[Tuple[Pairing, str]]:
        """The pairings this node's pyxis and enroot fall into, with their one-line messages."""
        versions = {"pyxis": pyxis, "enroot": enroot}
        return [(p, p.text(versions)) for p in self.pairings if p.applies(versions)]


def _fact(doc: Dict[str, Any], key: str, where: str) -> Fact:
    entry = doc.get(key)
    if not isinstance(entry, dict) or "value" not in entry and "present" not in entry:
        raise ValueError(f"{where}.{key}: expected an object with value/present and source")
    source = entry.get("source")
    if not isinstance(source, str) or not source:
        raise ValueError(f"{where}.{key}: every fact needs a source (or 'unsourced: why')")
    return Fact(entry.get("value", entry.get("present")), source)


def parse(doc: Any) -> Profiles:
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), dict):
        raise ValueError("expected an object with 'profiles'")
    programs = doc.get("programs")
    if not isinstance(programs, dict):
        raise ValueError("expected 'programs': {name: why}")
    out: Dict[str, NodeProfile] = {}
    for os_name, entry in doc["profiles"].items():
        where = f"profiles.{os_name}"
        progs = entry.get("programs", {})
        unknown = sorted(set(progs) ^ set(programs))
        if unknown:
            raise ValueError(f"{where}.programs: must list exactly the programs of 'programs' (differs: "
                             f"{', '.join(unknown)})")
        facts = {name: _fact(progs, name, f"{where}.programs") for name in progs}
        mode = _fact(entry, "dev_fuse_mode", where)
        if not isinstance(mode.value, str) or len(mode.value) != 4 or not mode.value.isdigit():
            raise ValueError(f"{where}.dev_fuse_mode: expected an octal mode such as \"0666\"")
        cli = _fact(entry, "nvidia_container_cli", where)
        fmt = _fact(entry, "package_format", where)
        if not isinstance(cli.value, bool) or fmt.value not in ("rpm", "deb"):
            raise ValueError(f"{where}: nvidia_container_cli.present must be true/false, package_format rpm or deb")
        reader = _fact(entry, "squashfuse_ll", where)
        if reader.value is not None and not (isinstance(reader.value, str) and re.fullmatch(r"\d+\.\d+\.\d+",
                                                                                            reader.value)):
            raise ValueError(f"{where}.squashfuse_ll: expected the AMI's squashfuse_ll version (\"0.5.0\") or null")
        out[os_name] = NodeProfile(os_name, facts, _fact(entry, "hooks_linked", where), mode,
                                   _fact(entry, "python3", where), cli, fmt, reader)
    pairings = []
    for i, raw in enumerate(doc.get("pairings", [])):
        where = f"pairings[{i}]"
        when = raw.get("when") if isinstance(raw, dict) else None
        if not isinstance(when, dict) or not when or set(when) - {"pyxis", "enroot"}:
            raise ValueError(f"{where}.when: expected constraints on pyxis and/or enroot")
        for constraint in when.values():
            parse_constraint(str(constraint))  # ValueError names a bad clause
        for key in ("id", "message", "source"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise ValueError(f"{where}.{key}: missing")
        pairings.append(Pairing(raw["id"], {k: str(v) for k, v in when.items()}, raw["message"], raw["source"]))
    return Profiles(dict(programs), out, _fact(doc, "pyxis", "node_profiles"),
                    _container_cli(doc.get("nvidia_container_cli")), tuple(pairings))


def _container_cli(entry: Any) -> ContainerCli:
    where = "nvidia_container_cli"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected an object with packages, version, avoid and repository")
    cli = ContainerCli(*(_fact(entry, key, where) for key in ("packages", "version", "avoid", "repository")))
    if not (isinstance(cli.packages.value, list) and cli.packages.value
            and all(isinstance(p, str) and re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", p) for p in cli.packages.value)):
        raise ValueError(f"{where}.packages: expected a list of package names")
    if not isinstance(cli.version.value, str) or not re.fullmatch(CLI_VERSION_RE, cli.version.value):
        raise ValueError(f"{where}.version: expected a version such as 1.18.2")
    if not isinstance(cli.avoid.value, list) or not all(isinstance(v, str) for v in cli.avoid.value):
        raise ValueError(f"{where}.avoid: expected a list of versions")
    if not isinstance(cli.repository.value, str) or not cli.repository.value.startswith("https://"):
        raise ValueError(f"{where}.repository: expected an https:// URL")
    return cli


CLI_VERSION_RE = r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}"


def load(path: Optional[str] = None) -> Profiles:
    """The profiles next to the zipapp (or in a checkout); a missing or broken file is a usage error."""
    path = path or data_path(PROFILES_NAME)
    try:
        with open(path, encoding="utf-8") as fh:
            return parse(json.load(fh))
    except (OSError, ValueError) as exc:
        raise UsageError([f"{path}: {exc} (the node profiles ship in the ClusterKit bundle as {PROFILES_NAME}; "
                          "rebuild it with the CDK app)"])
