"""The REAL nvidia-container-cli built from ../shared/vendor (nvidia_build.py) and its deb/rpm stand-ins in a
repository laid out like NVIDIA's (nvidia_packages.py): the binary runs, fails at driver load where there is no
NVIDIA driver, and installs with dpkg and rpm into scratch roots at the paths NVIDIA's packages use. Skips or fails
by tier.py's rules (CI: fails when it cannot build)."""
from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import nvidia_build
import nvidia_packages
import pytest
from tier import nvidia_repo

CLI = nvidia_build.CLI
VERSION = nvidia_packages.FULL_VERSION  # 1.17.0-1


@pytest.fixture(scope="module")
def repo() -> Path:
    return nvidia_repo()


@pytest.fixture(scope="module")
def stage(repo) -> Path:
    return nvidia_build.build()  # cached: the repo fixture built it


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}


def test_the_cli_reports_the_built_version(stage):
    out = _run([str(stage / "deb" / CLI), "--version"], env=_clean_env())
    assert out.returncode == 0, out.stderr
    assert "cli-version: 1.17.0" in out.stdout and "lib-version: 1.17.0" in out.stdout, out.stdout
    assert f"build revision: {nvidia_build.LIBNVC.commit}" in out.stdout


def test_info_fails_at_driver_load_without_a_driver(stage):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("an NVIDIA driver is present here: `info` would list the GPU (benchmarks/gpu_path.py checks that)")
    out = _run([str(stage / "deb" / CLI), "info"], env=_clean_env())
    assert out.returncode == 1
    assert out.stderr.strip() == ("nvidia-container-cli: initialization error: load library failed: "
                                  "libnvidia-ml.so.1: cannot open shared object file: no such file or directory")


@pytest.mark.parametrize("fmt", ["deb", "rpm"])
def test_stage_is_laid_out_as_the_packages_install_it(stage, fmt):
    root, libdir = stage / fmt, nvidia_build.LIBDIRS[fmt]
    assert (root / CLI).is_file()
    for lib in ("libnvidia-container", "libnvidia-container-go"):
        soname = root / libdir / f"{lib}.so.1"
        assert soname.is_symlink() and os.readlink(soname) == f"{lib}.so.1.17.0"
        assert (root / libdir / f"{lib}.so.1.17.0").is_file()
    dyn = _run(["readelf", "-d", str(root / CLI)]).stdout
    assert "Library runpath: [$ORIGIN/../$LIB]" in dyn and "libnvidia-container.so.1" in dyn


def _stanzas(text: str) -> dict[str, dict[str, str]]:
    out = {}
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(" "))
        out[fields["Package"]] = fields
    return out


def test_packages_index_lists_each_deb_with_its_sha256_and_size(repo):
    deb_dir = repo / nvidia_packages.DEB_DIR
    text = (deb_dir / "Packages").read_text()
    assert gzip.decompress((deb_dir / "Packages.gz").read_bytes()).decode() == text
    stanzas = _stanzas(text)
    assert set(stanzas) == {"libnvidia-container1", "libnvidia-container-tools"}
    for pkg, fields in stanzas.items():
        deb = deb_dir / nvidia_packages.DEB_FILES[pkg]
        assert fields["Filename"] == f"./{pkg}_{VERSION}_amd64.deb"
        assert (fields["Version"], fields["Architecture"]) == (VERSION, "amd64")
        assert fields["SHA256"] == _sha256(deb) and int(fields["Size"]) == deb.stat().st_size
    assert stanzas["libnvidia-container-tools"]["Depends"] == f"libnvidia-container1 (>= {VERSION})"
    assert "Depends" not in stanzas["libnvidia-container1"]


def test_repodata_lists_each_rpm_with_its_sha256_and_size(repo):
    rpm_dir = repo / nvidia_packages.RPM_DIR
    ns = {"repo": "http://linux.duke.edu/metadata/repo", "c": "http://linux.duke.edu/metadata/common",
          "rpm": "http://linux.duke.edu/metadata/rpm"}
    repomd = ET.parse(rpm_dir / "repodata/repomd.xml")
    href = repomd.find("repo:data[@type='primary']/repo:location", ns).get("href")
    primary = ET.fromstring(gzip.decompress((rpm_dir / href).read_bytes()))
    found = {}
    for package in primary.findall("c:package", ns):
        name = package.find("c:name", ns).text
        rpm = rpm_dir / package.find("c:location", ns).get("href")
        checksum = package.find("c:checksum", ns)
        assert checksum.get("type") == "sha256" and checksum.text == _sha256(rpm)
        assert int(package.find("c:size", ns).get("package")) == rpm.stat().st_size
        ver = package.find("c:version", ns)
        assert (ver.get("ver"), ver.get("rel"), package.find("c:arch", ns).text) == ("1.17.0", "1", "x86_64")
        found[name] = [(e.get("name"), e.get("flags"), e.get("ver"), e.get("rel"))
                       for e in package.findall("c:format/rpm:requires/rpm:entry", ns)]
        assert rpm.name == nvidia_packages.RPM_FILES[name]
    assert found == {"libnvidia-container1": [],
                     "libnvidia-container-tools": [("libnvidia-container1(x86-64)", "GE", "1.17.0", "1")]}


def _dpkg_root(tmp_path: Path) -> Path:
    root = tmp_path / "debroot"
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates"):
        (root / d).mkdir(parents=True)
    (root / "var/lib/dpkg/status").touch()
    return root


def test_dpkg_installs_the_debs_and_the_cli_finds_its_library(repo, tmp_path):
    deb_dir, root = repo / nvidia_packages.DEB_DIR, _dpkg_root(tmp_path)
    tools = str(deb_dir / nvidia_packages.DEB_FILES["libnvidia-container-tools"])
    alone = _run(["dpkg", f"--root={root}", "-i", tools])
    assert alone.returncode != 0 and "depends on libnvidia-container1 (>= 1.17.0-1)" in alone.stderr, alone.stderr
    both = _run(["dpkg", f"--root={root}", "-i", *sorted(map(str, deb_dir.glob("*.deb")))])
    assert both.returncode == 0, both.stderr
    listed = _run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f", "${Package} ${Version} ${Status}\n"])
    assert set(listed.stdout.splitlines()) == {f"libnvidia-container1 {VERSION} install ok installed",
                                               f"libnvidia-container-tools {VERSION} install ok installed"}
    libdir = nvidia_build.LIBDIRS["deb"]
    assert (root / libdir / "libnvidia-container.so.1").exists()
    assert (root / libdir / "libnvidia-container-go.so.1").exists()
    # No loader path: the CLI's RUNPATH $ORIGIN/../$LIB is <root>/usr/lib/x86_64-linux-gnu under Debian's glibc,
    # exactly where the deb put the library; this is how it finds it on an Ubuntu node too.
    out = _run([str(root / CLI), "--version"], env=_clean_env())
    assert out.returncode == 0 and "cli-version: 1.17.0" in out.stdout, out.stderr


def test_rpm_installs_the_rpms_at_the_rpm_paths(repo, tmp_path):
    rpm_dir, root = repo / nvidia_packages.RPM_DIR, tmp_path / "rpmroot"
    root.mkdir()
    out = _run(["rpm", f"--root={root}", "-U", "--nosignature", *sorted(map(str, rpm_dir.glob("*.rpm")))])
    assert out.returncode == 0, out.stderr
    assert sorted(_run(["rpm", f"--root={root}", "-qa"]).stdout.split()) == [
        f"libnvidia-container-tools-{VERSION}.x86_64", f"libnvidia-container1-{VERSION}.x86_64"]
    libdir = root / nvidia_build.LIBDIRS["rpm"]
    assert (libdir / "libnvidia-container.so.1").exists() and (libdir / "libnvidia-container-go.so.1").exists()
    assert (root / CLI).is_file()
    # Honest limit: Debian's glibc expands the RUNPATH's $LIB to lib/x86_64-linux-gnu, not lib64 (it does on
    # Amazon Linux/RHEL), so here the loader must be pointed at the rpm's lib dir.
    bare = _run([str(root / CLI), "--version"], env=_clean_env())
    assert bare.returncode != 0 and "libnvidia-container.so.1: cannot open shared object file" in bare.stderr
    out = _run([str(root / CLI), "--version"], env={**_clean_env(), "LD_LIBRARY_PATH": str(libdir)})
    assert out.returncode == 0 and "cli-version: 1.17.0" in out.stdout, out.stderr


def test_repo_is_rebuilt_only_when_its_inputs_change(stage, tmp_path):
    dest = nvidia_packages.build_repo(tmp_path / "repo")
    index = dest / nvidia_packages.DEB_DIR / "Packages"
    first = index.stat().st_mtime_ns
    assert nvidia_packages.build_repo(dest) == dest and index.stat().st_mtime_ns == first
    (dest / ".stamp").write_text("an older stage\n")
    nvidia_packages.build_repo(dest)
    assert index.stat().st_mtime_ns != first and (dest / ".stamp").read_text() == nvidia_packages.stamp_text()
