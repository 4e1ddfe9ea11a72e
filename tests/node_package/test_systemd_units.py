"""The head node's image store units (clusterkit_node/node/systemd_units.py) and the ``store-units`` command
head_node.sh runs: what each unit says for given settings, which units exist, what is written and reported.

(The files head_node.sh leaves on a node, byte for byte, for every shipped spec: tests/node/test_node_golden.py.)
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit_node.node import args, systemd_units
from clusterkit_node.node.file_set import Changes
from clusterkit_node.node.systemd_units import StoreSettings

REPO = Path(__file__).resolve().parents[2]
HEAD = ["CK_CLUSTER=demo", "CK_OS=rhel9", "CK_REGION=us-east-1", "CK_BUNDLE=s3://bucket-1/" + "a" * 64 + ".zip"]
SYNC_CONFIG = "/etc/clusterkit/sync-enroot"
INPUTS = "/var/lib/clusterkit/image-sync.inputs"
SYSTEMD = "etc/systemd/system"
LOCK = "opt/parallelcluster/shared/clusterkit/images.lock"


def settings(*extra: str) -> StoreSettings:
    return StoreSettings.from_values(args.parse("head", [*HEAD, *extra], "head_node.sh"), SYNC_CONFIG)


def test_settings_from_the_args_defaults_and_the_enroot_settings_they_set() -> None:
    s = settings("CK_STORE=/fsx/images", "ENROOT_MAX_PROCESSORS=8", "ENROOT_TRANSFER_TIMEOUT=0",
                 "CK_STORE_GC_TIMER=1", "CK_STORE_GC_GRACE_HOURS=24")
    assert (s.cluster, s.store, s.gc_timer, s.gc_grace_hours, s.gc_stale_days) == \
        ("demo", "/fsx/images", True, "24", "7")
    # enroot.conf's order; only what is set (ENROOT_MAX_PROCESSORS defaults to empty: all CPUs)
    assert [k for k, _ in s.enroot_env] == ["ENROOT_SQUASH_OPTIONS", "ENROOT_MAX_PROCESSORS", "ENROOT_CONNECT_TIMEOUT",
                                            "ENROOT_TRANSFER_TIMEOUT", "ENROOT_TRANSFER_RETRIES", "ENROOT_MOUNT_HOME",
                                            "ENROOT_ROOTFS_WRITABLE"]
    assert dict(s.enroot_env)["ENROOT_MAX_PROCESSORS"] == "8"
    assert "ENROOT_MAX_PROCESSORS" not in dict(settings().enroot_env)


def test_sync_unit_for_given_settings() -> None:
    s = StoreSettings("demo", "/fsx/images", False, "72", "3", (("ENROOT_MOUNT_HOME", "no"),
                                                                  ("ENROOT_SQUASH_OPTIONS", "-comp zstd -b 128K")),
                      "/etc/ck/sync")
    zipapp = "/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz"
    assert systemd_units.sync_unit(s) == f"""\
# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file.
[Unit]
Description=ClusterKit image sync: import the locked container images into /fsx/images
Wants=network-online.target
After=network-online.target remote-fs.target
RequiresMountsFor=/fsx/images /opt/parallelcluster/shared
StartLimitIntervalSec=3600
StartLimitBurst=5

[Service]
Type=simple
Environment=HOME=/root
# Its own enroot config dir, root's only (enroot.sh ck_write_sync_credentials): registry credentials users cannot read.
Environment=ENROOT_CONFIG_PATH=/etc/ck/sync
Environment="PATH=/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
Environment="ENROOT_MOUNT_HOME=no"
Environment="ENROOT_SQUASH_OPTIONS=-comp zstd -b 128K"
# Journal (stdout) and a plain log file for people without journalctl habits. systemctl stop sends
# SIGTERM to every process of the unit: tee ignores it and passes on the sync's last line ("stopped by
# SIGTERM"), then ends with the pipe.
ExecStart=/bin/bash -o pipefail -c 'python3 {zipapp} sync --lock /opt/parallelcluster/shared/clusterkit/images.lock \
--store /fsx/images --stale-days 3 2>&1 | (trap "" TERM; exec tee -a /var/log/clusterkit/image-sync.log)'
# Exit 1 = some image failed (registry hiccup): retry later. Exit 2 = usage/preflight: do not loop.
Restart=on-failure
RestartSec=120
RestartPreventExitStatus=2
Nice=5

[Install]
WantedBy=multi-user.target
"""


def test_heartbeat_and_gc_units_and_timers() -> None:
    s = StoreSettings("train-a", "/fsx/containers", True, "24", "3", (), SYNC_CONFIG)
    zipapp = "/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz"
    beat = systemd_units.heartbeat_unit(s).splitlines()
    assert beat[2] == "Description=ClusterKit store heartbeat: refresh cluster train-a's record in /fsx/containers"
    assert beat[-2:] == ["Type=oneshot",
                         f"ExecStart=/usr/bin/python3 {zipapp} heartbeat --store /fsx/containers --cluster train-a"]
    gc = systemd_units.gc_unit(s).splitlines()
    assert gc[-1] == (f"ExecStart=/bin/bash -o pipefail -c 'python3 {zipapp} gc --apply --store /fsx/containers "
                      "--grace-hours 24 --stale-days 3 2>&1 | tee -a /var/log/clusterkit/store-gc.log'")
    assert "RequiresMountsFor=/fsx/containers /opt/parallelcluster/shared" in gc
    timers = {"sync": systemd_units.sync_timer(), "beat": systemd_units.heartbeat_timer(),
              "gc": systemd_units.gc_timer()}
    for text in timers.values():
        lines = text.splitlines()
        assert lines[0].startswith("# Managed by ClusterKit") and lines[-2:] == ["[Install]", "WantedBy=timers.target"]
    assert "OnUnitInactiveSec=15min" in timers["sync"].splitlines()  # never while a sync runs
    assert {"OnBootSec=5min", "OnUnitActiveSec=1h"} <= set(timers["beat"].splitlines())
    assert {"OnCalendar=daily", "Persistent=true"} <= set(timers["gc"].splitlines())


HEALTH = ["clusterkit-health-schedule.service", "clusterkit-health-schedule.timer"]  # always (fleet/health_deep.py)


def test_the_health_schedule_runs_every_15_minutes_after_the_last_run() -> None:
    unit = systemd_units.health_unit(settings()).splitlines()
    assert unit[-1] == ("ExecStart=/bin/bash -o pipefail -c 'python3 /opt/parallelcluster/shared/clusterkit/"
                        "clusterkit_node.pyz health schedule --store /fsx/containers 2>&1 | tee -a "
                        "/var/log/clusterkit/health-schedule.log'")
    assert {"OnBootSec=10min", "OnUnitInactiveSec=15min"} <= set(systemd_units.health_timer().splitlines())


def test_the_gc_units_exist_only_while_its_timer_is_on() -> None:
    def names(s: StoreSettings) -> list[str]:
        return [u.name for u in systemd_units.store_timers(s) + systemd_units.sync_units(s)]

    assert names(settings()) == ["clusterkit-store-heartbeat.service", "clusterkit-store-heartbeat.timer",
                                 *HEALTH, "clusterkit-image-sync.service", "clusterkit-image-sync.timer"]
    assert names(settings("CK_STORE_GC_TIMER=1")) == [
        "clusterkit-store-heartbeat.service", "clusterkit-store-heartbeat.timer", *HEALTH,
        "clusterkit-store-gc.service", "clusterkit-store-gc.timer", "clusterkit-image-sync.service",
        "clusterkit-image-sync.timer"]


def test_write_units_writes_what_differs_and_removes_the_gc_when_turned_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CK_ROOT", str(tmp_path))
    on = Changes()
    assert systemd_units.write_units(settings("CK_STORE_GC_TIMER=1"), on)
    written = ["clusterkit-store-heartbeat.service", "clusterkit-store-heartbeat.timer", *HEALTH,
               "clusterkit-store-gc.service",
               "clusterkit-store-gc.timer", "clusterkit-image-sync.service", "clusterkit-image-sync.timer"]
    assert on.lines == ["INFO created /etc/systemd/system (mode 0755)",
                        *(f"INFO wrote /etc/systemd/system/{n} (mode 0644)" for n in written)]
    assert (tmp_path / SYSTEMD / "clusterkit-store-gc.service").read_text() == systemd_units.gc_unit(
        settings("CK_STORE_GC_TIMER=1"))
    again = Changes()
    assert not systemd_units.write_units(settings("CK_STORE_GC_TIMER=1"), again)
    assert again.lines == []
    off = Changes()
    assert systemd_units.write_units(settings("CK_STORE_GC_TIMER=0"), off)
    assert off.lines == ["INFO removed /etc/systemd/system/clusterkit-store-gc.timer",
                         "INFO removed /etc/systemd/system/clusterkit-store-gc.service",
                         "INFO image gc timer off (containers.store_gc.timer: false): removed "
                         "clusterkit-store-gc.timer"]
    assert sorted(os.listdir(tmp_path / SYSTEMD)) == sorted(set(written) - {
        "clusterkit-store-gc.service", "clusterkit-store-gc.timer"})


def store_units(root: Path, *extra: str, role: str = "head") -> subprocess.CompletedProcess[str]:
    command = ["store-units", "--inputs-file", INPUTS, "--role", role,
               "--script", "head_node.sh", "--", *HEAD, *extra]
    return subprocess.run([sys.executable, "-m", "clusterkit_node", *command], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "CK_ROOT": str(root)})


def test_store_units_reports_reload_and_a_sync_restart_until_the_inputs_are_recorded(tmp_path: Path) -> None:
    (tmp_path / LOCK).parent.mkdir(parents=True)
    (tmp_path / LOCK).write_text('{"images": []}\n')
    first = store_units(tmp_path)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    unit = (tmp_path / SYSTEMD / "clusterkit-image-sync.service").read_bytes()
    inputs = (f"unit={hashlib.sha256(unit).hexdigest()} "
              f"lock={hashlib.sha256((tmp_path / LOCK).read_bytes()).hexdigest()}")
    assert lines[-3:] == ["@systemd-dirty", "@restart-sync", f"@sync-inputs {inputs}"]
    assert lines[0] == "INFO created /etc/systemd/system (mode 0755)" and len(lines) == 7 + 3
    # head_node.sh records the inputs once it (re)started the sync: then nothing to do
    (tmp_path / INPUTS.lstrip("/")).parent.mkdir(parents=True)
    (tmp_path / INPUTS.lstrip("/")).write_text(inputs + "\n")
    assert store_units(tmp_path).stdout.splitlines() == [f"@sync-inputs {inputs}"]
    # a new lock, or new enroot settings in the unit, restart it; only the unit's change needs a reload
    (tmp_path / LOCK).write_text('{"images": [1]}\n')
    assert store_units(tmp_path).stdout.splitlines()[:1] == ["@restart-sync"]
    changed = store_units(tmp_path, "ENROOT_TRANSFER_RETRIES=7").stdout.splitlines()
    assert changed[:3] == ["INFO wrote /etc/systemd/system/clusterkit-image-sync.service (mode 0644)",
                           "@systemd-dirty", "@restart-sync"]
    unit_text = (tmp_path / SYSTEMD / "clusterkit-image-sync.service").read_text()
    assert 'Environment="ENROOT_TRANSFER_RETRIES=7"' in unit_text


@pytest.mark.parametrize("role, extra, line", [
    ("compute", (), "store-units: the image store's units are the head node's (--role head)"),
    ("head", ("CK_STORE_GC_TIMER=yes",), "Args[5] CK_STORE_GC_TIMER=yes: invalid value"),
])
def test_store_units_refuses_in_one_line(tmp_path: Path, role: str, extra: tuple[str, ...], line: str) -> None:
    r = store_units(tmp_path, *extra, role=role)
    assert r.returncode == 2 and line in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("setting,expected", [
    ("", "packages-fetch --store /fsx/containers --os rhel9 2>&1"),  # the profile's pin
    ("1.18.1", "packages-fetch --store /fsx/containers --os rhel9 --version 1.18.1 2>&1"),
    ("off", None),
])
def test_the_sync_fetches_nvidias_packages_first_unless_off(setting: str, expected) -> None:
    """packages-fetch (store/package_fetch.py) runs before every sync, its failure ignored ('-'): NVIDIA unreachable
    must not stop the image sync, and the next run tries again."""
    unit = systemd_units.sync_unit(settings(f"CK_NVIDIA_CLI={setting}")).splitlines()
    pre = [line for line in unit if line.startswith("ExecStartPre=")]
    if expected is None:
        assert pre == [] and "TimeoutStartSec=15min" not in unit
        return
    zipapp = "/opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz"
    assert pre == [f"ExecStartPre=-/bin/bash -o pipefail -c 'python3 {zipapp} {expected} | tee -a "
                   "/var/log/clusterkit/image-sync.log'"]
    assert unit.index(pre[0]) < unit.index(next(line for line in unit if line.startswith("ExecStart=")))
    assert "TimeoutStartSec=15min" in unit
