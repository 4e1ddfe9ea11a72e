"""The head node's systemd units for the image store: the image sync, the store heartbeat and the image gc.

Why rendered here: each unit is the node's settings (the Args, parsed by args.py as for node.env) put into systemd's
words, so it is written from the same parsed values; head_node.sh keeps the systemctl calls (``store-units`` tells
it whether to reload, and whether the sync's inputs changed).

- ``clusterkit-image-sync.service``: the background import of the locked images (systemd, so slow imports never
  hit ParallelCluster's bootstrap timeout), in its own enroot config dir (root's only: registry credentials users
  cannot read) with the node's enroot settings. Its output goes to the journal and to a plain log file through
  ``tee``; ``systemctl stop`` sends SIGTERM to every process of the unit, and tee ignores it, passes on the sync's
  last line ("stopped by SIGTERM") and ends with the pipe. Exit 1 (an image failed: a registry hiccup) is retried
  later; exit 2 (usage, preflight) is not looped on.
  While CK_NVIDIA_CLI is not off, each run first fetches NVIDIA's nvidia-container-cli packages into the store for
  GPU nodes (``packages-fetch``, ExecStartPre; a failure is logged and does not stop the image sync).
- ``clusterkit-image-sync.timer``: the sync again 15 minutes after each run ends (systemd.timer(5)
  OnUnitInactiveSec, so never while one runs): it re-checks every published file against its record (a file
  changed behind the sync's back is re-hashed and, if its content changed, replaced; the importer refuses it
  meanwhile) and retries what failed.
- ``clusterkit-store-heartbeat.service`` + ``.timer``: refresh this cluster's record in the store every hour
  (store/cluster_records.py), so other clusters' syncs and gc know it is alive; a destroyed cluster's goes stale.
- ``clusterkit-store-gc.service`` + ``.timer``: the daily image gc (containers.store_gc.timer, CK_STORE_GC_TIMER=1):
  removes store files no live cluster record names, no process has open and no lease holds, after the grace
  period (store/gc.py). Turned off, both files go (head_node.sh disables the timer first).
- ``clusterkit-health-schedule.service`` + ``.timer``: every 15 minutes, submit the deep node check as a Slurm job on
  idle nodes that are due (fleet/health_deep.py; queues without a deep check get nothing).

What a running sync was started with (its "inputs") is its unit and the image lock of the live bundle: OnNodeUpdated
runs on every cluster update (a MaxCount change included), so head_node.sh restarts the sync only when they changed
since the inputs it recorded, and a multi-GB import in progress survives an unrelated update.
"""
from __future__ import annotations

import argparse
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, List, Tuple

from clusterkit_node.contract.bundle_files import LIVE_DIR, LIVE_ZIPAPP, LOCK_NAME
from clusterkit_node.contract.console import UsageError
from clusterkit_node.node import args as node_args
from clusterkit_node.node import file_set
from clusterkit_node.node.enroot_conf import PASSED_THROUGH
from clusterkit_node.node.enroot_files import SYNC_ENROOT_CONFIG
from clusterkit_node.node.file_set import Changes

SYSTEMD_DIR = "/etc/systemd/system"
SHARED = "/opt/parallelcluster/shared"
ZIPAPP = LIVE_ZIPAPP
LOCK = f"{LIVE_DIR}/{LOCK_NAME}"
SYNC_LOG = "/var/log/clusterkit/image-sync.log"
GC_LOG = "/var/log/clusterkit/store-gc.log"
SYNC_UNIT, SYNC_TIMER = "clusterkit-image-sync.service", "clusterkit-image-sync.timer"
HEARTBEAT_UNIT, HEARTBEAT_TIMER = "clusterkit-store-heartbeat.service", "clusterkit-store-heartbeat.timer"
GC_UNIT, GC_TIMER = "clusterkit-store-gc.service", "clusterkit-store-gc.timer"
HEALTH_UNIT, HEALTH_TIMER = "clusterkit-health-schedule.service", "clusterkit-health-schedule.timer"
HEALTH_LOG = "/var/log/clusterkit/health-schedule.log"
MODE = "0644"
HEADER = "# Managed by ClusterKit head_node.sh; re-run it (OnNodeUpdated) instead of editing this file."
PATH = "/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class StoreSettings:
    """What the units depend on: the head node's Args (settings.py) and the sync's enroot config dir."""

    cluster: str
    store: str
    gc_timer: bool
    gc_grace_hours: str
    gc_stale_days: str
    enroot_env: Tuple[Tuple[str, str], ...]  # the enroot settings the Args set, as enroot.conf passes them on
    sync_enroot_config: str
    os_name: str = ""          # CK_OS: which node profile's packages the head node fetches
    nvidia_cli: str = "off"    # CK_NVIDIA_CLI: a version, "" (the profile's pin) or off (nothing fetched)

    @classmethod
    def from_values(cls, values: Dict[str, str], sync_enroot_config: str) -> "StoreSettings":
        return cls(values["CK_CLUSTER"], values["CK_STORE"], values["CK_STORE_GC_TIMER"] == "1",
                   values["CK_STORE_GC_GRACE_HOURS"], values["CK_STORE_GC_STALE_DAYS"],
                   tuple((k, values[k]) for k in PASSED_THROUGH if values[k]), sync_enroot_config,
                   values["CK_OS"], values["CK_NVIDIA_CLI"])


@dataclass(frozen=True)
class Unit:
    name: str
    text: str


def _text(*lines: str) -> str:
    return "\n".join((HEADER, *lines)) + "\n"


def _timer(description: str, *timer: str) -> str:
    return _text("[Unit]", f"Description={description}", "", "[Timer]", *timer, "", "[Install]",
                 "WantedBy=timers.target")


def packages_fetch(s: StoreSettings) -> List[str]:
    """The sync's first step while CK_NVIDIA_CLI is not off: NVIDIA's nvidia-container-cli packages for this OS into
    the store (store/package_fetch.py; seconds, and no network once the set is there and intact). The head node
    cannot see which queues have GPUs (only their Args carry CK_GPU=1), so it fetches whenever the setting is on.
    '-': a failure (NVIDIA unreachable) is logged and never blocks the image sync; the next run tries again."""
    if s.nvidia_cli == "off":
        return []
    version = f" --version {s.nvidia_cli}" if s.nvidia_cli else ""
    command = f"python3 {ZIPAPP} packages-fetch --store {s.store} --os {s.os_name}{version} 2>&1 | tee -a {SYNC_LOG}"
    return ["# NVIDIA's nvidia-container-cli packages for GPU nodes, into the store first (seconds; a failure is "
            "logged",
            "# and does not stop the image sync: the next run tries again). TimeoutStartSec covers it alone.",
            f"ExecStartPre=-/bin/bash -o pipefail -c '{command}'",
            "TimeoutStartSec=15min"]


def sync_unit(s: StoreSettings) -> str:
    command = (f"python3 {ZIPAPP} sync --lock {LOCK} --store {s.store} --stale-days {s.gc_stale_days} 2>&1 "
               f'| (trap "" TERM; exec tee -a {SYNC_LOG})')
    return _text(
        "[Unit]",
        f"Description=ClusterKit image sync: import the locked container images into {s.store}",
        "Wants=network-online.target",
        "After=network-online.target remote-fs.target",
        f"RequiresMountsFor={s.store} {SHARED}",
        "StartLimitIntervalSec=3600",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=simple",
        "Environment=HOME=/root",
        "# Its own enroot config dir, root's only (enroot.sh ck_write_sync_credentials): registry credentials users "
        "cannot read.",
        f"Environment=ENROOT_CONFIG_PATH={s.sync_enroot_config}",
        f'Environment="PATH={PATH}"',
        *(f'Environment="{key}={value}"' for key, value in s.enroot_env),
        "# Journal (stdout) and a plain log file for people without journalctl habits. systemctl stop sends",
        "# SIGTERM to every process of the unit: tee ignores it and passes on the sync's last line (\"stopped by",
        "# SIGTERM\"), then ends with the pipe.",
        *packages_fetch(s),
        f"ExecStart=/bin/bash -o pipefail -c '{command}'",
        "# Exit 1 = some image failed (registry hiccup): retry later. Exit 2 = usage/preflight: do not loop.",
        "Restart=on-failure",
        "RestartSec=120",
        "RestartPreventExitStatus=2",
        "Nice=5",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    )


def sync_timer() -> str:
    return _timer("ClusterKit image sync, again 15 minutes after each run: re-check the store, retry what failed",
                  "OnUnitInactiveSec=15min", "RandomizedDelaySec=60")


def heartbeat_unit(s: StoreSettings) -> str:
    return _text("[Unit]", f"Description=ClusterKit store heartbeat: refresh cluster {s.cluster}'s record in {s.store}",
                 f"RequiresMountsFor={s.store} {SHARED}", "", "[Service]", "Type=oneshot",
                 f"ExecStart=/usr/bin/python3 {ZIPAPP} heartbeat --store {s.store} --cluster {s.cluster}")


def heartbeat_timer() -> str:
    return _timer("ClusterKit store heartbeat, hourly", "OnBootSec=5min", "OnUnitActiveSec=1h",
                  "RandomizedDelaySec=300")


def gc_unit(s: StoreSettings) -> str:
    command = (f"python3 {ZIPAPP} gc --apply --store {s.store} --grace-hours {s.gc_grace_hours} "
               f"--stale-days {s.gc_stale_days} 2>&1 | tee -a {GC_LOG}")
    return _text("[Unit]", f"Description=ClusterKit image gc: remove files no cluster on {s.store} uses any more",
                 f"RequiresMountsFor={s.store} {SHARED}", "", "[Service]", "Type=oneshot", "Nice=10",
                 f"ExecStart=/bin/bash -o pipefail -c '{command}'")


def gc_timer() -> str:
    return _timer("ClusterKit image gc, daily", "OnCalendar=daily", "RandomizedDelaySec=1h", "Persistent=true")


def health_unit(s: StoreSettings) -> str:
    command = f"python3 {ZIPAPP} health schedule --store {s.store} 2>&1 | tee -a {HEALTH_LOG}"
    return _text("[Unit]", "Description=ClusterKit node health: the deep check on idle nodes that are due",
                 f"RequiresMountsFor={s.store} {SHARED}", "", "[Service]", "Type=oneshot",
                 f'Environment="PATH={PATH}"', f"ExecStart=/bin/bash -o pipefail -c '{command}'")


def health_timer() -> str:
    return _timer("ClusterKit node health schedule, every 15 minutes", "OnBootSec=10min", "OnUnitInactiveSec=15min",
                  "RandomizedDelaySec=60")


def store_timers(s: StoreSettings) -> List[Unit]:
    """The heartbeat and the health schedule always; the gc only while its timer is on."""
    found = [Unit(HEARTBEAT_UNIT, heartbeat_unit(s)), Unit(HEARTBEAT_TIMER, heartbeat_timer()),
             Unit(HEALTH_UNIT, health_unit(s)), Unit(HEALTH_TIMER, health_timer())]
    return found + ([Unit(GC_UNIT, gc_unit(s)), Unit(GC_TIMER, gc_timer())] if s.gc_timer else [])


def sync_units(s: StoreSettings) -> List[Unit]:
    return [Unit(SYNC_UNIT, sync_unit(s)), Unit(SYNC_TIMER, sync_timer())]


def write_units(s: StoreSettings, ch: Changes) -> bool:
    """Every unit the settings call for, written when it differs, in the order head_node.sh has always written
    them; the gc's files removed while its timer is off. True when any file changed (systemd must reload)."""
    changed = False
    file_set.ensure_dir(ch, SYSTEMD_DIR, "0755")
    for unit in store_timers(s):
        changed |= file_set.write_file(ch, f"{SYSTEMD_DIR}/{unit.name}", MODE, unit.text.encode())
    gc_files = [f"{SYSTEMD_DIR}/{name}" for name in (GC_TIMER, GC_UNIT)]
    if not s.gc_timer and any(os.path.lexists(file_set.root() + path) for path in gc_files):
        for path in gc_files:
            changed |= file_set.remove_file(ch, path)
        ch.log("INFO", f"image gc timer off (containers.store_gc.timer: false): removed {GC_TIMER}")
    for unit in sync_units(s):
        changed |= file_set.write_file(ch, f"{SYSTEMD_DIR}/{unit.name}", MODE, unit.text.encode())
    return changed


def sync_inputs(root: str) -> str:
    """What a running sync was started with: its unit (command line, enroot settings) and the live bundle's lock."""
    digests = []
    for path in (f"{SYSTEMD_DIR}/{SYNC_UNIT}", LOCK):
        with open(root + path, "rb") as fh:
            digests.append(hashlib.sha256(fh.read()).hexdigest())
    return "unit={} lock={}".format(*digests)


def recorded_inputs(path: str) -> str:
    """The inputs head_node.sh recorded when it last (re)started the sync ("" before the first time)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read().rstrip("\n")
    except FileNotFoundError:
        return ""


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("store-units", help="head node: write the image store's systemd units for the node's Args; "
                                           "print what changed (file_set.py's lines), @systemd-dirty when a unit "
                                           "changed, @restart-sync when the sync's inputs differ from the recorded "
                                           "ones, and @sync-inputs to record once it is (re)started")
    p.add_argument("--inputs-file", required=True, help="where head_node.sh records the sync's inputs")
    node_args.add_role_arguments(p)


def cmd_store_units(a: argparse.Namespace) -> int:
    if a.role != "head":
        raise UsageError(["store-units: the image store's units are the head node's (--role head)"])
    values = node_args.parsed_or_reported(a)
    if values is None:
        return node_args.EXIT_BAD_ARGS

    def step(ch: Changes) -> None:
        if write_units(StoreSettings.from_values(values, SYNC_ENROOT_CONFIG), ch):
            ch.mark("systemd-dirty")
        inputs = sync_inputs(file_set.root())
        if inputs != recorded_inputs(file_set.root() + a.inputs_file):
            ch.mark("restart-sync")
        ch.mark(f"sync-inputs {inputs}")
    return file_set.report(step)
