"""clusterkit_node/contract/enroot_uri.py against the REAL enroot of both generations: the URI the node passes
to `enroot import` makes enroot request the locked manifest by digest, for a registry host and for Docker
Hub, and the lock's canonical @digest form is what 3.x cannot use (the defect this module fixes).

Docker Hub without the internet: enroot talks plain http (ENROOT_ALLOW_HTTP) through an http_proxy on
127.0.0.1, which is the loopback registry itself; a proxied request carries the full URL, so the registry
log shows exactly which host and path enroot asked for.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "image_sync"))

import real_enroot  # noqa: E402

from clusterkit_node.contract import enroot_uri  # noqa: E402


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


# The importer's reading of a job's --container-image (enroot_uri.parse_request) against the parser of
# the enroot it runs with (enroot 4.1.2 src/docker.sh docker::_parse_uri, sourced and called directly):
# the importer must name exactly the registry, repository and tag/digest enroot would fetch.
HEX = "0123456789abcdef" * 4
PARSE_CASES = [
    "docker://ubuntu", "docker://ubuntu:24.04", f"docker://ubuntu@sha256:{HEX}", f"docker://ubuntu:24.04@sha256:{HEX}",
    "docker://nvidia/cuda:12.8.1-base", "docker://library/ubuntu:24.04", "docker://a/b/c:1",
    "docker://nvcr.io/nvidia/pytorch:25.01-py3", "docker://nvcr.io#nvidia/pytorch:25.01-py3",
    f"docker://nvcr.io/nvidia/pytorch@sha256:{HEX}", f"docker://nvcr.io#nvidia/pytorch@sha256:{HEX}",
    f"docker://nvcr.io/nvidia/pytorch:25.01-py3@sha256:{HEX}", f"docker://nvcr.io#nvidia/pytorch:x@sha256:{HEX}",
    "docker://localhost:5000/team/app:v1", "docker://localhost:5000#team/app", "docker://127.0.0.1:5000/x:y",
    "docker://registry-1.docker.io/library/ubuntu:24.04", "docker://docker.io/library/ubuntu:24.04",
    "docker://$oauthtoken@nvcr.io#nvidia/pytorch:25.01-py3", "docker://user@host.example/team/app:1",
    "docker://u:p@ubuntu:24.04", "docker://a@b@nvcr.io#x/y:z", "docker://u/v@nvcr.io#x/y:z",
    "docker://123456789012.dkr.ecr.us-east-1.amazonaws.com#team/app:v1", f"docker://nvcr.io#nvidia/pytorch:sha256:{HEX}",
    # what enroot refuses (Invalid image reference) and the importer must not resolve either
    "docker://Nvcr.io#Nvidia/PyTorch:1", "docker://nvcr.io#nvidia/pytorch:bad tag", "docker://", "docker://a#b#c",
    "docker://nvcr.io/nvidia/pytorch:25.01@sha1:abc", "dockerd://ubuntu:24.04", "docker://x:y:z",
]


def real_parse(lib: Path, uris: list[str]) -> list[tuple[str, ...] | None]:
    """(registry, image, tag) as the real docker::_parse_uri prints them, None where it errors."""
    # enroot's own variables, pointed at nothing (no credentials file: the user is not inferred from one)
    script = ('cd "$1"; export ENROOT_LIBRARY_PATH="$1" ENROOT_CACHE_PATH=/nonexistent '
              'ENROOT_CONFIG_PATH=/nonexistent; source ./common.sh; source ./docker.sh; shift; '
              'for u in "$@"; do ( docker::_parse_uri "$u" | tr "\\n" "\\t"; exit "${PIPESTATUS[0]}" ) 2>/dev/null'
              ' && echo || echo ERR; done')
    out = subprocess.run(["bash", "-c", script, "parse", str(lib), *uris], capture_output=True, text=True,
                         check=True, timeout=60).stdout.splitlines()
    assert len(out) == len(uris), out
    return [None if line == "ERR" else tuple(line.split("\t")[1:4]) for line in out]


def test_importer_reads_a_uri_exactly_as_the_real_enroot_4_parses_it() -> None:
    import tier
    lib = tier.stage_for("gen4") / "usr" / "lib" / "enroot"
    real = real_parse(lib, PARSE_CASES)
    ours = [enroot_uri.parse_request(u) for u in PARSE_CASES]
    assert [tuple(r) if r else None for r in ours] == real
    assert sum(r is None for r in real) >= 5  # the refusal cases really are refusals
