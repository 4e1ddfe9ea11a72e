"""``imds-lock`` with the real iptables, in a network namespace this test makes: a job user cannot reach IMDS.

What is real: iptables/ip6tables (Debian's, nf_tables backend; ParallelCluster's AMIs run the same commands in its
imds-access.sh), the kernel's owner match, the node command as nodes run it (``python3 -m clusterkit_node imds-lock``),
its idempotency, and a user process (uid 4242, setpriv) asking over HTTP. The stand-in: IMDS itself, an HTTP server
on 169.254.169.254:80 and [fd00:ec2::254]:80 on the namespace's loopback. Root (system tier): CI runs as root and
`make test` installs iptables (Makefile DEB_PACKAGES), so a missing one fails here rather than skips.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
USER = 4242

# Runs inside `unshare -n`: a loopback IMDS, the command, and probes as root and as USER; prints one JSON line.
DRIVER = textwrap.dedent(r'''
    import json, os, subprocess, sys, time
    root_dir, steps = sys.argv[1], json.loads(sys.argv[2])
    def sh(*argv):
        return subprocess.run(list(argv), capture_output=True, text=True)
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "addr", "add", "169.254.169.254/32", "dev", "lo")
    sh("ip", "-6", "addr", "add", "fd00:ec2::254/128", "dev", "lo", "nodad")
    imds = os.path.join(root_dir, "imds")
    os.makedirs(os.path.join(imds, "latest/meta-data/iam/security-credentials"))
    with open(os.path.join(imds, "latest/meta-data/iam/security-credentials/compute-role"), "w") as fh:
        fh.write('{"AccessKeyId": "ASIA-STAND-IN"}')
    servers = [subprocess.Popen([sys.executable, "-m", "http.server", "80", "--bind", address, "--directory", imds],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for address in ("169.254.169.254", "fd00:ec2::254")]
    PROBE = ("import sys, urllib.request\n"
             "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=1).status)\n"
             "except Exception as exc:\n    print(type(exc).__name__)\n")
    def probe(url, uid):
        prefix = [] if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        return sh(*prefix, "/usr/bin/python3", "-c", PROBE, url).stdout.strip()
    URL4 = "http://169.254.169.254/latest/meta-data/iam/security-credentials/compute-role"
    URL6 = "http://[fd00:ec2::254]/latest/meta-data/iam/security-credentials/compute-role"
    deadline = time.time() + 10
    while probe(URL4, 0) != "200" and time.time() < deadline:
        time.sleep(0.1)
    if len(sys.argv) > 3:
        subprocess.run(sys.argv[3], shell=True, check=True)
    out = []
    env = dict(os.environ, CK_ROOT=root_dir)
    for step in steps:
        record = {}
        if step:
            done = subprocess.run([sys.executable, "-m", "clusterkit_node", "imds-lock", *step], env=env,
                                  capture_output=True, text=True)
            record.update(rc=done.returncode, lines=done.stdout.splitlines(), stderr=done.stderr)
        record["rules4"] = sh("iptables", "-S").stdout.splitlines()
        record["rules6"] = sh("ip6tables", "-S").stdout.splitlines()
        record["probes"] = {f"{who}{family}": probe(url, uid)
                            for who, uid in (("root", 0), ("user", USER))
                            for family, url in (("4", URL4), ("6", URL6))}
        out.append(record)
    for server in servers:
        server.kill()
    print(json.dumps(out))
''').replace("USER", str(USER))

OPEN = {"root4": "200", "root6": "200", "user4": "200", "user6": "200"}


def _run(tmp_path: Path, steps: list[list[str]], setup: str = "") -> list[dict]:
    """Each step's (imds-lock Args; [] runs nothing) outcome: its lines, the rules and the four probes."""
    missing = [t for t in ("iptables", "ip6tables", "iptables-restore", "unshare", "setpriv", "ip")
               if shutil.which(t) is None]
    assert not missing, f"missing {missing}: `make test` installs iptables (Makefile DEB_PACKAGES)"
    assert os.geteuid() == 0, "the IMDS lock test needs root (a network namespace and iptables): CI runs as root"
    done = subprocess.run(["unshare", "-n", sys.executable, "-c", DRIVER, str(tmp_path), json.dumps(steps),
                           *([setup] if setup else [])], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


LOCK = ["--mode", "root_only", "--role", "compute"]


def test_root_only_keeps_every_user_but_root_from_imds_and_stays_so(tmp_path):
    before, first, second, reopened = _run(tmp_path, [[], LOCK, LOCK, ["--mode", "all_users", "--role", "compute"]])
    assert before["probes"] == OPEN  # the negative control: without the lock a job user reaches IMDS
    assert first["rc"] == 0, first
    assert first["probes"] == {"root4": "200", "root6": "200", "user4": "URLError", "user6": "URLError"}
    assert "-A OUTPUT -d 169.254.169.254/32 -j CLUSTERKIT_IMDS" in first["rules4"]
    assert "-A OUTPUT -d fd00:ec2::254/128 -j CLUSTERKIT_IMDS" in first["rules6"]
    assert "-A CLUSTERKIT_IMDS -m owner --uid-owner 0 -j ACCEPT" in first["rules4"]
    # a second run changes nothing: the same rules (one hook each), no "changed", the lock still holds
    assert second["rc"] == 0 and "@changed" not in second["lines"]
    assert (second["rules4"], second["rules6"]) == (first["rules4"], first["rules6"])
    assert second["probes"] == first["probes"]
    unit = tmp_path / "etc/systemd/system/clusterkit-imds-lock.service"
    assert reopened["rc"] == 0 and reopened["probes"] == OPEN
    assert not any("CLUSTERKIT_IMDS" in r for r in reopened["rules4"] + reopened["rules6"])
    assert not unit.exists()


def test_a_login_node_is_left_to_parallelcluster(tmp_path):
    (record,) = _run(tmp_path, [["--mode", "root_only", "--role", "login"]])
    assert record["rc"] == 0 and record["probes"] == OPEN
    assert not (tmp_path / "etc/systemd/system").exists()


def test_the_chain_is_filled_in_one_commit(tmp_path):
    """A node re-running the lock while jobs run is never open: the chain's rules replace the old ones in one
    iptables-restore commit, whatever was in the chain before (here: an ACCEPT for everyone, left by hand)."""
    script = ("iptables -N CLUSTERKIT_IMDS && iptables -A CLUSTERKIT_IMDS -j ACCEPT && "
              "iptables -I OUTPUT 1 -d 169.254.169.254/32 -j CLUSTERKIT_IMDS")
    (record,) = _run(tmp_path, [LOCK], setup=script)
    assert record["probes"]["user4"] == "URLError"
    assert [r for r in record["rules4"] if "CLUSTERKIT_IMDS" in r and r.startswith("-A CLUSTERKIT")] == [
        "-A CLUSTERKIT_IMDS -m owner --uid-owner 0 -j ACCEPT",
        "-A CLUSTERKIT_IMDS -j REJECT --reject-with icmp-port-unreachable"]
    assert record["rules4"].count("-A OUTPUT -d 169.254.169.254/32 -j CLUSTERKIT_IMDS") == 1


