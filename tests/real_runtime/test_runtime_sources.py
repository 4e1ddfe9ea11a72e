"""Where the real enroot/pyxis sources come from (runtime_build.fetch_source): the vendored tarball only
with its pinned sha256; without ../shared/vendor, the upstream tag only at its pinned commit; offline,
a SourcesUnavailable that the tier turns into a one-line skip (or a failure in CI)."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tarfile

import pytest
import runtime_build


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def _upstream(root):
    """A local git repository with a v0.20.0 tag; returns (url, head commit)."""
    upstream = root / "pyxis.git"
    upstream.mkdir()
    _git("init", "-q", cwd=upstream)
    (upstream / "README.md").write_text("a pyxis look-alike\n")
    _git("add", ".", cwd=upstream)
    _git("commit", "-qm", "x", cwd=upstream)
    _git("tag", "v0.20.0", cwd=upstream)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=upstream, capture_output=True, text=True).stdout.strip()
    return f"file://{upstream}", head


@pytest.fixture
def no_vendor(tmp_path, monkeypatch):
    monkeypatch.setenv("CK_VENDOR_DIR", str(tmp_path / "no-vendor"))
    return tmp_path


def test_vendored_tarball_must_have_the_pinned_sha256(tmp_path, monkeypatch):
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    src = tmp_path / "pyxis-0.20.0"
    src.mkdir()
    (src / "README.md").write_text("not pyxis\n")
    with tarfile.open(vendor / "pyxis-0.20.0.tar.gz", "w:gz") as tf:
        tf.add(src, arcname="pyxis-0.20.0")
    monkeypatch.setenv("CK_VENDOR_DIR", str(vendor))
    with pytest.raises(runtime_build.BuildFailed, match="is not the pinned 5feae97f"):
        runtime_build.fetch_source("pyxis-0.20.0", tmp_path / "out")


def test_upstream_tag_at_another_commit_is_refused(no_vendor, monkeypatch):
    url, _ = _upstream(no_vendor)
    pinned = runtime_build.SOURCES["pyxis-0.20.0"]
    monkeypatch.setitem(runtime_build.SOURCES, "pyxis-0.20.0", dataclasses.replace(pinned, upstream=url))
    with pytest.raises(runtime_build.BuildFailed, match=f"not the pinned {pinned.commit}"):
        runtime_build.fetch_source("pyxis-0.20.0", no_vendor / "out")


def test_upstream_tag_at_the_pinned_commit_is_used(no_vendor, monkeypatch):
    url, head = _upstream(no_vendor)
    monkeypatch.setitem(runtime_build.SOURCES, "pyxis-0.20.0",
                        dataclasses.replace(runtime_build.SOURCES["pyxis-0.20.0"], upstream=url, commit=head))
    provenance = runtime_build.fetch_source("pyxis-0.20.0", no_vendor / "out")
    assert provenance == f"{url} v0.20.0 at commit {head}"
    assert (no_vendor / "out" / "pyxis-0.20.0" / "README.md").read_text() == "a pyxis look-alike\n"


def test_unreachable_upstream_is_sources_unavailable(no_vendor, monkeypatch):
    monkeypatch.setitem(runtime_build.SOURCES, "pyxis-0.20.0",
                        dataclasses.replace(runtime_build.SOURCES["pyxis-0.20.0"],
                                            upstream=f"file://{no_vendor}/nowhere.git"))
    with pytest.raises(runtime_build.SourcesUnavailable, match="pyxis-0.20.0.tar.gz not found and file://"):
        runtime_build.fetch_source("pyxis-0.20.0", no_vendor / "out")
    assert shutil.which("git")
