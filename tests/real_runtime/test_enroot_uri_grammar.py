"""bootstrap_scripts/enroot_uri.py against the REAL enroot of both generations: the URI the node passes
to `enroot import` makes enroot request the locked manifest by digest, for a registry host and for Docker
Hub, and the lock's canonical @digest form is what 3.x cannot use (the defect this module fixes).

Docker Hub without the internet: enroot talks plain http (ENROOT_ALLOW_HTTP) through an http_proxy on
127.0.0.1, which is the loopback registry itself; a proxied request carries the full URL, so the registry
log shows exactly which host and path enroot asked for.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "image_sync"))

import real_enroot  # noqa: E402

_spec = importlib.util.spec_from_file_location("enroot_uri", REPO / "bootstrap_scripts" / "enroot_uri.py")
enroot_uri = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(enroot_uri)


@pytest.fixture
def hub(tmp_path):
    reg = real_enroot.Registry()
    try:
        yield reg
    finally:
        reg.close()


def run_import(env: dict, out: Path, uri: str, proxy: str | None = None) -> subprocess.CompletedProcess:
    env = dict(env, PATH=env["PATH"].split(":", 1)[1])  # the real enroot, not the logging wrapper
    if proxy:
        env.update(http_proxy=f"http://{proxy}", no_proxy="")
    return subprocess.run(["enroot", "import", "-o", str(out), uri], env=env, capture_output=True, text=True,
                          timeout=120)


def manifest_requests(reg: real_enroot.Registry) -> list[str]:
    return [path for method, path, _ in reg.fake.log if method == "GET" and "/manifests/" in path]


@pytest.mark.parametrize("gen", ["gen3", "gen4"])
def test_registry_host_form(gen, tmp_path, hub):
    env = real_enroot.enroot_env(tmp_path, gen)
    digest, _ = real_enroot.serve_image(hub, "team/app", "app/0", {})
    version = subprocess.run(["enroot", "version"], env=env, capture_output=True, text=True).stdout.strip()
    locked = f"docker://{hub.host}#team/app@{digest}"
    uri = enroot_uri.import_uri(locked, version)
    proc = run_import(env, tmp_path / "app.sqsh", uri)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"/v2/team/app/manifests/{digest}" in manifest_requests(hub)
    if version.startswith("3."):
        hub.fake.log.clear()
        old = run_import(env, tmp_path / "old.sqsh", locked)
        assert old.returncode != 0 and "Invalid image reference" in old.stdout + old.stderr
        assert manifest_requests(hub) == []


@pytest.mark.parametrize("gen", ["gen3", "gen4"])
def test_docker_hub_form(gen, tmp_path, hub):
    env = real_enroot.enroot_env(tmp_path, gen)
    digest, _ = real_enroot.serve_image(hub, "library/busybox", "hub/0", {})
    version = subprocess.run(["enroot", "version"], env=env, capture_output=True, text=True).stdout.strip()
    locked = f"docker://library/busybox@{digest}"  # what `clusterkit lock` writes for Docker Hub
    uri = enroot_uri.import_uri(locked, version)
    proc = run_import(env, tmp_path / "hub.sqsh", uri, proxy=hub.host)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"http://registry-1.docker.io/v2/library/busybox/manifests/{digest}" in manifest_requests(hub)
    if version.startswith("3."):
        # 3.x reads the lock's form as user "library/busybox", image "sha256", tag "<hex>": it asks for
        # something else entirely (or nothing), never the locked manifest
        hub.fake.log.clear()
        old = run_import(env, tmp_path / "old.sqsh", locked, proxy=hub.host)
        assert old.returncode != 0
        assert not any(p.endswith(f"/manifests/{digest}") for p in manifest_requests(hub))


def test_makefile_installs_what_the_tier_needs():
    """`make test` on a fresh machine installs the Debian packages this tier builds and runs with."""
    import re
    import runtime_build

    text = (REPO / "Makefile").read_text()
    m = re.search(r"^DEB_PACKAGES := ((?:.*\\\n)*.*)$", text, re.M)
    assert m, "DEB_PACKAGES not found in the Makefile"
    listed = set(m.group(1).replace("\\\n", " ").split())
    assert set(runtime_build.DEB_PACKAGES) <= listed, set(runtime_build.DEB_PACKAGES) - listed
