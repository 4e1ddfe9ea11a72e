"""The oldest Python the node package supports, for the tests that run the node zipapp under it.

clusterkit_node promises stdlib-only Python 3.9+: the python3 of alinux2023 and rhel9, the oldest of the
AMIs ClusterKit supports. Those tests need a real 3.9 interpreter, found in this order:

  1. CK_PYTHON39 (a path to one);
  2. .cache/python3.9/usr/bin/python3.9, unpacked by ``ensure()`` (``make test`` runs it);
  3. python3.9 on PATH, then pyenv's 3.9.x.

Debian 12 ships no python3.9 and PyPI has no interpreter to install, so ``ensure()`` takes Debian 11's
python3.9 packages (python3.9-minimal, libpython3.9-minimal, libpython3.9-stdlib: 3.9.2) from Debian's
package archive with apt-get, using a private source list and state directory under .cache, and unpacks
them with ``dpkg-deb -x`` into .cache/python3.9: nothing is installed on the machine. The interpreter finds
its standard library next to itself; it has no ssl module (libssl1.1 is not unpacked), which the node
code never needs (urllib and http.client import it optionally; hashlib falls back to its builtins).

Run as a script (``python3 tests/oldest_python.py``), it ensures one and prints its path; exit 1 when
there is none, with the reason.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache"
UNPACKED = CACHE / "python3.9"
INTERPRETER = UNPACKED / "usr/bin/python3.9"
REQUIRE_ENV = "CK_REQUIRE_PYTHON39"  # CI sets it: the 3.9 tests fail instead of skipping without one
PACKAGES = ("python3.9-minimal", "libpython3.9-minimal", "libpython3.9-stdlib")
SUITE = "bullseye"  # Debian 11, the last Debian release with python3.9
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRRORS = ("http://deb.debian.org/debian", "http://archive.debian.org/debian")


def is_python39(path: str) -> bool:
    try:
        proc = subprocess.run([path, "-I", "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and proc.stdout.strip() == "True"


def candidates() -> list[str]:
    found = [os.environ.get("CK_PYTHON39", ""), str(INTERPRETER), shutil.which("python3.9") or ""]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found += sorted(glob.glob(f"{root}/versions/3.9*/bin/python3.9"))
    return [c for c in found if c and os.path.isfile(c)]


def find() -> str | None:
    """A real python3.9 interpreter, or None."""
    return next((c for c in candidates() if is_python39(c)), None)


def _apt(work: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    options = [f"Dir::Etc::sourcelist={work / 'sources.list'}", "Dir::Etc::sourceparts=-",
               f"Dir::State::Lists={work / 'lists'}", f"Dir::Cache={work / 'cache'}", "Dir::State::status=/dev/null",
               "Debug::NoLocking=1", "Acquire::http::Timeout=30", "APT::Sandbox::User=root"]
    cmd = ["apt-get", "-q"] + [f"-o{o}" for o in options] + list(args)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def unpack() -> str:
    """Download Debian 11's python3.9 packages and unpack them into .cache/python3.9 (see the docstring)."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: unpacking Debian's python3.9 needs a Debian or Ubuntu machine")
    if not os.path.isfile(KEYRING) and os.geteuid() == 0:  # Ubuntu: the keyring is a package of its own
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debian-archive-keyring"],
                       capture_output=True, timeout=600, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if not os.path.isfile(KEYRING):
        raise RuntimeError(f"{KEYRING} not found (install the package debian-archive-keyring)")
    work = CACHE / "python3.9-apt"
    shutil.rmtree(work, ignore_errors=True)
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (work / sub).mkdir(parents=True)
    errors = []
    for mirror in MIRRORS:
        (work / "sources.list").write_text(f"deb [signed-by={KEYRING}] {mirror} {SUITE} main\n")
        update = _apt(work, "update")
        if update.returncode == 0:
            download = _apt(work, "download", *PACKAGES, cwd=work / "debs")
            if download.returncode == 0:
                break
            errors.append(f"{mirror}: apt-get download: {download.stderr.strip()[-300:]}")
        else:
            errors.append(f"{mirror}: apt-get update: {update.stderr.strip()[-300:]}")
    else:
        raise RuntimeError("cannot download Debian's python3.9 packages: " + " | ".join(errors))
    shutil.rmtree(UNPACKED, ignore_errors=True)
    for deb in sorted((work / "debs").glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(UNPACKED)], check=True, capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
    if not is_python39(str(INTERPRETER)):
        raise RuntimeError(f"{INTERPRETER} does not run as Python 3.9 after unpacking")
    return str(INTERPRETER)


def ensure() -> str:
    """A python3.9 interpreter: one already here, else Debian 11's, unpacked into .cache."""
    return find() or unpack()


if __name__ == "__main__":
    try:
        print(ensure())
    except (RuntimeError, subprocess.SubprocessError) as exc:
        print(f"oldest_python: {exc}", file=sys.stderr)
        sys.exit(1)
