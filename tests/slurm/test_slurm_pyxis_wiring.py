"""Real Slurm (Debian 22.05 slurmctld + slurmd + munge on 127.0.0.1) loading the plugstack that
ClusterKit's own generator (enroot.sh ck_install_plugstack, the function head_node.sh calls) writes.

The SPANK plugin loaded here is tests/slurm/stub_pyxis.c, a STAND-IN for pyxis: it registers pyxis's
--container-* options and records what it receives, but runs no container. These tests therefore
prove only the Slurm/plugstack wiring: the generated files are valid for Slurm, the configured pyxis
options (runtime_path, container_scope, sbatch_support, ...) reach the plugin in srun, sbatch and
slurmstepd, --container-image is accepted on the command line, with --wrap and as #SBATCH directive,
and the example jobs are accepted by a real controller. They prove nothing about enroot, images or
container execution.
"""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, _free_ports

REPO = Path(__file__).resolve().parents[2]
ENROOT_SH = REPO / "bootstrap_scripts/enroot.sh"
# Non-default values everywhere, so a value reaching the plugin can only come from the Args.
PYXIS_ARGS = ("PYXIS_CONTAINER_SCOPE=global", "PYXIS_SBATCH_SUPPORT=1", "PYXIS_EXECUTE_ENTRYPOINT=1",
              "PYXIS_USE_ENROOT_LOAD=1")
# No use_squashfuse=1: the head node writes it only where it measured that a .sqsh can start in place (squashfuse,
# /dev/fuse for users; clusterkit_node start_path.py), which this host, without the node zipapp at its shared path,
# does not show. tests/real_runtime proves both ways on real pyxis.
EXPECTED_ARGV = ("runtime_path=/run/pyxis container_scope=global sbatch_support=1 execute_entrypoint=1 "
                 "use_enroot_load=1 importer=/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz")


def generate_plugstack(etc: Path, so: Path, *args: str, log: Path) -> subprocess.CompletedProcess:
    """Run ClusterKit's generator exactly as head_node.sh does (parse Args, then install), with the node tools
    of this checkout as the bundle ships them (the zipapp enroot.sh calls)."""
    from clusterkit.artifacts.bundle import ZIPAPP, build_zipapp

    app = etc.parent / ZIPAPP
    app.write_bytes(build_zipapp())
    snippet = (f'set -euo pipefail; source "{ENROOT_SH}"; '
               f'ck_parse_args compute CK_CLUSTER=cktest CK_OS=rhel9 "$@"; '
               f'ck_install_plugstack "{etc}" "{so}"; echo "changed=$CK_PLUGSTACK_CHANGED"')
    return subprocess.run(["/bin/bash", "-c", snippet, "gen", *args], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "CK_ROOT": "", "CK_LOG_FILE": str(log),
                               "CK_ZIPAPP": str(app)})


def records(record: Path, since: int = 0) -> list[dict[str, str]]:
    """Parse the stub's record file: one dict per line (pid, context, kind, rest)."""
    out = []
    for line in record.read_text().splitlines()[since:]:
        m = re.match(r"pid=(\d+) context=(\w+) (\w+) ?(.*)$", line)
        assert m, line
        out.append({"pid": m[1], "context": m[2], "kind": m[3], "rest": m[4]})
    return out


def line_count(record: Path) -> int:
    return len(record.read_text().splitlines()) if record.exists() else 0


def wait_for(cond, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def job_state(cluster: SlurmCluster, job_id: str) -> str:
    out = cluster.run("scontrol", "show", "job", job_id, check=False).stdout
    m = re.search(r"JobState=(\w+)", out)
    return m[1] if m else ""


@pytest.fixture(scope="module")
def wired(slurm_cluster: SlurmCluster, stub_plugin: tuple[Path, Path]) -> tuple[SlurmCluster, Path]:
    so, record = stub_plugin
    gen = generate_plugstack(slurm_cluster.etc, so, *PYXIS_ARGS, log=slurm_cluster.root / "log/ck.log")
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.strip().splitlines()[-1] == "changed=yes"
    slurm_cluster.reconfigure()
    return slurm_cluster, record


def test_generated_files_are_what_slurm_reads(wired) -> None:
    cluster, _ = wired
    assert (cluster.etc / "plugstack.conf").read_text().splitlines()[-1] == \
        f"include {cluster.etc}/plugstack.conf.d/*"
    assert sorted(p.name for p in (cluster.etc / "plugstack.conf.d").iterdir()) == ["pyxis.conf"]
    # slurmctld agrees on where the plugstack is.
    assert f"PlugStackConfig         = {cluster.etc}/plugstack.conf" in cluster.run("scontrol", "show", "config").stdout


def test_srun_accepts_container_options_and_plugin_gets_them(wired) -> None:
    cluster, record = wired
    start = line_count(record)
    r = cluster.run("srun", "--container-image=/fsx/containers/x.sqsh", "--container-mounts=/fsx:/fsx",
                    "--container-workdir=/tmp", "--container-name=ck", "true")
    assert r.returncode == 0
    recs = records(record, start)
    inits = {(r["context"], r["rest"]) for r in recs if r["kind"] == "init"}
    # srun (local) and slurmstepd (remote) both loaded the plugin with the generated arguments.
    assert ("local", f"argc={len(EXPECTED_ARGV.split())} argv={EXPECTED_ARGV}") in inits
    assert ("remote", f"argc={len(EXPECTED_ARGV.split())} argv={EXPECTED_ARGV}") in inits
    opts = {(r["context"], r["rest"]) for r in recs if r["kind"] == "option"}
    for ctx, remote in (("local", 0), ("remote", 1)):
        assert (ctx, f"container-image=/fsx/containers/x.sqsh remote={remote}") in opts
        assert (ctx, f"container-mounts=/fsx:/fsx remote={remote}") in opts
        assert (ctx, f"container-workdir=/tmp remote={remote}") in opts
        assert (ctx, f"container-name=ck remote={remote}") in opts


def test_sbatch_wrap_with_container_image(wired, tmp_path: Path) -> None:
    cluster, record = wired
    start = line_count(record)
    r = cluster.run("sbatch", "--parsable", "-o", str(tmp_path / "wrap.out"),
                    "--container-image=/fsx/containers/y.sqsh", "--wrap", "true", cwd=tmp_path)
    job = r.stdout.strip().split(";")[0]
    assert job.isdigit()
    wait_for(lambda: job_state(cluster, job) == "COMPLETED", what=f"job {job} to complete")
    recs = records(record, start)
    assert {"context": "allocator", "kind": "option", "rest": "container-image=/fsx/containers/y.sqsh remote=0"} in \
        [{k: v for k, v in r.items() if k != "pid"} for r in recs]
    init = f"argc={len(EXPECTED_ARGV.split())} argv={EXPECTED_ARGV}"
    assert any(r["context"] == "allocator" and r["rest"] == init for r in recs)
    # The batch step on the node (slurmstepd) got the option forwarded.
    assert any(r["context"] == "remote" and r["rest"] == "container-image=/fsx/containers/y.sqsh remote=1"
               for r in recs)


def test_sbatch_directive_container_image(wired, tmp_path: Path) -> None:
    cluster, record = wired
    start = line_count(record)
    script = tmp_path / "directive.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --container-image=/fsx/containers/z.sqsh\n"
                      "#SBATCH --container-mounts=/fsx:/fsx\n#SBATCH -o directive.out\ntrue\n")
    job = cluster.run("sbatch", "--parsable", str(script), cwd=tmp_path).stdout.strip().split(";")[0]
    wait_for(lambda: job_state(cluster, job) == "COMPLETED", what=f"job {job} to complete")
    opts = {(r["context"], r["rest"]) for r in records(record, start) if r["kind"] == "option"}
    assert ("allocator", "container-image=/fsx/containers/z.sqsh remote=0") in opts
    assert ("allocator", "container-mounts=/fsx:/fsx remote=0") in opts


def test_srun_help_lists_container_image(wired, stub_plugin, tmp_path: Path) -> None:
    """What compute_node_configured.sh checks on a node, here against real srun."""
    from clusterkit.artifacts.bundle import ZIPAPP, build_zipapp

    cluster, _ = wired
    assert "--container-image" in cluster.run("srun", "--help").stdout
    # ...and the file-level check it also runs (ck_plugstack_loads: the node tools' plugstack-loads, from the
    # zipapp as the bundle ships it) agrees with what Slurm loaded.
    so, _ = stub_plugin
    app = tmp_path / ZIPAPP
    app.write_bytes(build_zipapp())
    r = subprocess.run(["/bin/bash", "-c", f'source "{ENROOT_SH}"; ck_plugstack_loads "$1" "$2"', "x",
                        str(cluster.etc), str(so)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "CK_LOG_FILE": "/dev/null", "CK_ZIPAPP": str(app)})
    assert r.returncode == 0, r.stderr


def _client_conf(cluster: SlurmCluster, name: str, plugstack: Path, ctld_port: int | None = None) -> dict[str, str]:
    conf_dir = cluster.root / name
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "slurm.conf").write_text(cluster.slurm_conf_text(plugstack=plugstack, ctld_port=ctld_port))
    env = dict(cluster.env)
    env["SLURM_CONF"] = str(conf_dir / "slurm.conf")
    return env


def test_sbatch_support_0_reaches_plugin(wired, stub_plugin) -> None:
    """PYXIS_SBATCH_SUPPORT=0 through the generator: sbatch no longer knows --container-image, srun does.
    Client-side only (a second slurm.conf pointing at a second generated plugstack)."""
    cluster, _ = wired
    so, _ = stub_plugin
    etc2 = cluster.root / "etc-nosbatch"
    gen = generate_plugstack(etc2, so, "PYXIS_SBATCH_SUPPORT=0", log=cluster.root / "log/ck.log")
    assert gen.returncode == 0, gen.stderr
    env = _client_conf(cluster, "client-nosbatch", etc2 / "plugstack.conf")
    r = cluster.run("sbatch", "--container-image=/fsx/containers/y.sqsh", "--wrap", "true", env=env, check=False)
    assert r.returncode != 0 and "unrecognized option" in r.stderr and "container-image" in r.stderr
    assert "--container-image" in cluster.run("srun", "--help", env=env).stdout


def test_required_line_for_absent_plugin(wired, tmp_path: Path) -> None:
    """The generator refuses; and the evidence why: slurmd and sbatch refuse to start with such a line."""
    cluster, _ = wired
    missing = tmp_path / "spank_pyxis.so"
    gen = generate_plugstack(tmp_path / "etc", missing, log=tmp_path / "ck.log")
    assert gen.returncode == 1
    assert f"refusing to install a 'required' plugstack line: plugin {missing} not found" in gen.stderr
    assert not (tmp_path / "etc").exists()

    bad = tmp_path / "bad-plugstack.conf"
    bad.write_text(f"required {missing} runtime_path=/run/pyxis\n")
    (port,) = _free_ports(1)   # no controller there: a slurmd that did start could not register anywhere
    env = _client_conf(cluster, "client-bad", bad, ctld_port=port)
    t0 = time.monotonic()
    slurmd = subprocess.run(["/usr/sbin/slurmd", "-D", "-f", env["SLURM_CONF"], "-N", "ckgpu2"],
                            capture_output=True, text=True, timeout=20, env=env)
    assert slurmd.returncode != 0 and time.monotonic() - t0 < 15
    assert "Failed to load plugin" in slurmd.stderr and "slurmd initialization failed" in slurmd.stderr
    r = cluster.run("sbatch", "--wrap", "true", env=env, check=False)
    assert r.returncode != 0 and "Failed to initialize plugin stack" in r.stderr


def test_hello_container_job_runs(wired, tmp_path: Path) -> None:
    """jobs/hello-container.sbatch submitted for real; with the stub nothing is containerized, so the
    command runs on the host: this shows the job is accepted, runs, and its srun step hands
    --container-image (from CK_IMAGE) to the plugin in slurmstepd."""
    cluster, record = wired
    start = line_count(record)
    image = tmp_path / "hello.sqsh"
    image.write_bytes(b"hsqs placeholder")
    env = dict(cluster.env, CK_IMAGE=str(image))
    job = cluster.run("sbatch", "--parsable", "-p", "debug", str(REPO / "jobs/hello-container.sbatch"),
                      env=env, cwd=tmp_path).stdout.strip().split(";")[0]
    wait_for(lambda: job_state(cluster, job) in ("COMPLETED", "FAILED"), what=f"job {job} to finish")
    out = (tmp_path / f"hello-container_{job}.out").read_text()
    assert job_state(cluster, job) == "COMPLETED", out
    assert f"hello from job {job}" in out and "PRETTY_NAME" in out
    opts = {(r["context"], r["rest"]) for r in records(record, start) if r["kind"] == "option"}
    assert ("remote", f"container-image={image} remote=1") in opts
    assert ("remote", "container-mounts=/fsx:/fsx remote=1") in opts


def test_nccl_tests_job_is_accepted_and_cancelled(wired) -> None:
    """jobs/nccl-tests.sbatch (2 nodes x 8 GPUs, exclusive) against the declared-but-down GPU
    partition: the controller accepts and queues it (directives valid for this cluster), then we cancel."""
    cluster, _ = wired
    r = cluster.run("sbatch", "--parsable", "-p", "gpu", str(REPO / "jobs/nccl-tests.sbatch"), cwd=cluster.root)
    job = r.stdout.strip().split(";")[0]
    assert job.isdigit(), r.stdout + r.stderr
    assert job_state(cluster, job) == "PENDING"
    shown = cluster.run("scontrol", "show", "job", job).stdout
    assert "NumNodes=2" in shown and "gres/gpu:8" in shown.replace("gres:gpu:8", "gres/gpu:8")
    cluster.run("scancel", job)
    wait_for(lambda: job_state(cluster, job) in ("CANCELLED", ""), what=f"job {job} cancelled")


def test_fixture_owns_its_daemons(slurm_cluster: SlurmCluster) -> None:
    """All three daemons are children of this test session (stopped by the fixture at the end)."""
    assert set(slurm_cluster.procs) == {"munged", "slurmctld", "slurmd"}
    assert all(p.poll() is None for p in slurm_cluster.procs.values())
