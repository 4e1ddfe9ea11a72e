"""Where ``clusterkit diff`` reads its two sides: the cluster files committed at a git ref, and the work tree.

Per cluster, three files: the spec (``cluster_configs/<name>.yaml``), the rendered ParallelCluster config
(``cluster_configs/rendered/<name>.yaml``) and the image lock (``<name>.images.lock``), as text; and the
platform files (``cluster_configs/platforms/<name>.yaml``) the clusters name, kind ``platform``.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from clusterkit.images.lock_file import LOCK_SUFFIX
from clusterkit.paths import CONFIG_DIR_NAME
from clusterkit.spec.errors import ClusterKitError

CONFIG_DIR = CONFIG_DIR_NAME
KINDS = ("spec", "rendered", "lock")
PLATFORM = "platform"  # a platform file's kind: not one of a cluster's KINDS
_FILE_PATTERNS = (
    (re.compile(rf"{CONFIG_DIR}/platforms/([^/]+)\.yaml"), PLATFORM),
    (re.compile(rf"{CONFIG_DIR}/rendered/([^/]+)\.yaml"), "rendered"),
    (re.compile(rf"{CONFIG_DIR}/([^/]+)\.images\.lock"), "lock"),
    (re.compile(rf"{CONFIG_DIR}/([^/]+)\.yaml"), "spec"),
)
DEFAULT_BRANCHES = ("origin/main", "main")


class DiffError(ClusterKitError):
    """A diff that cannot be made (bad ref, not a git work tree): one line, exit 2."""


def file_path(name: str, kind: str) -> str:
    """Repository-relative path of one of a cluster's three files."""
    return {
        "spec": f"{CONFIG_DIR}/{name}.yaml",
        "rendered": f"{CONFIG_DIR}/rendered/{name}.yaml",
        "lock": f"{CONFIG_DIR}/{name}{LOCK_SUFFIX}",
        PLATFORM: f"{CONFIG_DIR}/platforms/{name}.yaml",
    }[kind]


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise DiffError("git not found on PATH (clusterkit diff reads the base side with git)") from None


def resolve_base(root: Path, ref: str | None) -> tuple[str, str]:
    """(how the base was chosen, commit sha). ``None``: merge base with origin/main, else main, else HEAD."""
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise DiffError(f"{root}: not a git work tree (clusterkit diff compares against a git ref)")
    if ref is not None:
        found = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found.returncode != 0:
            raise DiffError(f"unknown git ref '{ref}' "
                            "(give a branch, tag or commit; in a shallow clone fetch it first)")
        return ref, found.stdout.strip()
    for branch in DEFAULT_BRANCHES:
        base = _git(root, "merge-base", "HEAD", branch)
        if base.returncode == 0 and base.stdout.strip():
            return f"merge base with {branch}", base.stdout.strip()
    head = _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if head.returncode != 0:
        raise DiffError(f"{root}: the repository has no commit yet (nothing to compare against)")
    return "HEAD", head.stdout.strip()


def _classify(relpath: str) -> tuple[str, str] | None:
    for pattern, kind in _FILE_PATTERNS:
        match = pattern.fullmatch(relpath)
        if match:
            return match.group(1), kind
    return None


Snapshot = dict[tuple[str, str], str]  # (cluster, kind) -> file text


def git_snapshot(root: Path, sha: str) -> Snapshot:
    """The cluster files committed at ``sha`` (``git ls-tree`` + ``git show``)."""
    listing = _git(root, "ls-tree", "-r", "--name-only", "-z", sha, "--", f"{CONFIG_DIR}/")
    if listing.returncode != 0:
        raise DiffError(f"git ls-tree {sha[:12]} failed: {listing.stderr.strip()}")
    snapshot: Snapshot = {}
    for relpath in sorted(filter(None, listing.stdout.split("\0"))):
        key = _classify(relpath)
        if key is None:
            continue
        shown = _git(root, "show", f"{sha}:./{relpath}")  # ./: relative to root, which may be a subdirectory
        if shown.returncode != 0:
            raise DiffError(f"git show {sha[:12]}:{relpath} failed: {shown.stderr.strip()}")
        snapshot[key] = shown.stdout
    return snapshot


def tree_snapshot(root: Path) -> Snapshot:
    """The cluster files in the working tree, committed or not."""
    snapshot: Snapshot = {}
    config = root / CONFIG_DIR
    found = [*config.glob("*.yaml"), *config.glob(f"*{LOCK_SUFFIX}"), *config.glob("rendered/*.yaml"),
             *config.glob("platforms/*.yaml")]
    for path in sorted(found):
        key = _classify(path.relative_to(root).as_posix())
        if key is not None and path.is_file():
            snapshot[key] = path.read_text(encoding="utf-8")
    return snapshot


def by_cluster(snapshot: Snapshot) -> dict[str, dict[str, str | None]]:
    """cluster -> kind -> file text (None when that file is absent on this side); platforms left out."""
    grouped: dict[str, dict[str, str | None]] = {}
    for (name, kind), text in snapshot.items():
        if kind != PLATFORM:
            grouped.setdefault(name, {})[kind] = text
    return grouped


def by_platform(snapshot: Snapshot) -> dict[str, str]:
    """platform -> its file's text, on this side."""
    return {name: text for (name, kind), text in snapshot.items() if kind == PLATFORM}
