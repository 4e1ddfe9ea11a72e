"""``clusterkit_node.pyz packages-fetch``: NVIDIA's nvidia-container-cli packages into the store, once (head node).

Why: enroot's 98-nvidia.sh hook needs ``nvidia-container-cli`` for every image that sets NVIDIA_VISIBLE_DEVICES,
and ParallelCluster's AMIs lack it. Compute nodes must not each reach the internet, and must not install what
changed on the shared file system after it was checked; so the head node reads NVIDIA's repository index for the
cluster's OS (the profile's package_format) and its own architecture (ParallelCluster requires the compute nodes'),
picks each package of node_profiles.json's list at the pinned upstream version (the highest revision), downloads
each over HTTPS with timeouts and a bounded retry, checks size and sha256 against the index, and publishes the set
with its record (package_set.py) where GPU nodes install it from (``layout.package_set_dir``).

This module is the store side and the command; reading the index is package_index.py, the network
package_download.py.

- Trust: every file's size and sha256 against the index before it is published, and again by every node against
  the record.
- Publishing (docs/store-concurrency.md, package-sets-publish-whole): checked without a lock first (a valid set is
  left alone: no network); else under ``<staging>/packages.lock`` checked again, downloaded into a private temp dir
  ``<staging>/tmp/pkgset.*.tmp-<pid>``, packages.json written last, and the directory renamed into place. A set
  that does not match its record is re-fetched and swapped in the same way.
- Failures the network or the repository can cause are one line naming what failed, with a hint; never a traceback.
- The repository root is the profile's; ``--repository`` or ``CK_NVIDIA_REPOSITORY`` (tests: a loopback server)
  override it on the head node only: http:// is accepted for loopback hosts alone.

Stdlib only, Python 3.9.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
from typing import Dict, Optional

from clusterkit_node.contract import profiles as node_profiles
from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, UsageError, error, log
from clusterkit_node.contract.layout import (
    PACKAGE_SET_NAME,
    PACKAGE_SET_TMP_RE,
    package_set_tmp,
    tmp_dir,
)
from clusterkit_node.store import package_set
from clusterkit_node.store.atomic_files import ensure_dir, fsync_dir
from clusterkit_node.store.concurrency import packages_lock
from clusterkit_node.store.package_download import Fetcher, download, read_index
from clusterkit_node.store.package_index import (
    COMPONENT,
    REPOSITORY_ENV,
    FetchError,
    Request,
    repository_url,
    safe_href,
    select,
)
from clusterkit_node.store.package_set import FORMAT_ARCH, PackageFile, PackageSet, PackageSetError
from clusterkit_node.store.staging import ensure_store

# --- the store ------------------------------------------------------------------------------------------------------

def published_problem(req: Request) -> Optional[str]:
    """None when a set for this request is published and every file matches its record (sha256 of a few MB: cheap);
    else why it must be fetched ("" when there is none)."""
    try:
        found = package_set.read(req.store, COMPONENT, req.version, req.os_name, req.arch)
        if found is None:
            return ""
        if found.format != req.fmt or tuple(f.package for f in found.files) != req.packages:
            return (f"it holds {found.format} packages {', '.join(f.package for f in found.files)}, not "
                    f"{req.fmt} {', '.join(req.packages)}")
        package_set.verified_paths(req.directory, found)
    except PackageSetError as exc:
        return str(exc)
    return None


def clean_debris(store: str) -> None:
    """Temp dirs of killed fetches (under the packages lock no other fetch runs: all of them are debris)."""
    try:
        names = os.listdir(tmp_dir(store))
    except FileNotFoundError:
        return
    for name in names:
        path = os.path.join(tmp_dir(store), name)
        if PACKAGE_SET_TMP_RE.match(name) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
            log(f"removed {path} (left by an interrupted package fetch)")


def fetch_into(req: Request, work: str, fetcher: Fetcher) -> PackageSet:
    """Download and check every file into work (private, 0700), then its record, written last."""
    entries, verified_against = read_index(req, fetcher)
    chosen = select(entries, req, verified_against)
    files = []
    for entry in chosen:
        path, name = safe_href(entry.href, req.fmt, verified_against)
        url = req.base + path
        log(f"{COMPONENT} {req.version}: downloading {url} ({entry.size} bytes)")
        download(url, os.path.join(work, name), entry, fetcher)
        files.append(PackageFile(name, entry.package, entry.version, entry.sha256, entry.size))
    if len({f.file for f in files}) != len(files):
        raise FetchError(f"{verified_against}: two packages share one file name; check the repository")
    pset = PackageSet(COMPONENT, req.version, req.os_name, req.arch, req.fmt, tuple(files), verified_against, False)
    package_set.parse(package_set.as_dict(pset), verified_against)  # what nodes will accept, checked before publish
    record = os.path.join(work, PACKAGE_SET_NAME)
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, pset.to_json().encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return pset


def publish(req: Request, work: str) -> None:
    """One rename of the checked directory into place; a set it replaces is moved aside first and removed after."""
    final = req.directory
    parent = os.path.dirname(final)
    for d in (os.path.dirname(os.path.dirname(parent)), os.path.dirname(parent), parent):
        ensure_dir(d)
    os.chmod(work, 0o755)
    fsync_dir(work)
    old = ""
    if os.path.lexists(final):
        old = package_set_tmp(req.store, COMPONENT, req.version, req.os_name, req.arch, "old")
        os.rename(final, old)
    os.rename(work, final)
    fsync_dir(parent)
    if old:
        shutil.rmtree(old) if os.path.isdir(old) and not os.path.islink(old) else os.unlink(old)
        fsync_dir(os.path.dirname(old))


def fetch_set(req: Request, fetcher: Fetcher) -> str:
    """Make sure the set is published and valid; "present" (nothing downloaded) or "fetched". FetchError on failure."""
    problem = published_problem(req)
    if problem is None:
        log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: present in {req.directory} (checked against "
            f"its {PACKAGE_SET_NAME})")
        return "present"
    ensure_store(req.store)
    with packages_lock(req.store):
        problem = published_problem(req)  # another head node may have published it meanwhile
        if problem is None:
            log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: published by a concurrent fetch")
            return "present"
        if problem:
            log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: fetching again: {problem}")
        clean_debris(req.store)
        work = package_set_tmp(req.store, COMPONENT, req.version, req.os_name, req.arch)
        os.mkdir(work, 0o700)
        try:
            pset = fetch_into(req, work, fetcher)
            publish(req, work)
        finally:
            if os.path.isdir(work):
                shutil.rmtree(work)
    log(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch}: published "
        f"{', '.join(f'{f.file} ({f.sha256[:12]})' for f in pset.files)} in {req.directory}, checked against "
        f"{pset.verified_against}")
    return "fetched"


# --- the command ----------------------------------------------------------------------------------------------------

def request_for(args: argparse.Namespace, env: Dict[str, str],
                profiles: Optional[node_profiles.Profiles] = None) -> Optional[Request]:
    """The request the flags and the node profiles make, or None when there is nothing to do (off); UsageError for
    what the operator must fix (unknown OS, a malformed or refused version, a bad repository URL)."""
    version = (args.version or "").strip()
    if version == "off":
        return None
    profiles = profiles or node_profiles.load()
    profile = profiles.get(args.os)
    if profile is None:
        raise UsageError([f"--os {args.os}: not a node profile ({', '.join(sorted(profiles.profiles))})"])
    cli = profiles.container_cli
    version = version or str(cli.version.value)
    if not re.fullmatch(node_profiles.CLI_VERSION_RE, version):
        raise UsageError([f"--version {version}: expected a libnvidia-container version such as "
                          f"{cli.version.value}, or off"])
    refused = cli.refused(version)
    if refused:
        raise UsageError([f"{refused}: refused; pin another release, e.g. {cli.version.value} "
                          "(containers.nvidia_container_cli.version)"])
    arch = package_set.normalize_arch(args.arch or os.uname().machine)
    fmt = str(profile.package_format.value)
    if (fmt, arch) not in FORMAT_ARCH:
        raise UsageError([f"--arch {arch}: NVIDIA publishes these packages for x86_64 and aarch64 only"])
    return Request(os.path.abspath(args.store), profile.os, fmt, arch, version, tuple(cli.packages.value),
                   repository_url(args.repository, env, str(cli.repository.value)))


def cmd_packages_fetch(args: argparse.Namespace) -> int:
    req = request_for(args, dict(os.environ))
    if req is None:
        log(f"{COMPONENT}: off (containers.nvidia_container_cli.install: false): nothing to fetch")
        return EXIT_OK
    fetcher = Fetcher(timeout=args.timeout, attempts=max(1, args.attempts), backoff=max(0.0, args.backoff))
    try:
        fetch_set(req, fetcher)
    except FetchError as exc:
        error(f"{COMPONENT} {req.version} for {req.os_name}-{req.arch} not fetched: {exc}")
        return EXIT_FAILED
    return EXIT_OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("packages-fetch", help="head node: fetch NVIDIA's nvidia-container-cli packages for this OS "
                                              "and architecture into the store, checked by sha256 (once)")
    p.add_argument("--store", required=True, help="image store directory, e.g. /fsx/containers")
    p.add_argument("--os", required=True, help="the cluster's OS (a node profile: alinux2023, ubuntu2204, ...)")
    p.add_argument("--version", default="", help="libnvidia-container version (CK_NVIDIA_CLI), or off; default: "
                                                 "the pin in node_profiles.json")
    p.add_argument("--arch", default="", help="x86_64 or aarch64 (default: this node's; PC requires the compute "
                                              "nodes' to match)")
    p.add_argument("--repository", default="", help=f"repository root instead of the profile's (tests; also "
                                                     f"${REPOSITORY_ENV}); https, or http on loopback")
    p.add_argument("--attempts", type=int, default=3, help="tries per URL on a transient failure (default 3)")
    p.add_argument("--backoff", type=float, default=5.0, help="seconds before the first retry, doubled (default 5)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a connection may stall (default 30)")
