"""Live progress of a long import (#16): enroot's own lines streamed to the log as they come, a heartbeat
line with the bytes so far and the throughput at a steady interval, and `status` showing the in-flight
import's size and age.

Real: the node zipapp (a subprocess whose stdout is read line by line while it runs, as the journal
receives it), the real enroot 4.1.2 downloading, unpacking and squashing, `status` run concurrently.
Stand-in: the loopback registry, which first holds the image's blobs (an import stuck before its first
byte) and then trickles them at 1.5 MB/s (a slow registry), so the download takes seconds, not
milliseconds. The heartbeat interval is 0.2 s instead of the default 30 s.
"""
from __future__ import annotations

import queue
import re
import subprocess
import threading
import time

HEARTBEAT = re.compile(r"^\S+ image_sync: (?P<name>\S+): importing for (?P<age>\S+), (?P<total>[0-9.]+ [kMG]?B) "
                       r"so far \((?P<rate>[0-9.]+ [kMG]?B)/s; downloaded (?P<downloaded>[0-9.]+ [kMG]?B), "
                       r"unpacked (?P<unpacked>[0-9.]+ [kMG]?B), squashfs (?P<squashfs>[0-9.]+ [kMG]?B)\)$")
UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def as_bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * UNITS[unit]


class Lines:
    """A process's stdout, read line by line by a thread while it runs (what the journal sees, when)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def until(self, predicate, timeout: float = 60.0) -> str:
        """Read on until a line satisfies predicate; returns it (fails on EOF or timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no such line within {timeout} s; seen:\n" + "\n".join(self.seen)
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, "output ended first; seen:\n" + "\n".join(self.seen)
            self.seen.append(line)
            if predicate(line):
                return line

    def rest(self) -> list[str]:
        """Every line, once the output has ended."""
        while (line := self._q.get(timeout=60)) is not None:
            self.seen.append(line)
        return self.seen


def beats(lines: list[str], name: str) -> list[re.Match]:
    return [m for m in map(HEARTBEAT.match, lines) if m and m["name"] == name]


def status_row(sandbox, name: str) -> list[str]:
    proc = sandbox.run("status", "--store", str(sandbox.store), "--lock", str(sandbox.lock))
    assert proc.returncode == 0, proc.stderr
    row = next(ln for ln in proc.stdout.splitlines() if ln.split()[0] == name)
    return row.split(None, 4)  # NAME DIGEST STATE(2 words) SIZE_MB, then SYNCED_AT VERSIONS DETAIL


def test_a_slow_import_logs_enroot_lines_and_growing_heartbeats_while_it_runs(sandbox):
    sandbox.set_spec({"test/slow": {"big_mb": 6, "hold": True}})  # ~6 MB of incompressible layer
    sandbox.write_lock([sandbox.image("slow")])
    proc = sandbox.popen_sync("--heartbeat", "0.2")
    out = Lines(proc)
    try:
        # Held before its first byte: enroot's own lines are already in the log, the heartbeat goes on
        # (0 B so far), and status shows the import with its age.
        out.until(lambda ln: "slow: enroot: [INFO] Fetching image manifest" in ln)
        out.until(lambda ln: (m := HEARTBEAT.match(ln)) is not None and m["age"] != "0s")
        assert all(as_bytes(m["total"]) == 0 for m in beats(out.seen, "slow"))
        row = status_row(sandbox, "slow")
        assert row[2:4] == ["in", "progress"]
        size, detail = row[4].split(None, 1)
        assert size == "0.0"
        assert f"pid {proc.pid}, attempt 1/3, for " in detail and "downloaded 0 B" in detail
        assert int(re.search(r", for (\d+)s,", detail)[1]) >= 1

        # Released into a slow link: the bytes so far grow from one heartbeat to the next, while enroot
        # is still downloading (nothing published yet, the process still running).
        sandbox.set_spec({"test/slow": {"rate": 1_500_000}})
        out.until(lambda ln: "slow: enroot: [INFO] Downloading 1 missing layers..." in ln)
        before = len(beats(out.seen, "slow"))
        out.until(lambda ln: len({m["downloaded"] for m in beats(out.seen, "slow")[before:]}) >= 3)
        assert proc.poll() is None and not (sandbox.store / "slow.sqsh").exists()
        assert not any("slow: imported" in ln for ln in out.seen)
        grown = [as_bytes(m["downloaded"]) for m in beats(out.seen, "slow")[before:]]
        assert grown == sorted(grown) and grown[-1] > grown[0] > 0, grown
        assert as_bytes(beats(out.seen, "slow")[-1]["rate"]) > 0

        row = status_row(sandbox, "slow")
        size, detail = row[4].split(None, 1)
        assert row[2:4] == ["in", "progress"] and float(size) > 0, row
        assert re.search(r"downloaded [1-9][0-9.]* [kM]B", detail), detail
        assert int(re.search(r", for (\d+)s,", detail)[1]) >= 1
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    lines = out.rest()
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    done = next(i for i, ln in enumerate(lines) if "slow: imported" in ln)
    hb = [i for i, ln in enumerate(lines) if HEARTBEAT.match(ln)]
    assert hb and max(hb) < done, "heartbeats come while the import runs, before it is reported done"
    totals = [as_bytes(m["total"]) for m in beats(lines, "slow")]
    assert totals == sorted(totals), "bytes so far only grow during one attempt"
    assert totals[-1] >= 6e6, "the whole layer was counted once downloaded"
    for step in ("Extracting image layers...", "Creating squashfs filesystem..."):
        assert f"slow: enroot: [INFO] {step}" in "\n".join(lines)
    assert any("slow: enroot: Parallel mksquashfs" in ln for ln in lines), "mksquashfs' own lines too"
    assert not list((sandbox.staging / "partial").iterdir()), "the progress record goes with the work dir"
    status = subprocess.run(sandbox.cmd("status", "--store", str(sandbox.store)), env=sandbox.env,
                            capture_output=True, text=True)
    assert " present " in status.stdout and "in progress" not in status.stdout


def test_a_failing_import_streams_enroot_lines_and_keeps_them_in_the_failure_message(sandbox):
    sandbox.write_lock([sandbox.image("bad")])
    sandbox.set_spec({"test/bad": {"fail": "always"}})
    proc = sandbox.sync("--retries", "0", "--heartbeat", "0.2")
    assert proc.returncode == 1
    streamed = [ln for ln in proc.stdout.splitlines() if " image_sync: bad: enroot: " in ln]
    assert any("503 Service Unavailable" in ln for ln in streamed), proc.stdout
    last = streamed[-1].split(" image_sync: bad: enroot: ", 1)[1]
    assert "bad: 1 attempts failed; last: enroot import exited 1: " in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].endswith(last), "the message ends with enroot's last line"


def test_status_of_a_work_directory_without_a_progress_record_shows_its_size_and_age(sandbox):
    """A partial entry of an older version (no progress.json): status falls back to its own size and its
    mtime/ctime, never a traceback."""
    sandbox.write_lock([sandbox.image("old")])
    sandbox.store.mkdir()
    partial = sandbox.staging / "partial"
    partial.mkdir(parents=True)
    holder = subprocess.Popen(["sleep", "30"])  # a live pid for the entry
    try:
        work = partial / f"old.{sandbox.image('old')['digest'][7:]}.sqsh.partial-{holder.pid}"
        work.mkdir()
        (work / "image.sqsh").write_bytes(b"\0" * 2_500_000)
        row = status_row(sandbox, "old")
        assert row[2:4] == ["in", "progress"] and row[4].split()[0] == "2.5"
        assert f"pid {holder.pid}, for " in row[4]
    finally:
        holder.kill()
        holder.wait()


def test_heartbeat_zero_turns_the_lines_off_but_still_streams_enroot(sandbox):
    sandbox.write_lock([sandbox.image("quiet")])
    proc = sandbox.sync("--heartbeat", "0")
    assert proc.returncode == 0, proc.stderr
    assert not beats(proc.stdout.splitlines(), "quiet")
    assert "quiet: enroot: [INFO] Creating squashfs filesystem..." in proc.stdout


def test_progress_runs_on_python_3_9(sandbox, python39):
    """The streaming loop and the heartbeat are node code: the zipapp under a real Python 3.9."""
    sandbox.set_spec({"test/old": {"big_mb": 2, "rate": 1_000_000}})
    sandbox.write_lock([sandbox.image("old")])
    cmd = [python39, *sandbox.cmd("sync", "--lock", str(sandbox.lock), "--store", str(sandbox.store),
                                  "--heartbeat", "0.1")[1:]]
    proc = subprocess.run(cmd, env=sandbox.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    totals = [as_bytes(m["total"]) for m in beats(proc.stdout.splitlines(), "old")]
    assert totals == sorted(totals) and len(set(totals)) >= 2, proc.stdout
    assert "old: enroot: [INFO] Downloading 1 missing layers..." in proc.stdout
