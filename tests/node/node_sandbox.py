"""Run the node bootstrap scripts against a throwaway root with recording stand-ins.

What is real: the bash scripts themselves (bootstrap_scripts/*.sh, run by /bin/bash), coreutils, python3
(for `python3 -m zipfile`), the zip file, the file system effects. What is a stand-in: every command
that would act on the machine or the network — scontrol, systemctl, sysctl, enroot, aws, nvidia-smi,
mountpoint, dcgmi, hostname, srun, and the node zipapp clusterkit_node.pyz (the real one belongs to its own tests)
— plus the files the PC AMI would provide (pyxis .so, enroot hooks, example configs), which are placeholders with known
content.

How commands are recorded: the scripts run with PATH set to ONE directory holding
  - wrappers for the real tools they may use (append argv to the command log, then exec the tool),
  - recording stubs for the stand-ins above,
  - recording stubs for the forbidden tools (curl, wget, git, make, gcc, cc, pip, pip3, dnf, yum, apt,
    apt-get) that succeed, so a script calling one does not fail but shows up in the log.
A tool outside that directory is "command not found" (the allow-list documents what the scripts
need). Absolute-path calls bypass PATH, so bash's xtrace (BASH_XTRACEFD) is captured too and the
command words of every traced simple command are checked as well.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import select
import shutil
import stat
import struct
import subprocess
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "bootstrap_scripts"

# Real tools the scripts may call (wrapped + recorded). Anything else is not on PATH.
REAL_TOOLS = ("mkdir", "chmod", "mv", "rm", "ln", "readlink", "stat", "mktemp", "sha256sum", "sort",
              "cat", "python3", "grep", "head")
STANDINS = ("scontrol", "systemctl", "sysctl", "enroot", "aws", "nvidia-smi", "mountpoint", "dcgmi", "hostname",
            "iptables", "ip6tables", "iptables-restore", "ip6tables-restore")
FORBIDDEN = ("curl", "wget", "git", "make", "gcc", "cc", "pip", "pip3", "dnf", "yum", "apt", "apt-get")

PYXIS_SO = "usr/local/lib/slurm/spank_pyxis.so"
PC_EXAMPLES = ("opt/parallelcluster/examples/enroot/enroot.conf",
               "opt/parallelcluster/examples/spank/plugstack.conf",
               "opt/parallelcluster/examples/pyxis/pyxis.conf")
HOOKS = ("50-slurm-pmi.sh", "50-slurm-pytorch.sh")

# Args as PC passes them (one KEY=VALUE per $N).
BUNDLE_URI = "s3://cdk-assets-bucket/" + "b" * 64 + ".zip"
HEAD_ARGS = ("CK_CLUSTER=demo", "CK_OS=alinux2023", "CK_REGION=us-east-1", f"CK_BUNDLE={BUNDLE_URI}")
COMPUTE_ARGS = ("CK_CLUSTER=demo", "CK_OS=alinux2023", "CK_REGION=us-east-1")

IMAGES_LOCK = {
    "cluster": "demo",
    "images": [{
        "compressed_size": 1000,
        "digest": "sha256:" + "a" * 64,
        "enroot_uri": "docker://nvcr.io#nvidia/pytorch@sha256:" + "a" * 64,
        "expect": {},
        "name": "pytorch",
        "platform": "linux/amd64",
        "registry": "nvcr.io",
        "repository": "nvidia/pytorch",
        "source": "nvcr.io/nvidia/pytorch:25.01-py3",
    }],
    "lock_version": 1,
}

_LOG_LINE = r"""{ printf '%s' "${0##*/}"; printf '\t%s' "$@"; printf '\n'; } >>"${CK_TEST_CMDLOG:?}"
PATH=/usr/bin:/bin:/usr/sbin:/sbin"""

# Stand-in behaviour, driven by CK_TEST_* variables the harness sets.
_STUBS = {
    "mountpoint": r"""
[ "${1:-}" = -q ] && shift
rel="${1%/}"; rel="${rel#"${CK_ROOT}"}"
for m in ${CK_TEST_MOUNTS:-}; do [ "$rel" = "$m" ] && exit 0; done
exit 32
""",
    "aws": r"""
if [ "${1:-}" = s3 ] && [ "${2:-}" = cp ]; then
  shift 2; args=()
  while [ $# -gt 0 ]; do case "$1" in --region) shift 2;; --*) shift;; *) args+=("$1"); shift;; esac; done
  if [ -n "${CK_TEST_S3_DIR:-}" ]; then  # a fake S3: s3://bucket/key is $CK_TEST_S3_DIR/bucket/key
    src="${CK_TEST_S3_DIR}/${args[0]#s3://}"
    [ -f "$src" ] || { echo "fatal error: An error occurred (404) when calling the HeadObject operation" >&2; exit 1; }
    cp "$src" "${args[1]}"
    exit 0
  fi
  [ -n "${CK_TEST_BUNDLE_ZIP:-}" ] || { echo "fatal error: An error occurred (404)" >&2; exit 1; }
  cp "${CK_TEST_BUNDLE_ZIP}" "${args[1]}"
  exit 0
fi
# ssm get-parameter: the value is the file $CK_TEST_S3_DIR/ssm/<parameter name>
if [ "${1:-}" = ssm ] && [ "${2:-}" = get-parameter ] && [ -n "${CK_TEST_S3_DIR:-}" ]; then
  while [ $# -gt 0 ]; do [ "$1" = --name ] && { cat "${CK_TEST_S3_DIR}/ssm/${2#/}"; exit; }; shift; done
fi
echo "aws stand-in: unsupported call" >&2; exit 1
""",
    # `start` prints what the node self-test's image prints (clusterkit_node/node/selftest_image.py MESSAGE): the
    # self-test's real container start is the real-runtime tier's to prove (tests/real_runtime)
    "enroot": r"""
[ "${1:-}" = version ] && echo 3.5.0
[ "${1:-}" = start ] && echo "clusterkit-selftest: container started"
exit 0
""",
    "scontrol": r"""exit "${CK_TEST_SCONTROL_RC:-0}"
""",
    # is-active answers from CK_TEST_UNIT_ACTIVE (1: running, the default; 0: not running)
    "systemctl": 'if [ "${1:-}" = is-active ]; then [ "${CK_TEST_UNIT_ACTIVE:-1}" = 1 ]; exit; fi\nexit 0\n',
    "sysctl": "exit 0\n",
    # iptables as on a node booting: nothing hooked yet (-C fails), everything else succeeds (imds_lock.py)
    "iptables": '[ "${1:-}" = -C ] && exit 1\nexit 0\n',
    "ip6tables": '[ "${1:-}" = -C ] && exit 1\nexit 0\n',
    "iptables-restore": "cat >/dev/null\nexit 0\n",
    "ip6tables-restore": "cat >/dev/null\nexit 0\n",
    "nvidia-smi": "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-stand-in)'\n",
    # PC names a compute node's host after its Slurm NodeName (<queue>-<st|dy>-<compute resource>-<n>)
    "hostname": r"""h="${CK_TEST_HOSTNAME:-gpu-dy-p5-1.demo.pcluster}"
[ "${1:-}" = -s ] && h="${h%%.*}"
echo "$h"
""",
    # `dcgmi diag -r N`: DCGM's result table; CK_TEST_DCGMI=fail fails the GPU Memory test on GPU 3 and exits 226
    # (what dcgmi diag exits when a test fails, as tests/node_package/test_gpu_health.py fakes it)
    "dcgmi": r"""[ "${1:-}" = diag ] || { echo "dcgmi stand-in: unsupported call" >&2; exit 1; }
memory='Pass                                           '
[ "${CK_TEST_DCGMI:-pass}" = fail ] && memory='Fail - GPU: 3                                  '
cat <<EOF
Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.9                                          |
| Driver Version Detected   | 550.127.05                                     |
| GPU Device IDs Detected   | 2330,2330,2330,2330,2330,2330,2330,2330        |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| CUDA Main Library         | Pass                                           |
| Permissions and OS Blocks | Pass                                           |
| Persistence Mode          | Pass                                           |
| Environment Variables     | Pass                                           |
| Page Retirement/Row Remap | Pass                                           |
| Graphics Processes        | Pass                                           |
| Inforom                   | Pass                                           |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Pass - All                                     |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | ${memory}|
+-----  Stress  ------------+------------------------------------------------+
| Memory Bandwidth          | Pass - All                                     |
+---------------------------+------------------------------------------------+
EOF
[ "${CK_TEST_DCGMI:-pass}" = fail ] && exit 226
exit 0
""",
}

SRUN_STUB = r"""#!/bin/bash
{ printf '%s' srun; printf '\t%s' "$@"; printf '\n'; } >>"${CK_TEST_CMDLOG:?}"
cat <<'EOF'
Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]] [ : [OPTIONS(N)...]] executable(N) [args(N)...]
Parallel run options:
  -A, --account=name          charge job to specified account
EOF
if [ "${CK_TEST_SRUN_PYXIS:-1}" = 1 ]; then
  cat <<'EOF'
Options provided by plugins:
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container
EOF
fi
"""

ZIPAPP_STANDIN = r'''#!/usr/bin/env python3
"""Stand-in for the node zipapp in node-script tests (`python3 X` runs a script whatever its name).

The node setup commands (REAL below: what the node checks and writes) run the real clusterkit_node package of
this checkout, with start_path.report answering as the `start-path` stand-in does and gpu-health (dcgmi) and
imds-lock (iptables) looking for their tools in the sandbox's PATH directory (CK_TEST_NODE_PATH), not the test
machine's; they are logged as "clusterkit_node.pyz:real".
The other commands record argv: `start-path` answers CK_TEST_START_PATH (with a reason when extract),
`selftest` exits CK_TEST_SELFTEST_RC, everything else exits CK_TEST_IMAGE_SYNC_RC."""
import os, sys
REPO = "@REPO@"
REAL = ("node-args", "pyxis-line-check",
        "plugstack-loads", "start-path-check", "require-enroot", "enroot-files", "slurm-prolog", "pyxis-files",
        "node-file", "store-units", "gpu-health", "squashfuse-reader", "imds-lock")


def standin_report(want_squashfuse, os_name, single_threaded_ok=False):
    path = os.environ.get("CK_TEST_START_PATH", "squashfuse")
    lines = [f"path={path}", "facts: stand-in"]
    if path == "extract":
        lines.append("why extract: squashfuse not installed (stand-in)")
    return lines


real = sys.argv[1:2] and sys.argv[1] in REAL
with open(os.environ["CK_TEST_CMDLOG"], "a") as f:
    f.write("\t".join(["clusterkit_node.pyz:real" if real else "clusterkit_node.pyz", *sys.argv[1:]]) + "\n")
if real:
    sys.path.insert(0, REPO)
    from clusterkit_node.node import start_path
    start_path.report = standin_report
    from clusterkit_node.node import gpu_health
    gpu_health.NODE_PATH = os.environ.get("CK_TEST_NODE_PATH", gpu_health.NODE_PATH)
    from clusterkit_node.node import imds_lock
    imds_lock.SBIN_PATH = os.environ.get("CK_TEST_NODE_PATH", "/nonexistent")
    from clusterkit_node.__main__ import main
    sys.exit(main(sys.argv[1:]))
if sys.argv[1:2] == ["start-path"]:
    print("\n".join(standin_report(True, None)))
    sys.exit(0)
if sys.argv[1:2] == ["selftest"]:
    rc = int(os.environ.get("CK_TEST_SELFTEST_RC", "0"))
    if rc:
        print("2026-01-01T00:00:00Z selftest: error: this node cannot start containers (stand-in)")
    else:
        print("2026-01-01T00:00:00Z selftest: extract start works (stand-in)")
    sys.exit(rc)
rc = int(os.environ.get("CK_TEST_IMAGE_SYNC_RC", "0"))
print(f"2026-01-01T00:00:00Z {sys.argv[1]}: store reachable; present: pytorch (stand-in)" if rc == 0
      else "store /fsx/containers: not mounted", file=sys.stdout)
sys.exit(rc)
'''.replace("@REPO@", str(REPO))


def standin_zipapp(tag: str) -> str:
    """The stand-in zipapp with different bytes (a new bundle whose node tools behave the same)."""
    return f"{ZIPAPP_STANDIN}# {tag}\n"


from clusterkit.artifacts.bundle import ZIPAPP  # noqa: E402


def _demo_compute_args() -> bytes:
    from clusterkit.effective.expand import expand
    from clusterkit.pipeline.loader import load

    return ("\n".join(expand(load("demo", check_lock=False)).node.compute) + "\n").encode()


def _demo_health_plan() -> bytes:
    from clusterkit.effective.expand import expand
    from clusterkit.pipeline.loader import load
    from clusterkit_node.contract.health_plan import dumps

    return dumps(expand(load("demo", check_lock=False)).health).encode()


def bundle_zip(dest: Path, *, drop: tuple[str, ...] = (), zipapp: str | bytes = ZIPAPP_STANDIN,
               lock: dict | None = None) -> Path:
    """The bundle zip as the contract describes it (files at its root), with the stand-in zipapp (or the
    real one: clusterkit.artifacts.bundle.build_zipapp())."""
    files = {name: (SCRIPTS / name).read_bytes()
             for name in ("enroot.sh", "compute_node_start.sh", "compute_node_configured.sh", "login_node.sh")}
    for data in ("compat_rules.json", "node_profiles.json"):
        files[data] = (SCRIPTS.parent / "clusterkit/data" / data).read_bytes()
    files[ZIPAPP] = zipapp.encode() if isinstance(zipapp, str) else zipapp
    files["images.lock"] = (json.dumps(lock or IMAGES_LOCK, indent=2, sort_keys=True) + "\n").encode()
    files["compute.args"] = _demo_compute_args()  # what login_node.sh reads
    files["health_plan.json"] = _demo_health_plan()  # what the health checks read
    with zipfile.ZipFile(dest, "w") as zf:
        for name in sorted(files):
            if name not in drop:
                zf.writestr(name, files[name])
    return dest


@dataclass(frozen=True)
class Entry:
    kind: str        # "f", "d", "l"
    mode: int
    digest: str      # sha256 of a file, link target of a symlink, "" for a dir
    mtime_ns: int


def snapshot(root: Path) -> dict[str, Entry]:
    """Every path under root (relative), with type, mode, content hash and mtime."""
    out: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = Entry("l", 0, os.readlink(p), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = Entry("d", stat.S_IMODE(st.st_mode), "", st.st_mtime_ns)
            else:
                out[rel] = Entry("f", stat.S_IMODE(st.st_mode), hashlib.sha256(p.read_bytes()).hexdigest(),
                                 st.st_mtime_ns)
    return out


def changed_paths(before: dict[str, Entry], after: dict[str, Entry]) -> set[str]:
    """Paths created, removed or modified (content, mode, link target or mtime)."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


class DirWatch:
    """inotify watch of one directory: every name created or renamed into it while the watch runs.

    Why: "no temp file ever appears in plugstack.conf.d" must hold during the run, not just after it
    (aws-parallelcluster#6459: slurmd on other nodes reads the directory at any moment).
    """

    IN_CREATE, IN_MOVED_TO = 0x100, 0x80

    def __init__(self, directory: Path):
        self.events: list[str] = []
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if libc.inotify_add_watch(self._fd, str(directory).encode(), self.IN_CREATE | self.IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            buf = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        off = 0
        while off < len(buf):
            _wd, _mask, _cookie, length = struct.unpack_from("iIII", buf, off)
            name = buf[off + 16: off + 16 + length].rstrip(b"\0").decode()
            self.events.append(name)
            off += 16 + length

    def _loop(self) -> None:
        while not self._stop:
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if ready:
                self._drain()

    def stop(self) -> list[str]:
        self._stop = True
        self._thread.join()
        self._drain()
        os.close(self._fd)
        return self.events


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    commands: list[list[str]]     # argv of every PATH command (wrapper/stub log), in order
    traced: list[str]             # command words of every simple command bash traced

    @property
    def command_names(self) -> set[str]:
        return {c[0] for c in self.commands} | {os.path.basename(w) for w in self.traced}

    def calls(self, name: str) -> list[list[str]]:
        return [c[1:] for c in self.commands if c[0] == name]


@dataclass
class Sandbox:
    """A fake "/" (root) plus the PATH directory of wrappers and stand-ins (bin)."""

    base: Path
    mounts: set[str] = field(default_factory=lambda: {"/fsx"})
    srun_has_pyxis: bool = True
    image_sync_rc: int = 0
    start_path: str = "squashfuse"  # what the zipapp stand-in's start-path answers
    selftest_rc: int = 0
    bundle: Path | None = None

    def __post_init__(self) -> None:
        self.root = self.base / "root"
        self.bin = self.base / "bin"
        self.cmdlog = self.base / "commands.log"
        self.root.mkdir(parents=True)
        self.bin.mkdir()
        self._make_bin()

    # --- fixtures of the fake node -------------------------------------------------------------------
    def provide_ami(self, *, enroot: bool = True, pyxis: bool = True) -> "Sandbox":
        """What an official PC >= 3.11.1 AMI ships (placeholders with recognizable content)."""
        for d in ("etc", "run", "var/tmp", "opt/parallelcluster/shared", "opt/slurm/etc", "fsx", "scratch",
                  "home"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "opt/slurm/etc/slurm.conf").write_text("# slurm.conf placeholder\n")
        if pyxis:
            self.write(PYXIS_SO, "ELF placeholder for spank_pyxis.so\n")
            for p in PC_EXAMPLES:
                self.write(p, f"# PC example {p}\n")
        if enroot:
            for h in HOOKS:
                self.write(f"usr/share/enroot/hooks.d/{h}", f"#!/bin/bash\n# enroot hook {h} (placeholder)\n")
        self._stub("enroot", present=enroot)
        return self

    def install_bundle_as_shared(self) -> Path:
        """Compute-node view: the head node already unpacked the bundle into the NFS-shared dir."""
        target = self.root / "opt/parallelcluster/shared/clusterkit"
        with zipfile.ZipFile(self.bundle_path()) as zf:
            zf.extractall(target)
        return target

    def allow_tools(self, *tools: str) -> None:
        """Put more real tools on PATH (wrapped and recorded), for scripts beyond head_node.sh (the launcher).
        These keep the sandbox PATH: a wrapped bash runs a script that must still see only the stand-ins."""
        log_only = _LOG_LINE.splitlines()[0]
        for tool in tools:
            real = shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin")
            assert real, f"{tool} is needed on the test machine"
            self._script(tool, f'{log_only}\nexec {real} "$@"\n')

    def add_srun(self) -> None:
        srun = self.root / "opt/slurm/bin/srun"
        srun.parent.mkdir(parents=True, exist_ok=True)
        srun.write_text(SRUN_STUB)
        srun.chmod(0o755)

    def bundle_path(self) -> Path:
        if self.bundle is None:
            self.bundle = bundle_zip(self.base / "bundle.zip")
        return self.bundle

    def write(self, rel: str, text: str, mode: int = 0o644) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(mode)
        return p

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text()

    def mode(self, rel: str) -> int:
        return stat.S_IMODE((self.root / rel).lstat().st_mode)

    # --- PATH directory --------------------------------------------------------------------------------
    def _make_bin(self) -> None:
        for tool in REAL_TOOLS:
            real = shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin")
            assert real, f"{tool} is needed on the test machine"
            self._script(tool, f'{_LOG_LINE}\nexec {real} "$@"\n')
        for name in STANDINS:
            self._stub(name)
        for name in FORBIDDEN:
            self._script(name, f"{_LOG_LINE}\nexit 0\n")

    def _stub(self, name: str, present: bool = True) -> None:
        path = self.bin / name
        if not present:
            path.unlink(missing_ok=True)
            return
        self._script(name, f"{_LOG_LINE}\n{_STUBS[name]}")

    def _script(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(0o755)

    # --- running ---------------------------------------------------------------------------------------
    def run(self, script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
        """Run bootstrap_scripts/<script> as PC would (root, Args as $1..$N), traced and recorded."""
        self.cmdlog.write_text("")
        trace = self.base / "trace.log"
        full_env = {
            "PATH": str(self.bin),
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "CK_ROOT": str(self.root),
            "CK_TEST_CMDLOG": str(self.cmdlog),
            "CK_TEST_MOUNTS": " ".join(sorted(self.mounts)),
            "CK_TEST_BUNDLE_ZIP": str(self.bundle_path()),
            "CK_TEST_SRUN_PYXIS": "1" if self.srun_has_pyxis else "0",
            "CK_TEST_IMAGE_SYNC_RC": str(self.image_sync_rc),
            "CK_TEST_START_PATH": self.start_path,
            "CK_TEST_SELFTEST_RC": str(self.selftest_rc),
            "CK_TEST_NODE_PATH": str(self.bin),
        }
        full_env.update(env or {})
        with open(trace, "w") as tf:
            full_env["BASH_XTRACEFD"] = str(tf.fileno())
            proc = subprocess.run(["/bin/bash", "-x", str(SCRIPTS / script), *args], env=full_env,
                                  capture_output=True, text=True, timeout=timeout, pass_fds=(tf.fileno(),))
        commands = [line.split("\t") for line in self.cmdlog.read_text().splitlines() if line]
        traced = []
        for line in trace.read_text(errors="replace").splitlines():
            stripped = line.lstrip("+")
            if stripped != line and stripped.startswith(" ") and stripped.strip():
                word = stripped.split()[0].strip("'\"")
                if "=" not in word:
                    traced.append(word)
        return Result(proc.returncode, proc.stdout, proc.stderr, commands, traced)
