"""A ParallelCluster-shaped node inside a private mount namespace, running REAL Slurm, Enroot and Pyxis.

Why: the container path can only be trusted once the real components have loaded exactly the files our
bootstrap writes, at the paths a node has. This harness makes those paths real without touching the
host: one ``unshare --mount --propagation private`` process builds a node root on a tmpfs and pivots
into it; every daemon and command then runs inside it through ``nsenter --mount --root --wd``.

The node root (everything else is the host's own directory, bind-mounted read-write):
  /usr        writable overlay (the node's own upper layer): on top, whiteouts for the programs the node profile's
              AMI lacks
              (clusterkit/data/node_profiles.json: no squashfuse or fuse-overlayfs on alinux2023), the REAL
              multi-threaded squashfuse_ll 0.6.2 where the AMI's is >= 0.3.0 (ubuntu2404: squashfuse_build.py), then
              the aws/systemctl stand-ins in /usr/local/bin, the real enroot (NVIDIA package
              layout: /usr/bin/enroot, /usr/lib/enroot, /usr/share/enroot/hooks.d) and pyxis at ParallelCluster's path
              /usr/local/lib/slurm/spank_pyxis.so, both from tests/real_runtime/runtime_build.py,
              over the host's /usr (Debian's Slurm 22.05, munge, squashfs-tools, curl, jq, ...)
  /etc        writable overlay (the enroot package's /etc/enroot, test users in passwd/group, a
              munge key, /etc/slurm -> /opt/slurm/etc so Debian's clients read PC's config dir)
  /opt        writable overlay: /opt/slurm/{etc,bin} as PC lays them out (bin = Debian's clients),
              /opt/parallelcluster/shared, and the example files PC AMIs >= 3.11.1 ship
  /var, /home writable overlays; /var/tmp a plain directory (enroot's layer work needs a real fs)
  /run        tmpfs (munge's default socket, /run/enroot, /run/pyxis)
  /fsx        a mount point (bind of a scratch directory: the FSx stand-in, a local file system)
  /proc       a fresh proc mount; /dev, /sys, /tmp, /root, /work ... the host's, bind-mounted
  kept paths  the checkout, the scratch and the FSx directory at their host paths, bound back where the node's own
              /var/tmp, /run or (a multi-node node's) /tmp would hide them: the checkout may live anywhere
  /dev/fuse   a node for the host's fuse device with the profile's mode (0666 as on PC AMIs; the host's own is
              root-only); ``fuse_mode`` overrides it

What is a stand-in here, and why: FSx is a local directory (no Lustre here); S3, ECR's token call and
systemd are the stand-ins in standins/usr/local/bin (no AWS, no systemd here); ParallelCluster's node
lifecycle itself is not reproduced (that is tests/node); Slurm is Debian's 22.05, not PC's build; the
/opt/parallelcluster/examples files hold the lines PC's docs give, since only their presence is read.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))
from slurm_cluster import _free_ports  # noqa: E402  (ports the kernel hands out now, held together)

from clusterkit.render.pcluster_config import CUSTOM_SLURM_SETTINGS  # noqa: E402
from clusterkit_node.contract import profiles  # noqa: E402
from clusterkit_node.node.squashfuse_reader import THREADS_BY_DEFAULT_SINCE, version_tuple  # noqa: E402

# slurm.conf lines every node root's Slurm shares (single node here, tests/multinode's fleet too): munge auth, root
# daemons, the node's own spool and log paths, no cgroups or accounting (none run in a node root).
SLURM_DAEMONS = (
    "AuthType=auth/munge", "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root",
    "StateSaveLocation=/var/spool/slurmctld", "SlurmdSpoolDir=/var/spool/slurmd",
    "SlurmctldPidFile=/run/slurmctld.pid", "SlurmdPidFile=/run/slurmd.pid",
    "SlurmctldLogFile=/var/log/slurmctld.log", "SlurmdLogFile=/var/log/slurmd.log",
    "SlurmctldDebug=info", "SlurmdDebug=info", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
    "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
    "JobCompType=jobcomp/none", "MpiDefault=none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
    "ReturnToService=2", "InactiveLimit=0", "KillWait=5", "MinJobAge=300",
)
# ParallelCluster's prolog and epilog wiring (cookbook aws-parallelcluster-slurm templates/default/slurm/slurm.conf.erb
# since PC 3.6: Prolog/Epilog globs over dirs that recipes/config/config_health_check.rb makes root's, 0755, with a
# no-op epilog files/default/config_slurm/scripts/epilog.d/90_pcluster_noop and the health-check prolog
# 90_pcluster_health_check_manager, which runs checks only when the cluster enables them: an exit-0 stand-in here).
# Slurm 22.05 fails a prolog whose glob matches nothing, so the stand-in matters. ClusterKit's prolog drops in beside.
# ClusterKit's CustomSlurmSettings (PrologFlags=Alloc), which ParallelCluster appends to slurm.conf, ride along.
PC_PROLOG_EPILOG = ("Prolog=/opt/slurm/etc/scripts/prolog.d/*", "Epilog=/opt/slurm/etc/scripts/epilog.d/*",
                    "SchedulerParameters=nohold_on_prolog_fail",
                    *(f"{key}={value}" for setting in CUSTOM_SLURM_SETTINGS for key, value in setting.items()))
SLURM_CLIENTS = ("srun", "sbatch", "salloc", "scontrol", "squeue", "sinfo", "scancel", "sacct")
# Test users: two share a primary group (the multi-user failure story), uids well above system ranges.
USERS = {"ckuser1": (27001, 27000), "ckuser2": (27002, 27000)}
GROUP = ("ckteam", 27000)
NODE = "cknode1"
REPO = Path(__file__).resolve().parents[2]  # the checkout: its scripts run inside every node, wherever it lives
# aws and systemctl stand-ins (see their docstrings), overlaid on /usr/local/bin ahead of everything.
STANDINS = Path(__file__).resolve().parent / "standins"
PATH = "/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROFILES = profiles.load()
# The Debian package that brings each program a profile may lack: all its programs are hidden with it (an AMI
# without the package has none of them; squashfuse also brings squashfuse_ll).
PACKAGE_OF = {"squashfuse": "squashfuse", "fuse-overlayfs": "fuse-overlayfs", "pigz": "pigz", "zstd": "zstd",
              "parallel": "parallel", "jq": "jq", "mksquashfs": "squashfs-tools", "unsquashfs": "squashfs-tools",
              "enroot": None}


def multi_threaded_reader(profile: str) -> bool:
    """Does this AMI's squashfuse_ll read on many threads (>= 0.3.0, node_profiles.json)? Then its node root gets
    the REAL multi-threaded squashfuse_ll 0.6.2 (squashfuse_build.py) as /usr/bin/squashfuse_ll, standing in for the
    AMI's (Ubuntu 24.04: 0.5.0); the others keep Debian's single-threaded 0.1.104 (jammy 0.1.103, EPEL 9 0.1.104) or,
    without squashfuse, none."""
    version = version_tuple(PROFILES.profiles[profile].squashfuse_ll.value)
    return version is not None and version >= THREADS_BY_DEFAULT_SINCE


def starts_in_place(profile: str) -> bool:
    """A pyxis >= 0.24 node of this AMI starts store images in place (the start path's rule: squashfuse there and a
    multi-threaded reader; clusterkit_node/node/start_path.py)."""
    return PROFILES.profiles[profile].has("squashfuse") and multi_threaded_reader(profile)


def hidden_programs(profile: str) -> list[str]:
    """Absolute /usr paths of the host's programs the profile's AMI does not have (its packages' bin files)."""
    paths: set[str] = set()
    for program in PROFILES.profiles[profile].lacks():
        package = PACKAGE_OF[program]
        if package is None:
            raise ValueError(f"profile {profile} lacks {program}, which the node root cannot hide")
        listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True).stdout
        paths.update(p for p in listed.split() if re.match(r"^/usr/s?bin/[^/]+$", p))
    return sorted(paths)


def ami_layer(directory: Path, profile: str) -> Path:
    """The top /usr overlay layer of a node of ``profile``: a whiteout (char 0:0, overlayfs' own marker)
    for every program its AMI lacks, so the node runs without them as the AMI would."""
    if profile not in PROFILES.profiles:
        raise ValueError(f"no node profile {profile!r} (clusterkit/data/node_profiles.json)")
    (directory / "usr").mkdir(parents=True, exist_ok=True)
    for path in hidden_programs(profile):
        target = directory / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    if multi_threaded_reader(profile):
        import squashfuse_build

        target = directory / "usr/bin/squashfuse_ll"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(squashfuse_build.build(), target)
    return directory

# Runs as root in the new mount namespace: build the node root, then chroot into it and wait.
_SETUP = r"""
set -euo pipefail
S="$1"; STAGE="$2"; STANDINS="$3"; FSX_AT_START="$4"; AMI="$5"; FUSE_MODE="$6"; NODE_NAME="$7"; FSX="$8"
shift 8  # the rest: host directories the node must see at their own paths (the scratch, the checkout)
# The host directories the node must see at their own paths (the scratch, the checkout: its scripts run in the node,
# wherever it lives). The node root puts its own directories over some of the host's (/var/tmp, /run, a multi-node
# node's /tmp): a kept path one of them hides is bound back, under /tmp and /var/tmp its top directory there (the
# test's temporary tree, /tmp/pytest-of-root, or the clone's, /var/tmp/ci), elsewhere the path itself; the rest of
# the node's own directory stays the node's. A path the node sees already (the host's /work, /home) is left as it is.
keep_visible() {
    local path="$1" bind="$1" base rest
    if [ -e "$R$path" ]; then return 0; fi
    for base in /var/tmp /tmp; do
        case "$path" in "$base"/*) rest="${path#"$base"/}"; bind="$base/${rest%%/*}"; break ;; esac
    done
    mkdir -p "$R$bind"; mount --rbind "$bind" "$R$bind"
}
# A node of a multi-node cluster has its own UTS namespace: its own hostname, as slurmd and MPI see it.
if [ -n "$NODE_NAME" ]; then hostname "$NODE_NAME"; fi
R="$S/root"
mkdir -p "$R"
mount -t tmpfs -o mode=0755 noderoot "$R"
for e in /*; do
    n="${e#/}"
    case "$n" in proc|dev|sys|run|usr|etc|opt|var|home|fsx|lost+found) continue ;; esac
    if [ -L "$e" ]; then cp -P "$e" "$R/$n"
    elif [ -d "$e" ]; then mkdir "$R/$n"; mount --rbind "$e" "$R/$n"
    fi
done
for d in usr etc opt var home fsx proc dev sys run; do mkdir -p "$R/$d"; done
for d in usr etc opt var home; do mkdir -p "$S/upper/$d" "$S/work/$d"; done
# writable like an instance's /usr (a node installs packages: GPU nodes install nvidia-container-cli), into the
# node's own upper layer: the host's /usr is never written
mount -t overlay overlay \
    -o "lowerdir=$AMI/usr:$STANDINS/usr:$STAGE/usr:/usr,upperdir=$S/upper/usr,workdir=$S/work/usr" "$R/usr"
mount -t overlay overlay -o "lowerdir=$STAGE/etc:/etc,upperdir=$S/upper/etc,workdir=$S/work/etc" "$R/etc"
for d in opt var home; do
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$S/upper/$d,workdir=$S/work/$d" "$R/$d"
done
mkdir -p "$S/vartmp" "$FSX"
chmod 1777 "$S/vartmp"
mount --bind "$S/vartmp" "$R/var/tmp"
if [ "$FSX_AT_START" = yes ]; then mount --bind "$FSX" "$R/fsx"; fi
# A node of a multi-node cluster has its own /tmp, as a machine does (Slurm's PMIx plugin makes
# /tmp/spmix_appdir_<uid>_<step> on every node of a step); the test's own temporary tree stays visible.
if [ -n "$NODE_NAME" ]; then mount -t tmpfs -o mode=1777 nodetmp "$R/tmp"; fi
mount -t tmpfs -o mode=0755 run "$R/run"
# after the node's own directories (a kept path is bound over them), before /proc, /dev and /sys (their many mounts
# would be copied again by a bind of a tree that holds the node root)
for keep in "$S" "$@"; do keep_visible "$keep"; done
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
# /dev/fuse with the profile's mode (0666 on ParallelCluster AMIs: systemd's udev rule); this host's is
# root-only, so the node gets its own node for the same device (10,229).
rm -f "$S/fuse"; mknod -m "$FUSE_MODE" "$S/fuse" c 10 229
mount --bind "$S/fuse" "$R/dev/fuse"
mount --rbind /sys "$R/sys"
# pivot_root, not chroot: the kernel refuses to create user namespaces (which enroot needs) for a
# chrooted process (user_namespaces(7): EPERM when the caller's root is not its mount namespace's root).
mkdir "$R/.old_root"
cd "$R"
pivot_root . .old_root
umount -l /.old_root
rmdir /.old_root
cd /
echo ready
exec /bin/sleep infinity
"""


@dataclass
class NodeRoot:
    """Handle on one node root: ``run`` executes inside it (as root or as a test user)."""

    scratch: Path
    stage: Path
    fsx_at_start: bool = True  # False: /fsx is an empty directory until mount_fsx() (PC's config phase)
    profile: str = "ubuntu2404"  # the AMI this node is (clusterkit/data/node_profiles.json): what it lacks is hidden
    fuse_mode: str | None = None  # /dev/fuse mode; None: the profile's
    # A node of a multi-node cluster (tests/multinode): its own network and UTS namespaces and hostname (the
    # fabric gives it an address), and the cluster's one FSx directory; None: the single-node tier's node,
    # which shares the machine's network (loopback only) and has a private FSx directory.
    node_name: str | None = None
    fsx_dir: Path | None = None
    cluster_conf: str | None = None  # a multi-node cluster's slurm.conf (start_controller writes it as given)
    # Host directories the node sees at their own paths wherever they live, even under a directory the node has its
    # own of (/var/tmp, /run, a multi-node node's /tmp): the checkout, whose scripts the node runs; the scratch and
    # the FSx directory always.
    keep: tuple[Path, ...] = (REPO,)
    holder: subprocess.Popen | None = None
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------ namespace
    def start(self) -> "NodeRoot":
        self.scratch.mkdir(parents=True, exist_ok=True)
        ami = ami_layer(self.scratch / "ami", self.profile)
        fuse_mode = self.fuse_mode or PROFILES.profiles[self.profile].dev_fuse_mode.value
        namespaces = ["--mount", "--propagation", "private", *(["--net", "--uts"] if self.node_name else [])]
        self.holder = subprocess.Popen(
            ["unshare", *namespaces, "bash", "-c", _SETUP, "setup",
             str(self.scratch), str(self.stage), str(STANDINS), "yes" if self.fsx_at_start else "no", str(ami),
             fuse_mode, self.node_name or "", str(self.fsx), *sorted({*map(str, self.keep), str(self.fsx.resolve())})],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True)
        assert self.holder.stdout is not None
        # the setup prints "ready" once it has pivoted into the node root (or dies saying why)
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            rest = line + self.holder.stdout.read() if self.holder.poll() is not None else line
            self.stop()
            raise RuntimeError(f"node root setup failed: {rest.strip()}")
        self._provision()
        return self

    @property
    def slurm_node(self) -> str:
        """The Slurm NodeName this node's slurmd runs as."""
        return self.node_name or NODE

    @property
    def fsx(self) -> Path:
        """The host-side directory mounted at /fsx inside the node."""
        return self.fsx_dir or self.scratch / "fsx"

    def host_path(self, path: str) -> Path:
        """Host-side view of a node path under /fsx or /tmp (the directories shared with the host)."""
        if path == "/fsx" or path.startswith("/fsx/"):
            return self.fsx / path[len("/fsx/"):] if path != "/fsx" else self.fsx
        if path.startswith("/tmp/"):
            return Path(path)
        raise ValueError(f"{path} is private to the node root; read it with run(['cat', ...])")

    def argv(self, cmd: list[str], user: str | None = None, env: dict[str, str] | None = None) -> list[str]:
        """The host argv that runs cmd inside the node root, as root or as a test user, with a clean
        login-like environment (what a user's shell on the node would have)."""
        assert self.holder is not None
        base = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root", "USER": "root", "LOGNAME": "root"}
        prefix = ["nsenter", f"--target={self.holder.pid}", "--mount", "--root", "--wd",
                  *(["--net", "--uts"] if self.node_name else [])]
        if user:
            uid, gid = USERS[user]
            base.update({"HOME": f"/home/{user}", "USER": user, "LOGNAME": user})
            prefix += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--reset-env"]
        base.update(env or {})
        return prefix + ["env", "-i", *[f"{k}={v}" for k, v in sorted(base.items())], *cmd]

    def run(self, cmd: list[str], *, user: str | None = None, env: dict[str, str] | None = None,
            check: bool = True, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(cmd, user, env), capture_output=True, text=True, timeout=timeout,
                              input=input)
        if check and proc.returncode != 0:
            raise AssertionError(f"{'as ' + user + ': ' if user else ''}{shlex.join(cmd)} exited "
                                 f"{proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def sh(self, script: str, **kw) -> subprocess.CompletedProcess:
        return self.run(["/bin/bash", "-euo", "pipefail", "-c", script], **kw)

    def read(self, path: str) -> str:
        return self.run(["cat", path]).stdout

    def write(self, path: str, content: str, mode: int = 0o644) -> None:
        self.run(["/bin/bash", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"', "w",
                  path, f"{mode:o}"], input=content)

    def spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.scratch / f"{name}.log", "ab")
        self.daemons[name] = subprocess.Popen(self.argv(cmd), stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True)

    # ------------------------------------------------------------------------------------ node files
    def _provision(self) -> None:
        """What a ParallelCluster AMI + head node have before ClusterKit's scripts run."""
        groups = f"{GROUP[0]}:x:{GROUP[1]}:\n"
        users = "".join(f"{u}:x:{uid}:{gid}:ClusterKit test user:/home/{u}:/bin/bash\n"
                        for u, (uid, gid) in USERS.items())
        links = "\n".join(f'ln -sfn /usr/bin/{c} /opt/slurm/bin/{c}' for c in SLURM_CLIENTS)
        self.sh(f"""
            printf '%s' {shlex.quote(groups)} >> /etc/group
            printf '%s' {shlex.quote(users)} >> /etc/passwd
            for u in {' '.join(USERS)}; do install -d -m 0750 -o "$u" -g {GROUP[0]} "/home/$u"; done
            mkdir -p /opt/slurm/etc /opt/slurm/bin /opt/parallelcluster/shared /var/log/clusterkit
            {links}
            rm -rf /etc/slurm && ln -s /opt/slurm/etc /etc/slurm
            mkdir -p /opt/parallelcluster/examples/enroot /opt/parallelcluster/examples/spank \
                     /opt/parallelcluster/examples/pyxis
            cp /etc/enroot/enroot.conf /opt/parallelcluster/examples/enroot/enroot.conf
            echo 'include /opt/slurm/etc/plugstack.conf.d/*' > /opt/parallelcluster/examples/spank/plugstack.conf
            echo 'required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis' \
                > /opt/parallelcluster/examples/pyxis/pyxis.conf
            mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge /var/spool/slurmctld /var/spool/slurmd
            chmod 0700 /etc/munge /var/lib/munge; chmod 0755 /run/munge
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
            chmod 0400 /etc/munge/munge.key
        """)
        if PROFILES.profiles[self.profile].package_format.value == "rpm":
            # An rpm OS's loader searches /usr/lib64, where its packages put libraries (glibc's default on
            # RHEL-family x86_64/aarch64: sysdeps/unix/sysv/linux/x86_64/64/configure sets slibdir/libdir to lib64);
            # Debian's searches its multiarch directory instead, so the rpm-profile node adds the rpm one.
            self.write("/etc/ld.so.conf.d/00-ck-rpm-os-libdir.conf", "/usr/lib64\n")
            self.run(["ldconfig"])
        self.pc_slurm_scripts()

    def pc_slurm_scripts(self) -> None:
        """ParallelCluster's prolog.d/epilog.d in /opt/slurm/etc with its two scripts (PC_PROLOG_EPILOG says
        whence); the head node makes them, in the /opt/slurm/etc it shares with the compute nodes."""
        self.sh("""
            install -d -m 0755 /opt/slurm/etc/scripts/prolog.d /opt/slurm/etc/scripts/epilog.d
            printf '#!/bin/bash\\nexit 0\\n' > /opt/slurm/etc/scripts/epilog.d/90_pcluster_noop
            printf '#!/bin/bash\\nexit 0\\n' > /opt/slurm/etc/scripts/prolog.d/90_pcluster_health_check_manager
            chmod 0755 /opt/slurm/etc/scripts/epilog.d/90_pcluster_noop \\
                /opt/slurm/etc/scripts/prolog.d/90_pcluster_health_check_manager
        """)

    def slurm_conf(self, ctld_port: int, slurmd_port: int) -> str:
        host = socket.gethostname().split(".")[0]
        return "\n".join([
            "# Minimal single-node Slurm for the real-runtime tier (Debian's Slurm 22.05).",
            "ClusterName=ckreal",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            *SLURM_DAEMONS,
            *PC_PROLOG_EPILOG,
            # PlugStackConfig is left at its default: plugstack.conf next to slurm.conf (/opt/slurm/etc),
            # as on a ParallelCluster node.
            f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN",
            f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
        ]) + "\n"

    def start_slurm(self) -> None:
        """munged, slurmctld and slurmd, all inside the node root (PC's head node runs the first two,
        compute nodes slurmd; one node plays both here)."""
        self.start_controller()
        self.start_slurmd()

    def start_controller(self) -> None:
        """munged and slurmctld (the head node's part)."""
        if self.cluster_conf is None:
            ctld, slurmd = _free_ports(2)
            self.write("/opt/slurm/etc/slurm.conf", self.slurm_conf(ctld, slurmd))
        else:
            self.write("/opt/slurm/etc/slurm.conf", self.cluster_conf)
        self.start_munge()
        self.spawn("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i"])
        self.wait(lambda: self.run(["scontrol", "ping"], check=False).returncode == 0, "slurmctld")

    def start_munge(self) -> None:
        """munged with this node's key (a multi-node cluster gives every node the head node's key); no-op when
        it runs already."""
        if "munged" in self.daemons and self.daemons["munged"].poll() is None:
            return
        self.spawn("munged", ["/usr/sbin/munged", "--foreground", "--force", "--num-threads=2"])
        self.wait(lambda: self.run(["test", "-S", "/run/munge/munge.socket.2"], check=False).returncode == 0,
                  "munged socket")

    # ----------------------------------------------------------------------- mounts made later, as PC does
    def mount_fsx(self) -> None:
        """The FSx stand-in (the host's scratch/fsx) at /fsx."""
        self.run(["mount", "--bind", str(self.fsx), "/fsx"])

    def mount_instance_store(self, mount_dir: str = "/scratch") -> None:
        """An instance-store stand-in (a fresh directory on the host's disk) at mount_dir."""
        disk = self.scratch / f"nvme{mount_dir.replace('/', '-')}"
        disk.mkdir(exist_ok=True)
        self.run(["mkdir", "-p", mount_dir])
        self.run(["mount", "--bind", str(disk), mount_dir])

    def hide(self, path: str) -> None:
        """Make path look unmounted (an empty tmpfs over it) until unhide(path)."""
        self.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "hidden", path])

    def unhide(self, path: str) -> None:
        self.run(["umount", path])

    def _slurmd_starts(self) -> int:
        log = self.run(["cat", "/var/log/slurmd.log"], check=False).stdout
        return log.count("slurmd started on")

    def start_slurmd(self) -> None:
        """Start slurmd and wait until THIS slurmd has started (its log says so: slurmctld may still
        show the node idle from a previous slurmd) and the node is usable."""
        before = self._slurmd_starts()
        self.spawn("slurmd", ["/usr/sbin/slurmd", "-D", "-N", self.slurm_node])
        self.wait(lambda: self._slurmd_starts() > before and self.node_state() in ("IDLE", "MIXED", "ALLOCATED"),
                  "slurmd to start and register", daemon="slurmd")

    def restart_slurmd(self) -> None:
        self.stop_daemon("slurmd")
        self.start_slurmd()

    def node_state(self) -> str:
        out = self.run(["sinfo", "-h", "-n", self.slurm_node, "-o", "%T"], check=False).stdout
        return out.strip().rstrip("*~#!%$@^-").upper()

    def wait(self, cond, what: str, timeout: float = 30, daemon: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.daemons.items():
                if proc.poll() is not None and (daemon is None or name == daemon):
                    raise RuntimeError(f"{name} exited {proc.returncode} while waiting for {what}:\n"
                                       + self.logs())
            if cond():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for p in sorted(self.scratch.glob("*.log")):
            out.append(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}")
        for path in ("/var/log/slurmctld.log", "/var/log/slurmd.log"):
            text = self.run(["tail", "-n", "40", path], check=False).stdout if self.holder else ""
            out.append(f"--- {path}\n{text}")
        return "\n".join(out)

    # ----------------------------------------------------------------------------------------- jobs
    def job_state(self, job_id: str) -> str:
        out = self.run(["scontrol", "show", "job", job_id], check=False).stdout
        m = re.search(r"JobState=(\w+)", out)
        return m[1] if m else ""

    def sbatch(self, script: str, *, user: str | None = None, args: tuple[str, ...] = (),
               timeout: float = 60, env: dict[str, str] | None = None) -> tuple[str, str]:
        """Submit a batch script (as user, from their home), wait for the end (polling, not
        ``--wait``, which polls only every 10 s); returns (state, the job's stdout)."""
        home = f"/home/{user}" if user else "/root"
        name = f"job-{time.monotonic_ns()}.sbatch"
        self.write(f"{home}/{name}", script, 0o755)
        if user:
            self.run(["chown", f"{user}:{GROUP[0]}", f"{home}/{name}"])
        out = self.run(["sbatch", "--parsable", f"--chdir={home}", f"--output={home}/{name}.out", *args,
                        f"{home}/{name}"], user=user, env=env).stdout.strip()
        job_id = out.split(";")[0]
        terminal = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}
        self.wait(lambda: self.job_state(job_id) in terminal, f"job {job_id}", timeout)
        return self.job_state(job_id), self.run(["cat", f"{home}/{name}.out"], check=False).stdout

    # ------------------------------------------------------------------------------------- teardown
    def stop_daemon(self, name: str) -> None:
        proc = self.daemons.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        # nsenter execs the daemon, so the Popen pid is the daemon itself
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def _namespace_pids(self) -> list[int]:
        """Every process in this node's mount namespace (job steps that outlived slurmd included)."""
        if self.holder is None:
            return []
        try:
            ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
        except OSError:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.holder.pid:
                try:
                    if os.readlink(f"/proc/{entry}/ns/mnt") == ns:
                        pids.append(int(entry))
                except OSError:
                    continue
        return pids

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged", *list(self.daemons)):
            self.stop_daemon(name)
        # A step still running at teardown (a test failed mid-srun) leaves a slurmstepd that ignores
        # SIGTERM and would keep the namespace and its mounts alive: kill what is left, by namespace.
        for pid in self._namespace_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=10)
        # The namespace (and its mounts) is gone with its last process; drop the scratch files.
        shutil.rmtree(self.scratch, ignore_errors=True)
