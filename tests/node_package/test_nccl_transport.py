"""``nccl-check`` (clusterkit_node/fleet/nccl_transport.py): did NCCL use EFA through aws-ofi-nccl, or TCP sockets?

Real: the zipapp clusterkit.artifacts.bundle builds, run by CPython (this interpreter; one case under the real 3.9),
on NCCL_DEBUG=INFO excerpts recorded from public issues (tests/node_package/nccl_logs/*.log, each with a
.source naming where it comes from); the ``constructed-*`` logs are written for these tests and say so.
jobs/nccl-tests.sbatch itself runs with bash, a stand-in ``srun`` that prints a recorded log, and the zipapp.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.artifacts.bundle import ZIPAPP, build_zipapp

HERE = Path(__file__).resolve().parent
LOGS = HERE / "nccl_logs"
REPO = HERE.parents[1]
SBATCH = REPO / "jobs" / "nccl-tests.sbatch"


@pytest.fixture(scope="module")
def zipapp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    app = tmp_path_factory.mktemp("bundle") / ZIPAPP
    app.write_bytes(build_zipapp())
    return app


def nccl_check(zipapp: Path, *args: str, stdin: str | None = None,
               python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(zipapp), "nccl-check", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def one_line(stream: str) -> str:
    """The single line a command wrote, without the "<UTC time> nccl-check: " prefix."""
    lines = stream.splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in stream
    return lines[0].split(" nccl-check: ", 1)[1]


# name -> (exit code, transport, hosts, provider, plugin version, words of the one-line message)
CASES = {
    "ofi-efa-libfabric-nccl-1597": (0, "ofi", {"8h200-2": "ofi", "8h200-3": "ofi"}, "efa", None,
                                    ["NCCL transport ofi on 2 host(s), provider efa"]),
    "ofi-aws-libfabric-1.4.0aws-nccl-527": (0, "ofi", {"ip-10-216-179-87": "ofi"}, "efa", "1.4.0aws",
                                            ["NCCL transport ofi", "aws-ofi-nccl 1.4.0aws"]),
    "ofi-ring-lines-nccl-229": (0, "ofi", {"ip-192-168-16-255": "ofi", "ip-192-168-29-243": "ofi"}, None, None,
                                ["NCCL transport ofi on 2 host(s)"]),
    "ofi-tcp-provider-nccl-229": (1, "ofi", {"ip-192-168-16-255": "ofi", "ip-192-168-29-243": "ofi"},
                                  "tcp;ofi_rxm", None,
                                  ["error: aws-ofi-nccl runs over libfabric provider tcp;ofi_rxm (TCP), not efa, on "
                                   "ip-192-168-16-255, ip-192-168-29-243", "FI_PROVIDER=efa"]),
    "socket-no-plugin-nccl-352": (1, "socket", {"ds-ml-01-0": "socket"}, None, None,
                                  ["error: NCCL fell back to TCP sockets (NET/Socket), not EFA, on ds-ml-01-0: ",
                                   "NET/Socket : Using [0]lo:127.0.0.1<0>",
                                   "[plugin not loaded: No plugin found (libnccl-net.so)]",
                                   "/opt/amazon/ofi-nccl or /opt/aws-ofi-nccl", "LD_LIBRARY_PATH", "NCCL_NET_PLUGIN",
                                   "EFA security group"]),
    "socket-channels-nccl-1232": (1, "socket", {"node0": "socket", "node2": "socket"}, None, None,
                                  ["on node0, node2: node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] "
                                   "[send] via NET/Socket/0"]),
    "socket-using-network-nccl-1267": (1, "socket", {"instance-8g-96c-3": "socket"}, None, None,
                                       ["on instance-8g-96c-3: ", "NCCL INFO Using network Socket",
                                        "[plugin not loaded: Failed to find ncclNetPlugin symbol (>= v5)."]),
    "constructed-mixed-ofi-socket": (1, "socket", {"ip-10-1-2-3": "ofi", "ip-10-1-2-4": "socket"}, "efa", "1.14.2",
                                     ["not EFA, on ip-10-1-2-4: ip-10-1-2-4:5202:5218 [0] NCCL INFO Using network "
                                      "Socket", "[plugin not loaded: Could not find: libnccl-net.so]"]),
    "constructed-plugin-name-mismatch": (1, "socket", {"ip-10-1-2-3": "socket", "ip-10-1-2-4": "socket"}, None,
                                         None,
                                         ["not EFA, on ip-10-1-2-3, ip-10-1-2-4: ",
                                          "[plugin not loaded: Could not find: ofi libnccl-net-ofi.so]",
                                          "NCCL_NET_PLUGIN=ofi makes NCCL look for ofi and libnccl-net-ofi.so only"]),
    "constructed-no-debug": (2, "unknown", {}, None, None,
                             ["error: no NCCL transport lines in the log", "was NCCL_DEBUG=INFO set"]),
}


def test_every_fixture_has_a_case_and_a_source() -> None:
    logs = sorted(p.stem for p in LOGS.glob("*.log"))
    assert logs == sorted(CASES)
    for name in logs:
        source = (LOGS / f"{name}.source").read_text()
        if name.startswith("constructed-"):
            assert source.startswith("CONSTRUCTED, not recorded"), name
        else:
            assert source.startswith("Recorded excerpt (verbatim lines") and "https://github.com/" in source, name
        assert 5 <= len((LOGS / f"{name}.log").read_text().splitlines()) <= 30, name


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_checker_on_each_log(zipapp: Path, name: str) -> None:
    code, transport, hosts, provider, version, words = CASES[name]
    text = nccl_check(zipapp, str(LOGS / f"{name}.log"))
    assert text.returncode == code, text.stderr
    line = one_line(text.stdout if code == 0 else text.stderr)
    assert (text.stdout if code else text.stderr) == ""
    for word in words:
        assert word in line, (word, line)

    as_json = nccl_check(zipapp, "--format", "json", str(LOGS / f"{name}.log"))
    assert as_json.returncode == code
    report = json.loads(as_json.stdout)
    assert (report["transport"], report["hosts"], report["provider"], report["plugin_version"]) == \
        (transport, hosts, provider, version)
    assert report["exit_code"] == code and report["expect"] == "ofi"
    assert report["message"] == line.removeprefix("error: ")
    if code == 1:
        assert report["evidence"] and all("NCCL INFO" in e for e in report["evidence"])


def test_ranks_and_problems_in_the_report(zipapp: Path) -> None:
    mixed = json.loads(nccl_check(zipapp, "--format", "json", str(LOGS / "constructed-mixed-ofi-socket.log")).stdout)
    assert mixed["ranks"] == [0, 8]
    assert mixed["problems"] == ["ip-10-1-2-4: plugin not loaded: Could not find: libnccl-net.so"]
    single = json.loads(nccl_check(zipapp, "--format", "json", str(LOGS / "socket-using-network-nccl-1267.log")).stdout)
    assert single["ranks"] == [0]
    ofi = json.loads(nccl_check(zipapp, "--format", "json", str(LOGS / "ofi-efa-libfabric-nccl-1597.log")).stdout)
    assert ofi["problems"] == []  # "PROFILER/Plugin: Could not find" is not the network plugin
    collnet = json.loads(nccl_check(zipapp, "--format", "json",
                                    str(LOGS / "ofi-aws-libfabric-1.4.0aws-nccl-527.log")).stdout)
    assert collnet["problems"] == []  # "Failed to find ncclCollNetPlugin" is harmless


@pytest.mark.parametrize("name,expect,code", [
    ("socket-no-plugin-nccl-352", "socket", 0),
    ("socket-using-network-nccl-1267", "socket", 0),
    ("ofi-efa-libfabric-nccl-1597", "socket", 1),
    ("constructed-mixed-ofi-socket", "socket", 1),
    ("socket-no-plugin-nccl-352", "any", 0),
    ("ofi-tcp-provider-nccl-229", "any", 0),
    ("constructed-no-debug", "any", 2),
    ("constructed-no-debug", "socket", 2),
])
def test_expect(zipapp: Path, name: str, expect: str, code: int) -> None:
    proc = nccl_check(zipapp, "--expect", expect, str(LOGS / f"{name}.log"))
    assert proc.returncode == code, proc.stderr
    line = one_line(proc.stdout if code == 0 else proc.stderr)
    if (name, expect) == ("constructed-mixed-ofi-socket", "socket"):
        assert line.startswith("error: expected TCP sockets, but NCCL used ofi on ip-10-1-2-3: ")


def test_reads_stdin_and_several_files(zipapp: Path) -> None:
    proc = nccl_check(zipapp, stdin=(LOGS / "socket-no-plugin-nccl-352.log").read_text())
    assert proc.returncode == 1 and "on ds-ml-01-0: " in one_line(proc.stderr)
    both = nccl_check(zipapp, str(LOGS / "ofi-efa-libfabric-nccl-1597.log"),
                      str(LOGS / "socket-channels-nccl-1232.log"))
    assert both.returncode == 1 and "on node0, node2: " in one_line(both.stderr)


def test_an_unreadable_file_is_one_line_exit_2(zipapp: Path, tmp_path: Path) -> None:
    proc = nccl_check(zipapp, str(tmp_path / "missing.log"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"nccl-check: cannot read {tmp_path / 'missing.log'}: "
                                                "No such file or directory"]
    usage = nccl_check(zipapp, "--expect", "ib", str(LOGS / "constructed-no-debug.log"))
    assert usage.returncode == 2 and "invalid choice" in usage.stderr and "Traceback" not in usage.stderr


def test_runs_under_python_3_9(zipapp: Path, python39: str) -> None:
    proc = nccl_check(zipapp, str(LOGS / "constructed-plugin-name-mismatch.log"), python=python39)
    assert proc.returncode == 1 and "libnccl-net-ofi.so" in one_line(proc.stderr)
    ok = nccl_check(zipapp, "--format", "json", str(LOGS / "ofi-aws-libfabric-1.4.0aws-nccl-527.log"), python=python39)
    assert ok.returncode == 0 and json.loads(ok.stdout)["plugin_version"] == "1.4.0aws"


# --- jobs/nccl-tests.sbatch ----------------------------------------------------------------------------

def run_job(tmp_path: Path, zipapp: Path, log: str, srun_rc: int = 0) -> subprocess.CompletedProcess[str]:
    """The job script under bash: `srun` prints a recorded NCCL log (and exits srun_rc), python3 is this
    interpreter, the zipapp is the one just built."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(f"#!/bin/bash\ncat {LOGS / log}\nexit {srun_rc}\n")
    srun.chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    image = tmp_path / "nccl-tests.sqsh"
    image.write_bytes(b"hsqs")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CK_IMAGE": str(image), "CK_NODE_PYZ": str(zipapp),
           "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "p5-st-p5-[1-2]"}
    return subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_the_job_fails_when_nccl_used_sockets(tmp_path: Path, zipapp: Path) -> None:
    proc = run_job(tmp_path, zipapp, "constructed-mixed-ofi-socket.log")
    assert proc.returncode == 1, proc.stderr
    recorded = (LOGS / "constructed-mixed-ofi-socket.log").read_text()
    assert (tmp_path / "nccl-tests_4242.nccl.log").read_text() == recorded
    assert "NCCL INFO Using network Socket" in proc.stdout  # tee: the job's output keeps the NCCL lines
    assert "not EFA, on ip-10-1-2-4: " in one_line(proc.stderr)


def test_the_job_passes_on_efa(tmp_path: Path, zipapp: Path) -> None:
    proc = run_job(tmp_path, zipapp, "ofi-efa-libfabric-nccl-1597.log")
    assert proc.returncode == 0, proc.stderr
    assert "NCCL transport ofi on 2 host(s), provider efa" in proc.stdout


def test_the_job_keeps_sruns_failure(tmp_path: Path, zipapp: Path) -> None:
    proc = run_job(tmp_path, zipapp, "ofi-efa-libfabric-nccl-1597.log", srun_rc=3)
    assert proc.returncode == 3
    assert "all_reduce_perf failed: srun exit 3 (NCCL transport check: exit 0)" in proc.stderr
