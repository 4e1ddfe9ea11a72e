"""Which squashfuse reads a job's image, checked on the running job with the REAL enroot 4.1.2 + pyxis 0.24.0:

  * ubuntu2404 (its AMI's squashfuse_ll is multi-threaded; here the REAL squashfuse_ll 0.6.2 built from
    ../shared/vendor, squashfuse_build.py): the node makes /usr/local/bin/squashfuse run it (squashfuse_reader.py's
    wrapper, one malloc arena), the head node writes
    use_squashfuse=1, and while a user's job runs in place the FUSE process serving its image IS that binary (the
    bytes behind /proc/PID/exe) with glibc.malloc.arena_max=1 in its environment, running more than one thread
    after parallel reads. Without the wrapper (a negative
    control) the same job is served by Debian's single-threaded squashfuse, and the check says so.
  * ubuntu2204 (its squashfuse_ll 0.1.103 is single-threaded and rejects enroot's -o uid=,gid=; here Debian's
    0.1.104): nothing is linked, the head node writes no use_squashfuse=1 and says why in one line, and jobs start by
    extraction: no squashfuse process at all.
The process is found by its image path, unique per test (a copy of the store file), so other tests' jobs on the
same machine are never mistaken for it.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import squashfuse_build
from cluster_flow import STORE, Cluster, srun_container

GEN4 = pytest.mark.parametrize("generation", ["gen4"], indirect=True)
LINK = "/usr/local/bin/squashfuse"


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def readers_of(image: str) -> list[dict]:
    """The squashfuse processes on this machine mounting ``image`` (a node path): their argv, the sha256 of the
    program they run (/proc/PID/exe opens the very file, whatever mount namespace it lives in) and their threads."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            # a squashfuse in the foreground on the image (enroot's own `readlink -f IMAGE` is not one)
            if not os.path.basename(argv[0]).startswith(b"squashfuse") or image.encode() not in argv \
                    or b"-f" not in argv:
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            tunables = [e.decode() for e in environ if e.startswith(b"GLIBC_TUNABLES=")]
            found.append({"pid": pid, "argv": [a.decode() for a in argv if a], "tunables": tunables,
                          "exe_sha256": _sha256(f"/proc/{pid}/exe"),
                          "threads": len(os.listdir(f"/proc/{pid}/task"))})
        except OSError:
            continue  # gone meanwhile
    return found


def job_readers(cluster: Cluster, user: str = "ckuser1") -> tuple[list[dict], str]:
    """Run a job on a private copy of the store image as ``user``: eight parallel readers, then a pause while the
    test looks at the FUSE process serving the image; returns what it saw and the job's output."""
    image = f"{STORE}/ck-reader-{uuid.uuid4().hex[:12]}.sqsh"
    node = cluster.node
    node.run(["cp", cluster.sqsh, image])
    node.run(["chmod", "0644", image])
    job = ("for i in 1 2 3 4 5 6 7 8; do cat /bin/busybox /etc/os-release >/dev/null & done; wait; "
           "echo READ-DONE; sleep 6")
    proc = subprocess.Popen(node.argv(["srun", f"--container-image={image}", "sh", "-c", job], user=user),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[dict] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            seen = readers_of(image)
            if seen and all(r["threads"] > 0 for r in seen):
                time.sleep(1.5)  # the readers have run by now (the job reads before it sleeps)
                seen = readers_of(image) or seen
                break
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        node.run(["rm", "-f", image])
    assert proc.returncode == 0 and "READ-DONE" in out, out
    return seen, out


@GEN4
@pytest.mark.parametrize("node_profile", ["ubuntu2404"], indirect=True)
def test_a_multi_threaded_squashfuse_ll_serves_every_in_place_start(cluster: Cluster) -> None:
    node = cluster.node
    assert "exec /usr/bin/squashfuse_ll \"$@\"" in node.read(LINK)
    linked = [ln for ln in cluster.bootstrap_log.splitlines()
              if "squashfuse-reader: /usr/local/bin/squashfuse runs /usr/bin/squashfuse_ll" in ln]
    # the head node writes it (and so measures the start path with it), the compute script finds it written
    assert [" INFO " in ln and "squashfuse_ll 0.6.2 (multi-threaded" in ln for ln in linked] == [True, True], linked
    assert "/usr/bin/squashfuse_ll already" in linked[1], linked
    assert "use_squashfuse=1" in node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf")
    assert any("read with squashfuse_ll 0.6.2 (multi-threaded" in ln for ln in cluster.bootstrap_log.splitlines()
               if "selftest" in ln), "the self-test names the reader"

    seen, _ = job_readers(cluster)
    (reader,) = seen
    assert reader["exe_sha256"] == _sha256(str(squashfuse_build.build())), reader
    assert reader["argv"][:2] == ["/usr/bin/squashfuse_ll", "-f"], reader
    assert any(a.startswith("uid=") for a in reader["argv"]), reader  # enroot's options, taken
    assert reader["tunables"] == ["GLIBC_TUNABLES=glibc.malloc.arena_max=1"], reader
    assert reader["threads"] >= 3, reader  # libfuse's multi-threaded loop: the main thread and its workers

    # negative control: without the wrapper enroot finds Debian's single-threaded squashfuse, and the check sees it
    node.run(["mv", LINK, "/run/ck-squashfuse-wrapper"])
    try:
        seen, _ = job_readers(cluster)
        (reader,) = seen
        assert reader["exe_sha256"] == _sha256("/usr/bin/squashfuse"), reader
        assert reader["exe_sha256"] != _sha256(str(squashfuse_build.build()))
    finally:
        node.run(["mv", "/run/ck-squashfuse-wrapper", LINK])


@GEN4
@pytest.mark.parametrize("node_profile", ["ubuntu2204"], indirect=True)
def test_a_single_threaded_squashfuse_is_not_trusted_with_in_place_starts(cluster: Cluster) -> None:
    node = cluster.node
    assert node.run(["test", "-e", LINK], check=False).returncode == 1, "no wrapper written"
    log = cluster.bootstrap_log.splitlines()
    assert any("squashfuse-reader: not using squashfuse_ll 0.1.104 (single-threaded, /usr/bin/squashfuse_ll): older "
               "than 0.2.0" in ln for ln in log), "\n".join(ln for ln in log if "squashfuse" in ln)
    assert "use_squashfuse" not in node.read("/opt/slurm/etc/plugstack.conf.d/pyxis.conf")
    (why,) = [ln for ln in log if "containers start by extraction onto node-local disk, not in place" in ln]
    assert "the squashfuse enroot runs here (squashfuse 0.1.104 (single-threaded" in why and "ubuntu2404" in why, why
    seen, _ = job_readers(cluster)
    assert seen == [], seen  # extracted: no FUSE process reads the image while the job runs
    assert "cktest" in srun_container(cluster, "cat", "/etc/os-release", user="ckuser1").stdout
