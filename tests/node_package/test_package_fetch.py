"""``packages-fetch`` (clusterkit_node/store/package_fetch.py): the head node fetches NVIDIA's nvidia-container-cli
packages into the store once, checked by sha256, and publishes them whole with the record GPU nodes verify.

Real: the node package's command (in process, and once as ``python3 -m clusterkit_node``), urllib against a loopback
HTTP server on 127.0.0.1, the file system (rename, flock). Stand-ins: the repository is a small one in NVIDIA's layout
(``deb/<arch>/Packages``; ``rpm/<arch>/repodata/repomd.xml`` + ``primary.xml.gz``) whose index this file writes, and
whose package files are arbitrary bytes (nothing here installs them).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from clusterkit_node import commands
from clusterkit_node.contract.layout import package_set_dir, staging_dir
from clusterkit_node.store import package_index, package_set

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("libnvidia-container1", "libnvidia-container-tools")
PIN = "1.18.2"


class Repo:
    """Files by URL path, and every GET the server answered (path, status)."""

    def __init__(self) -> None:
        self.files: Dict[str, bytes] = {}
        self.requests: List[str] = []
        self.delay = 0.0
        self.url = ""

    def downloads(self) -> List[str]:
        return [p for p in self.requests if p.endswith((".deb", ".rpm"))]


@contextmanager
def serve() -> Iterator[Repo]:
    repo = Repo()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            repo.requests.append(self.path)
            body = repo.files.get(self.path)
            if repo.delay:
                time.sleep(repo.delay)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    repo.url = f"http://127.0.0.1:{server.server_address[1]}/libnvidia-container/stable"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield repo
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def content(name: str) -> bytes:
    return f"stand-in package {name}\n".encode() * 50


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


ROOT = "/libnvidia-container/stable"


def add_deb(repo: Repo, arch: str = "amd64", versions: tuple = ("1.17.7-1", "1.18.1-1", "1.18.2-1"),
            filename: Optional[Dict[str, str]] = None, bad_sha: str = "") -> None:
    """deb/<arch>/Packages (flat repository: Filename relative to it, './' first as NVIDIA's) and the files."""
    stanzas = []
    for version in versions:
        for pkg in PACKAGES:
            name = f"{pkg}_{version}_{arch}.deb"
            data = content(name)
            repo.files[f"{ROOT}/deb/{arch}/{name}"] = data
            href = (filename or {}).get(pkg, f"./{name}") if version.startswith(PIN) else f"./{name}"
            digest = "0" * 64 if pkg == bad_sha and version.startswith(PIN) else sha(data)
            stanzas.append(f"Package: {pkg}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: NVIDIA\n"
                           f"Filename: {href}\nSize: {len(data)}\nSHA256: {digest}\n"
                           f"Description: stand-in\n multi-line continuation\n")
    repo.files[f"{ROOT}/deb/{arch}/Packages"] = "\n".join(stanzas).encode()


def add_rpm(repo: Repo, arch: str = "x86_64", versions: tuple = (("1.17.7", "1"), ("1.18.2", "1")),
            href: Optional[Dict[str, str]] = None) -> None:
    """rpm/<arch>/repodata/repomd.xml -> primary.xml.gz (createrepo's namespaces) and the files."""
    pkgs = []
    for ver, rel in versions:
        for pkg in PACKAGES:
            name = f"{pkg}-{ver}-{rel}.{arch}.rpm"
            data = content(name)
            repo.files[f"{ROOT}/rpm/{arch}/{name}"] = data
            loc = (href or {}).get(pkg, name) if ver == PIN else name
            pkgs.append(f'<package type="rpm"><name>{pkg}</name><arch>{arch}</arch>'
                        f'<version epoch="0" ver="{ver}" rel="{rel}"/>'
                        f'<checksum type="sha256" pkgid="YES">{sha(data)}</checksum>'
                        f'<size package="{len(data)}" installed="1" archive="1"/><location href="{loc}"/></package>')
    primary = gzip.compress(('<?xml version="1.0" encoding="UTF-8"?>\n<metadata '
                             'xmlns="http://linux.duke.edu/metadata/common" '
                             'xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="%d">%s</metadata>'
                             % (len(pkgs), "".join(pkgs))).encode())
    primary_name = f"repodata/{sha(primary)}-primary.xml.gz"
    repo.files[f"{ROOT}/rpm/{arch}/{primary_name}"] = primary
    repomd = ('<?xml version="1.0" encoding="UTF-8"?>\n<repomd xmlns="http://linux.duke.edu/metadata/repo" '
              'xmlns:rpm="http://linux.duke.edu/metadata/rpm"><revision>1</revision>'
              '<data type="filelists"><checksum type="sha256">%s</checksum>'
              '<location href="repodata/x-filelists.xml.gz"/>'
              '</data><data type="primary"><checksum type="sha256">%s</checksum><location href="%s"/>'
              '<size>%d</size></data></repomd>' % ("1" * 64, sha(primary), primary_name, len(primary)))
    repo.files[f"{ROOT}/rpm/{arch}/repodata/repomd.xml"] = repomd.encode()


def run(capsys, store: Path, os_name: str, repo: Repo, *extra: str) -> tuple:
    argv = ["packages-fetch", "--store", str(store), "--os", os_name, "--repository", repo.url,
            "--attempts", "2", "--backoff", "0", "--timeout", "5", *extra]
    if "--arch" not in extra:
        argv += ["--arch", "x86_64"]
    rc = commands.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def published(store: Path, os_name: str, arch: str = "x86_64", version: str = PIN) -> Path:
    return Path(package_set_dir(str(store), "nvidia-container-cli", version, os_name, arch))


def tmp_leftovers(store: Path) -> List[str]:
    tmp = Path(staging_dir(str(store))) / "tmp"
    return sorted(p.name for p in tmp.iterdir()) if tmp.is_dir() else []


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "fsx" / "containers"


@pytest.fixture(autouse=True)
def _fsx(tmp_path: Path) -> None:
    (tmp_path / "fsx").mkdir()


# --- happy paths ----------------------------------------------------------------------------------------------------

def test_deb_happy_path_publishes_the_pinned_set_with_its_record(capsys, store: Path) -> None:
    with serve() as repo:
        add_deb(repo)
        rc, out, err = run(capsys, store, "ubuntu2204", repo)
    assert rc == 0, err
    assert err == ""
    directory = published(store, "ubuntu2204")
    pset = package_set.read(str(store), "nvidia-container-cli", PIN, "ubuntu2204", "x86_64")
    assert pset is not None and pset.format == "deb" and not pset.pinned
    assert [(f.package, f.version, f.file) for f in pset.files] == [
        ("libnvidia-container1", "1.18.2-1", "libnvidia-container1_1.18.2-1_amd64.deb"),
        ("libnvidia-container-tools", "1.18.2-1", "libnvidia-container-tools_1.18.2-1_amd64.deb")]  # install order
    assert pset.verified_against == f"{repo.url}/deb/amd64/Packages"
    paths = package_set.verified_paths(str(directory), pset)
    assert [Path(p).read_bytes() for p in paths] == [content(f.file) for f in pset.files]
    assert sorted(os.listdir(directory)) == sorted([f.file for f in pset.files] + ["packages.json"])
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755
    assert {stat.S_IMODE((directory / n).stat().st_mode) for n in os.listdir(directory)} == {0o644}
    assert repo.downloads() == [f"{ROOT}/deb/amd64/{f.file}" for f in pset.files]
    assert tmp_leftovers(store) == []
    assert "published libnvidia-container1_1.18.2-1_amd64.deb" in out


def test_rpm_happy_path_reads_repomd_then_primary(capsys, store: Path) -> None:
    with serve() as repo:
        add_rpm(repo, arch="aarch64")
        rc, out, err = run(capsys, store, "alinux2023", repo, "--arch", "arm64")  # uname's other spelling
    assert rc == 0, err
    pset = package_set.read(str(store), "nvidia-container-cli", PIN, "alinux2023", "aarch64")
    assert pset is not None and pset.format == "rpm"
    assert [f.file for f in pset.files] == ["libnvidia-container1-1.18.2-1.aarch64.rpm",
                                            "libnvidia-container-tools-1.18.2-1.aarch64.rpm"]
    assert pset.verified_against.startswith(f"{repo.url}/rpm/aarch64/repodata/") and \
        pset.verified_against.endswith("-primary.xml.gz")
    package_set.verified_paths(str(published(store, "alinux2023", "aarch64")), pset)
    assert repo.requests[0] == f"{ROOT}/rpm/aarch64/repodata/repomd.xml"


def test_the_highest_revision_of_the_pinned_version_wins(capsys, store: Path) -> None:
    with serve() as repo:
        add_rpm(repo, versions=(("1.18.2", "1"), ("1.18.2", "10"), ("1.18.2", "2"), ("1.18.20", "1")))
        rc, _, err = run(capsys, store, "rhel9", repo)
    assert rc == 0, err
    pset = package_set.read(str(store), "nvidia-container-cli", PIN, "rhel9", "x86_64")
    assert pset is not None and [f.version for f in pset.files] == ["1.18.2-10", "1.18.2-10"]


# --- refusals: nothing published ------------------------------------------------------------------------------------

def test_a_sha256_mismatch_is_refused_and_nothing_is_published(capsys, store: Path) -> None:
    with serve() as repo:
        add_deb(repo, bad_sha="libnvidia-container-tools")
        rc, _, err = run(capsys, store, "ubuntu2404", repo)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "sha256" in lines[0] and "nothing published" in lines[0]
    assert "libnvidia-container-tools_1.18.2-1_amd64.deb" in lines[0]
    assert not published(store, "ubuntu2404").exists()
    assert tmp_leftovers(store) == []


@pytest.mark.parametrize("hostile", ["../../etc/x.deb", "/etc/x.deb", "./../x.deb", "sub/../../x.deb",
                                     "http://evil.example/x.deb", "%2e%2e/x.deb", ".hidden.deb", "x.rpm"])
def test_a_hostile_filename_is_refused_before_any_request_for_it(capsys, store: Path, tmp_path: Path,
                                                                 hostile: str) -> None:
    with serve() as repo:
        add_deb(repo, filename={"libnvidia-container-tools": hostile})
        rc, _, err = run(capsys, store, "ubuntu2204", repo)
    assert rc == 1
    assert "refused the file name" in err and repr(hostile) in err and len(err.strip().splitlines()) == 1
    assert not published(store, "ubuntu2204").exists()
    assert not any("x.deb" in p or "hidden" in p for p in repo.requests)
    assert not (tmp_path / "etc").exists() and tmp_leftovers(store) == []


def test_a_hostile_rpm_href_is_refused(capsys, store: Path) -> None:
    with serve() as repo:
        add_rpm(repo, href={"libnvidia-container1": "../../../../etc/passwd.rpm"})
        rc, _, err = run(capsys, store, "rhel9", repo)
    assert rc == 1 and "refused the file name '../../../../etc/passwd.rpm'" in err
    assert not published(store, "rhel9").exists()


def test_the_pinned_version_missing_names_the_version_and_the_index(capsys, store: Path) -> None:
    with serve() as repo:
        add_deb(repo)
        rc, _, err = run(capsys, store, "ubuntu2204", repo, "--version", "1.18.3")
    assert rc == 1
    (line,) = err.strip().splitlines()
    assert "libnvidia-container1 1.18.3 (amd64) is not in " f"{repo.url}/deb/amd64/Packages" in line
    assert "1.18.2-1" in line  # what it does list
    assert not published(store, "ubuntu2204", version="1.18.3").exists()


def test_an_avoid_listed_version_is_refused_without_a_request(capsys, store: Path) -> None:
    with serve() as repo:
        add_deb(repo)
        rc, _, err = run(capsys, store, "ubuntu2204", repo, "--version", "1.17.7")
    assert rc == 2
    assert "1.17.7 is a known-bad release" in err and "pin another release" in err
    assert repo.requests == []


def test_off_does_nothing(capsys, store: Path) -> None:
    with serve() as repo:
        rc, out, _ = run(capsys, store, "ubuntu2204", repo, "--version", "off")
    assert rc == 0 and "nothing to fetch" in out and repo.requests == [] and not store.exists()


def test_plain_http_only_to_loopback(capsys, store: Path) -> None:
    rc = commands.main(["packages-fetch", "--store", str(store), "--os", "rhel9", "--arch", "x86_64",
                        "--repository", "http://nvidia.github.io/libnvidia-container/stable"])
    assert rc == 2 and "expected an https:// URL" in capsys.readouterr().err


def test_the_environment_overrides_the_profiles_repository(capsys, store: Path, monkeypatch) -> None:
    with serve() as repo:
        add_deb(repo)
        monkeypatch.setenv(package_index.REPOSITORY_ENV, repo.url)
        rc = commands.main(["packages-fetch", "--store", str(store), "--os", "ubuntu2204", "--arch", "x86_64"])
    assert rc == 0, capsys.readouterr().err
    assert published(store, "ubuntu2204").is_dir()


# --- idempotence and repair -----------------------------------------------------------------------------------------

def test_a_second_run_downloads_nothing(capsys, store: Path) -> None:
    with serve() as repo:
        add_rpm(repo)
        assert run(capsys, store, "rhel9", repo)[0] == 0
        record = (published(store, "rhel9") / "packages.json").stat()
        repo.requests.clear()
        rc, out, _ = run(capsys, store, "rhel9", repo)
    assert rc == 0 and repo.requests == []  # not even the index
    assert "present in" in out
    assert (published(store, "rhel9") / "packages.json").stat().st_ino == record.st_ino


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove", "record"])
def test_a_corrupted_published_set_is_fetched_again(capsys, store: Path, damage: str) -> None:
    with serve() as repo:
        add_deb(repo)
        assert run(capsys, store, "ubuntu2204", repo)[0] == 0
        directory = published(store, "ubuntu2204")
        victim = directory / "libnvidia-container-tools_1.18.2-1_amd64.deb"
        if damage == "flip":
            data = bytearray(victim.read_bytes())
            data[10] ^= 0xFF
            victim.write_bytes(bytes(data))
        elif damage == "truncate":
            victim.write_bytes(victim.read_bytes()[:-1])
        elif damage == "remove":
            victim.unlink()
        else:
            (directory / "packages.json").write_text("{not json")
        repo.requests.clear()
        rc, out, err = run(capsys, store, "ubuntu2204", repo)
    assert rc == 0, err
    assert "fetching again" in out
    assert len(repo.downloads()) == 2
    pset = package_set.read(str(store), "nvidia-container-cli", PIN, "ubuntu2204", "x86_64")
    assert pset is not None
    package_set.verified_paths(str(directory), pset)
    assert tmp_leftovers(store) == []


def test_debris_of_a_killed_fetch_is_removed_under_the_lock(capsys, store: Path) -> None:
    with serve() as repo:
        add_deb(repo)
        tmp = Path(staging_dir(str(store))) / "tmp"
        tmp.mkdir(parents=True)
        (tmp / "pkgset.nvidia-container-cli.1.18.2.ubuntu2204-x86_64.tmp-999999").mkdir()
        (tmp / "node.host.json.tmp-1").write_text("{}")  # a compute node's: never ours to remove
        rc, out, _ = run(capsys, store, "ubuntu2204", repo)
    assert rc == 0 and "interrupted package fetch" in out
    assert tmp_leftovers(store) == ["node.host.json.tmp-1"]


# --- the network fails ----------------------------------------------------------------------------------------------

def test_an_unreachable_repository_is_one_line_with_the_hint_and_no_traceback(store: Path) -> None:
    with serve() as repo:
        url = repo.url  # the server is gone after this block: connection refused
    proc = subprocess.run([sys.executable, "-m", "clusterkit_node", "packages-fetch", "--store", str(store),
                           "--os", "alinux2023", "--arch", "x86_64", "--repository", url, "--attempts", "2",
                           "--backoff", "0"], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"cannot fetch {url}/rpm/x86_64/repodata/repomd.xml" in line and "2 attempts" in line
    assert "HTTPS to nvidia.github.io" in line and "install: false" in line
    assert "retrying" in proc.stdout  # the bounded retry said so
    assert not published(store, "alinux2023").exists()


def test_a_missing_index_is_not_retried(capsys, store: Path) -> None:
    with serve() as repo:
        rc, _, err = run(capsys, store, "ubuntu2204", repo)
    assert rc == 1 and "HTTP 404" in err and repo.requests == [f"{ROOT}/deb/amd64/Packages"]


def test_two_head_nodes_fetching_at_once_download_each_file_once(store: Path) -> None:
    with serve() as repo:
        add_deb(repo)
        repo.delay = 0.3  # long enough that the second waits for the first one's lock
        argv = [sys.executable, "-m", "clusterkit_node", "packages-fetch", "--store", str(store), "--os",
                "ubuntu2204", "--arch", "x86_64", "--repository", repo.url]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        procs = [subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len(repo.downloads()) == 2
    said = "".join(out for out, _ in outs)
    assert "published by a concurrent fetch" in said or "present in" in said
    pset = package_set.read(str(store), "nvidia-container-cli", PIN, "ubuntu2204", "x86_64")
    assert pset is not None and json.loads(pset.to_json())["files"]


# --- what `status` says of the sets ---------------------------------------------------------------------------------

def test_status_names_each_published_set_and_a_damaged_one(capsys, store: Path) -> None:
    with serve() as repo:
        add_deb(repo)
        add_rpm(repo)
        assert run(capsys, store, "ubuntu2204", repo)[0] == 0
        assert run(capsys, store, "rhel9", repo)[0] == 0
    assert commands.main(["status", "--store", str(store)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("packages ")]
    assert len(lines) == 2
    assert lines[0].startswith(f"packages nvidia-container-cli {PIN} rhel9-x86_64: present (rpm, 2 files, checked "
                               f"against {repo.url}/rpm/x86_64/repodata/") and lines[0].endswith("-primary.xml.gz)")
    assert lines[1] == (f"packages nvidia-container-cli {PIN} ubuntu2204-x86_64: present (deb, 2 files, checked "
                        f"against {repo.url}/deb/amd64/Packages)")
    victim = published(store, "rhel9") / package_set.read(str(store), "nvidia-container-cli", PIN, "rhel9",
                                                           "x86_64").files[0].file
    victim.write_bytes(victim.read_bytes()[:-1])
    assert commands.main(["status", "--store", str(store)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("packages ")]
    assert lines[0] == (f"packages {published(store, 'rhel9')}: corrupt (size differs: {victim.name}): the head "
                        "node's next sync re-fetches it")
