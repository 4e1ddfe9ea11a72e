"""A throwaway, real Slurm cluster on 127.0.0.1 for tests (munged + slurmctld + one slurmd).

Why: the plugstack/pyxis wiring that the node scripts generate can only be trusted once real Slurm
clients and daemons have loaded it. Everything here is Debian's real Slurm 22.05 and munge; only the
SPANK plugin that gets loaded is a test stand-in (see stub_pyxis.c).

Layout of the scratch directory (all state lives there, nothing under /etc or /var is touched):
  munge/      key, socket dir (mode 0755, munge refuses group/world-writable dirs), log, pid, seed
  etc/        slurm.conf + plugstack.conf(.d) written by the test through ClusterKit's generator
  state/      StateSaveLocation; spool/ SlurmdSpoolDir; log/ daemon logs
The cluster has one live node (cknode1, partition `debug`, default) and two declared-but-down GPU nodes
(ckgpu[1-2], partition `gpu`, Gres=gpu:8) so multi-node GPU jobs can be submitted and stay pending.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "srun", "squeue", "scancel", "gcc")


def missing_binaries() -> list[str]:
    """Names of required executables not found on PATH (or in /usr/sbin)."""
    search = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in BINARIES if shutil.which(b, path=search) is None]


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out now; held open together so they are distinct."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    """Handle on the running daemons; `env` is what clients (srun, sbatch, scontrol) need."""

    root: Path
    ctld_port: int = 0
    slurmd_port: int = 0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "run" / "munge.socket.2"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = "/usr/bin:/usr/sbin:/bin:/sbin:" + env.get("PATH", "")
        return env

    # --- configuration -------------------------------------------------------------------------
    def slurm_conf_text(self, plugstack: Path | None = None, ctld_port: int | None = None) -> str:
        host = socket.gethostname().split(".")[0]
        dummy_port = self.slurmd_port + 1 if self.slurmd_port < 65535 else self.slurmd_port - 1
        lines = [
            "ClusterName=cktest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port or self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}/%n",
            f"SlurmctldPidFile={self.root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log'}/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=60",
            "GresTypes=gpu",
            f"PlugStackConfig={plugstack or self.etc / 'plugstack.conf'}",
            f"NodeName=cknode1 NodeHostname={host} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN",
            # Declared GPU nodes that never start (their port has no listener): multi-node GPU jobs
            # are accepted and stay pending, which is all a submission test can show here.
            f"NodeName=ckgpu[1-2] NodeAddr=127.0.0.1 Port={dummy_port} CPUs=96 RealMemory=1000 "
            "Gres=gpu:8 State=DOWN",
            "PartitionName=debug Nodes=cknode1 Default=YES MaxTime=INFINITE State=UP",
            "PartitionName=gpu Nodes=ckgpu[1-2] MaxTime=INFINITE State=UP",
        ]
        return "\n".join(lines) + "\n"

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self, timeout: float = 20.0) -> None:
        for sub in ("munge/run", "etc", "state", "spool/cknode1", "log", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged rejects sockets in group/world-writable directories and keys readable by others.
        for d in (self.root / "munge", self.root / "munge" / "run"):
            d.chmod(0o755)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.ctld_port, self.slurmd_port = _free_ports(2)
        # No plugstack.conf yet, like a fresh PC head node: the test installs it with ClusterKit's generator.
        self.conf.write_text(self.slurm_conf_text())

        self._spawn(
            "munged",
            ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
             f"--key-file={key}", f"--pid-file={self.root / 'munge' / 'munged.pid'}",
             f"--log-file={self.root / 'munge' / 'munged.log'}",
             f"--seed-file={self.root / 'munge' / 'munged.seed'}", "--num-threads=2"],
        )
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._scontrol_ok(), timeout, "slurmctld to answer `scontrol ping`")
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", "cknode1"])
        self._wait(lambda: self.node_state("cknode1") in ("IDLE", "MIXED", "ALLOCATED"), timeout,
                   "cknode1 to become idle")

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "ab")
        exe = shutil.which(argv[0], path="/usr/sbin:/usr/bin:/sbin:/bin")
        assert exe, argv[0]
        self.procs[name] = subprocess.Popen([exe, *argv[1:]], stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)

    def _wait(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                                       + self.logs())
            if cond():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}:\n" + self.logs())

    def logs(self) -> str:
        out = []
        for p in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            if p.is_file():
                out.append(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    # --- client helpers ----------------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(argv), env=kw.pop("env", self.env), capture_output=True, text=True,
                              timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}")
        return proc

    def _scontrol_ok(self) -> bool:
        return self.run("scontrol", "ping", check=False, timeout=10).returncode == 0

    def node_state(self, node: str) -> str:
        proc = self.run("sinfo", "-h", "-n", node, "-o", "%T", check=False, timeout=10)
        return proc.stdout.strip().rstrip("*~#!%$@^-").upper()

    def reconfigure(self) -> None:
        self.run("scontrol", "reconfigure")
        # slurmd re-registers after a reconfigure; wait until the node is usable again.
        self._wait(lambda: self.node_state("cknode1") in ("IDLE", "MIXED", "ALLOCATED"), 20,
                   "cknode1 idle after reconfigure")

    def job_field(self, job_id: str, fmt: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", fmt, check=False).stdout.strip()

    def wait_job_done(self, job_id: str, timeout: float = 20) -> None:
        self._wait(lambda: self.job_field(job_id, "%T") in ("", "COMPLETED"), timeout, f"job {job_id} to finish")
