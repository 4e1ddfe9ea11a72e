"""head_node.sh in a sandbox root with recording stand-ins.

Real: the script and enroot.sh (bash), coreutils, python3 -m zipfile, the bundle zip, the files written.
Stand-ins (node_sandbox.py): aws (serves the zip), scontrol, systemctl, sysctl, mountpoint, enroot, and the
AMI's pyxis .so / hooks / example configs (placeholders). Nothing here proves Slurm loads the result:
tests/slurm does that with real daemons.
"""
from __future__ import annotations

import re
import time

import pytest
from node_sandbox import (
    BUNDLE_URI,
    FORBIDDEN,
    HEAD_ARGS,
    IMAGES_LOCK,
    Sandbox,
    bundle_zip,
    changed_paths,
    snapshot,
    standin_zipapp,
)

PYXIS_CONF = "opt/slurm/etc/plugstack.conf.d/pyxis.conf"
PLUGSTACK = "opt/slurm/etc/plugstack.conf"
PROLOG = "opt/slurm/etc/scripts/prolog.d/10_clusterkit_enroot_user_dirs"
UNIT = "etc/systemd/system/clusterkit-image-sync.service"
ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ head_node\.sh (INFO|WARN|ERROR) ")


SYNC = "clusterkit-image-sync.service"
TIMER = "clusterkit-image-sync.timer"
HEARTBEAT, HEARTBEAT_TIMER = "clusterkit-store-heartbeat.service", "clusterkit-store-heartbeat.timer"
GC, GC_TIMER = "clusterkit-store-gc.service", "clusterkit-store-gc.timer"
HEALTH, HEALTH_TIMER = "clusterkit-health-schedule.service", "clusterkit-health-schedule.timer"


def args_with(**overrides: str) -> list[str]:
    base = dict(a.split("=", 1) for a in HEAD_ARGS)
    base.update(overrides)
    return [f"{k}={v}" for k, v in base.items()]


def test_fresh_run_writes_exactly_the_expected_files(sandbox: Sandbox) -> None:
    before = snapshot(sandbox.root)
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0, r.stderr
    after = snapshot(sandbox.root)
    new_files = {p for p in changed_paths(before, after) if after.get(p) and after[p].kind == "f"}
    bundle_dir = after["opt/parallelcluster/shared/clusterkit"].digest
    assert re.fullmatch(r"\.clusterkit-[0-9a-f]{16}", bundle_dir)
    assert new_files == {
        "etc/clusterkit/node.env",
        "etc/enroot/enroot.conf",
        "etc/enroot/hooks.d/50-slurm-pmi.sh",
        "etc/enroot/hooks.d/50-slurm-pytorch.sh",
        "etc/systemd/system/slurmctld.service.d/clusterkit-path.conf",
        UNIT,
        f"etc/systemd/system/{TIMER}",
        f"etc/systemd/system/{HEARTBEAT}",
        f"etc/systemd/system/{HEARTBEAT_TIMER}",
        f"etc/systemd/system/{HEALTH}",
        f"etc/systemd/system/{HEALTH_TIMER}",
        "opt/slurm/etc/scripts/prolog.d/50_clusterkit_node_health",
        "opt/slurm/etc/scripts/clusterkit_health_check",
        PLUGSTACK,
        PYXIS_CONF,
        PROLOG,
        "var/log/clusterkit/bootstrap.log",
        "var/lib/clusterkit/image-sync.inputs",
        *(f"opt/parallelcluster/shared/{bundle_dir}/{f}" for f in
          ("enroot.sh", "clusterkit_node.pyz", "compat_rules.json", "node_profiles.json", "compute_node_start.sh",
           "compute_node_configured.sh", "login_node.sh", "images.lock", "compute.args", "health_plan.json")),
    }
    modes = {p: after[p].mode for p in new_files if not p.startswith("opt/parallelcluster")}
    executable = {PROLOG, "opt/slurm/etc/scripts/prolog.d/50_clusterkit_node_health",
                  "opt/slurm/etc/scripts/clusterkit_health_check"}
    assert modes == {p: (0o755 if "hooks.d" in p or p in executable else 0o644) for p in modes}
    bundle_modes = {p.rsplit("/", 1)[1]: after[p].mode for p in new_files if p.startswith("opt/parallelcluster")}
    # pyxis execs the zipapp (its importer) as the job's user: executable, and (like every bundle file) world-readable
    assert bundle_modes == {f: (0o755 if f == "clusterkit_node.pyz" else 0o644) for f in bundle_modes}
    # per-user parents are root's (the prolog makes each user's dir); the temp dir is shared like /tmp
    for d in ("scratch/enroot/runtime", "scratch/enroot/data", "scratch/enroot/cache"):
        assert sandbox.mode(d) == 0o755, d
    assert sandbox.mode("scratch/enroot/tmp") == 0o1777
    assert sandbox.mode("fsx/containers") == 0o755
    assert sandbox.mode("opt/slurm/etc/plugstack.conf.d") == 0o755
    # No temp file left anywhere (bundle download dir, .ck- temp files).
    assert not [p for p in after if ".ck-" in p or ".clusterkit-tmp" in p or ".clusterkit-link" in p]


def test_fresh_run_content_essentials(sandbox: Sandbox) -> None:
    r = sandbox.run("head_node.sh", *args_with(PYXIS_CONTAINER_SCOPE="global", ENROOT_MAX_PROCESSORS="8"))
    assert r.returncode == 0, r.stderr
    assert sandbox.read(PLUGSTACK).splitlines()[-1] == "include /opt/slurm/etc/plugstack.conf.d/*"
    pyxis_lines = [line for line in sandbox.read(PYXIS_CONF).splitlines() if not line.startswith("#")]
    assert pyxis_lines == ["required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis "
                           "container_scope=global sbatch_support=1 execute_entrypoint=0"]
    conf = sandbox.read("etc/enroot/enroot.conf")
    for line in ("ENROOT_RUNTIME_PATH /scratch/enroot/runtime/user-$(id -u)",
                 "ENROOT_DATA_PATH /scratch/enroot/data/user-$(id -u)",
                 "ENROOT_CACHE_PATH /scratch/enroot/cache/user-$(id -u)",
                 "ENROOT_TEMP_PATH /scratch/enroot/tmp",
                 "ENROOT_CONFIG_PATH ${HOME:-$(echo ~)}/.config/enroot",
                 "ENROOT_SQUASH_OPTIONS -comp zstd -Xcompression-level 3 -b 128K -no-fragments",
                 "ENROOT_MAX_PROCESSORS 8", "ENROOT_TRANSFER_RETRIES 5", "ENROOT_CONNECT_TIMEOUT 30",
                 "ENROOT_TRANSFER_TIMEOUT 600", "ENROOT_MOUNT_HOME yes", "ENROOT_ROOTFS_WRITABLE yes"):
        assert line in conf.splitlines(), line
    assert "/fsx" not in conf
    env = sandbox.read("etc/clusterkit/node.env")
    assert "CK_BUNDLE='" + BUNDLE_URI + "'" in env and "PYXIS_CONTAINER_SCOPE='global'" in env
    assert "ENROOT_SQUASH_OPTIONS='-comp zstd -Xcompression-level 3 -b 128K -no-fragments'" in env
    unit = sandbox.read(UNIT)
    assert ("ExecStart=/bin/bash -o pipefail -c 'python3 /opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz "
            "sync --lock /opt/parallelcluster/shared/clusterkit/images.lock --store /fsx/containers --stale-days 7 "
            "2>&1 "
            "| (trap \"\" TERM; exec tee -a /var/log/clusterkit/image-sync.log)'") in unit
    assert 'Environment="ENROOT_SQUASH_OPTIONS=-comp zstd -Xcompression-level 3 -b 128K -no-fragments"' in unit
    assert "RequiresMountsFor=/fsx/containers /opt/parallelcluster/shared" in unit
    dropin = sandbox.read("etc/systemd/system/slurmctld.service.d/clusterkit-path.conf")
    assert 'Environment="PATH=/opt/slurm/bin:' in dropin
    assert (sandbox.read("etc/enroot/hooks.d/50-slurm-pmi.sh")
            == sandbox.read("usr/share/enroot/hooks.d/50-slurm-pmi.sh"))
    # The bundle's enroot.sh is the repo's.
    from node_sandbox import SCRIPTS
    assert sandbox.read("opt/parallelcluster/shared/clusterkit/enroot.sh") == (SCRIPTS / "enroot.sh").read_text()


def test_fresh_run_commands(sandbox: Sandbox) -> None:
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0, r.stderr
    assert r.calls("aws") == [["s3", "cp", "--only-show-errors", "--region", "us-east-1", BUNDLE_URI,
                               r.calls("aws")[0][-1]]]
    assert r.calls("scontrol") == [["reconfigure"]]
    assert r.calls("systemctl") == [["daemon-reload"], ["enable", "--quiet", SYNC],
                                    ["enable", "--quiet", "--now", TIMER], ["restart", "--no-block", SYNC],
                                    ["enable", "--quiet", "--now", HEARTBEAT_TIMER],
                                    ["enable", "--quiet", "--now", HEALTH_TIMER]]
    # the sync again 15 minutes after each run ends (never while one runs): re-checks the store, retries failures
    timer = sandbox.read(f"etc/systemd/system/{TIMER}").splitlines()
    assert "OnUnitInactiveSec=15min" in timer and "WantedBy=timers.target" in timer
    zip_calls = [c for c in r.calls("python3") if c[:3] == ["-m", "zipfile", "-e"]]
    assert len(zip_calls) == 1
    assert r.calls("sysctl") == []  # alinux2023
    assert not r.command_names & set(FORBIDDEN), r.command_names & set(FORBIDDEN)
    assert "clusterkit_node.pyz" not in r.command_names  # started by systemd, not inline
    log = sandbox.read("var/log/clusterkit/bootstrap.log").splitlines()
    assert log and all(ISO_LINE.match(line) for line in log), log[:3]
    assert r.stdout.splitlines() == [line for line in log if " ERROR " not in line]


def test_store_heartbeat_always_and_gc_timer_only_when_on_then_removed_when_turned_off(sandbox: Sandbox) -> None:
    """The hourly heartbeat keeps this cluster's record live in the (shared) store; the daily gc --apply exists only
    while containers.store_gc.timer is on, with the spec's grace and stale window; turning it off removes it."""
    off = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert off.returncode == 0, off.stderr
    systemd = sandbox.root / "etc/systemd/system"
    assert not (systemd / GC_TIMER).exists() and not (systemd / GC).exists()
    beat = sandbox.read(f"etc/systemd/system/{HEARTBEAT}").splitlines()
    assert ("ExecStart=/usr/bin/python3 /opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz heartbeat "
            "--store /fsx/containers --cluster demo") in beat and "Type=oneshot" in beat
    assert "OnUnitActiveSec=1h" in sandbox.read(f"etc/systemd/system/{HEARTBEAT_TIMER}").splitlines()
    assert ["enable", "--quiet", "--now", HEARTBEAT_TIMER] in off.calls("systemctl")
    assert not [c for c in off.calls("systemctl") if GC_TIMER in c]
    on = sandbox.run("head_node.sh", *args_with(CK_STORE_GC_TIMER="1", CK_STORE_GC_GRACE_HOURS="24",
                                                CK_STORE_GC_STALE_DAYS="3"))
    assert on.returncode == 0, on.stderr
    unit = sandbox.read(f"etc/systemd/system/{GC}").splitlines()
    assert ("ExecStart=/bin/bash -o pipefail -c 'python3 /opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz "
            "gc --apply --store /fsx/containers --grace-hours 24 --stale-days 3 2>&1 | tee -a "
            "/var/log/clusterkit/store-gc.log'") in unit
    assert "OnCalendar=daily" in sandbox.read(f"etc/systemd/system/{GC_TIMER}").splitlines()
    assert ["enable", "--quiet", "--now", GC_TIMER] in on.calls("systemctl")
    assert on.calls("systemctl").count(["daemon-reload"]) == 1
    assert "--stale-days 3 " in sandbox.read(UNIT)
    again = sandbox.run("head_node.sh", *args_with(CK_STORE_GC_TIMER="1", CK_STORE_GC_GRACE_HOURS="24",
                                                   CK_STORE_GC_STALE_DAYS="3"))
    assert again.returncode == 0 and ["daemon-reload"] not in again.calls("systemctl"), "idempotent"
    back = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert back.returncode == 0, back.stderr
    assert not (systemd / GC_TIMER).exists() and not (systemd / GC).exists()
    assert ["disable", "--quiet", "--now", GC_TIMER] in back.calls("systemctl")
    assert ["daemon-reload"] in back.calls("systemctl")
    assert "image gc timer off" in back.stdout


def test_second_run_changes_no_file_and_leaves_a_running_sync_alone(sandbox: Sandbox) -> None:
    assert sandbox.run("head_node.sh", *HEAD_ARGS).returncode == 0
    before = snapshot(sandbox.root)
    time.sleep(0.02)  # a rewrite would show a different mtime
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0, r.stderr
    after = snapshot(sandbox.root)
    changed = changed_paths(before, after)
    # The log grows; the shared dir's own mtime moves because the download temp dir comes and goes.
    assert changed == {"var/log/clusterkit/bootstrap.log", "opt/parallelcluster/shared"}, changed
    assert r.calls("scontrol") == []
    assert ["daemon-reload"] not in r.calls("systemctl")
    assert ["is-active", "--quiet", SYNC] in r.calls("systemctl")
    assert not [c for c in r.calls("systemctl") if c[0] in ("restart", "start")]
    assert f"{SYNC} is running with unchanged inputs: left alone" in r.stdout
    assert "plugstack unchanged; no reconfigure" in r.stdout


def test_on_node_updated_restarts_the_sync_only_for_a_new_lock(sandbox: Sandbox, tmp_path) -> None:
    """OnNodeUpdated runs on every cluster update: an unrelated one (a new bundle whose lock is the
    same, e.g. a MaxCount change with a script fix) must not kill an import in progress."""
    import copy

    assert sandbox.run("head_node.sh", *HEAD_ARGS).returncode == 0
    sandbox.bundle = bundle_zip(tmp_path / "other-scripts.zip", zipapp=standin_zipapp("v2"))
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0, r.stderr
    assert not [c for c in r.calls("systemctl") if c[0] in ("restart", "start")], r.calls("systemctl")
    # the previous run has ended (or failed): started again, not restarted
    r = sandbox.run("head_node.sh", *HEAD_ARGS, env={"CK_TEST_UNIT_ACTIVE": "0"})
    assert ["start", "--no-block", SYNC] in r.calls("systemctl")
    assert ["restart", "--no-block", SYNC] not in r.calls("systemctl")
    lock = copy.deepcopy(IMAGES_LOCK)
    lock["images"][0]["digest"] = "sha256:" + "c" * 64
    lock["images"][0]["enroot_uri"] = "docker://nvcr.io#nvidia/pytorch@sha256:" + "c" * 64
    sandbox.bundle = bundle_zip(tmp_path / "new-lock.zip", lock=lock)
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert ["restart", "--no-block", SYNC] in r.calls("systemctl")
    assert f"(re)started {SYNC}: its unit or image lock changed" in r.stdout
    # and a changed unit (new enroot settings) restarts it too
    r = sandbox.run("head_node.sh", *args_with(ENROOT_TRANSFER_RETRIES="7"))
    assert ["restart", "--no-block", SYNC] in r.calls("systemctl")


def test_update_with_new_settings_and_bundle(sandbox: Sandbox, tmp_path) -> None:
    """OnNodeUpdated: changed PYXIS_* -> pyxis.conf rewritten + reconfigure; new bundle -> link switched,
    the previous bundle kept (compute nodes may be mid-bootstrap on it), older ones removed."""
    assert sandbox.run("head_node.sh", *HEAD_ARGS).returncode == 0
    first = snapshot(sandbox.root)["opt/parallelcluster/shared/clusterkit"].digest
    versions = []
    for n in range(2):
        sandbox.bundle = bundle_zip(tmp_path / f"bundle{n}.zip",
                                    zipapp=standin_zipapp(f"version {n}"))
        r = sandbox.run("head_node.sh", *args_with(PYXIS_CONTAINER_SCOPE="global"))
        assert r.returncode == 0, r.stderr
        versions.append(snapshot(sandbox.root)["opt/parallelcluster/shared/clusterkit"].digest)
        assert r.calls("scontrol") == ([["reconfigure"]] if n == 0 else [])
    assert len({first, *versions}) == 3
    assert "container_scope=global" in sandbox.read(PYXIS_CONF)
    kept = sorted(p.name for p in (sandbox.root / "opt/parallelcluster/shared").iterdir())
    assert kept == sorted([versions[0], versions[1], "clusterkit"])
    assert sandbox.read("opt/parallelcluster/shared/clusterkit/clusterkit_node.pyz").endswith("# version 1\n")


def test_no_temp_file_ever_appears_in_plugstack_conf_d(sandbox: Sandbox) -> None:
    """Watch plugstack.conf.d with inotify during the run: the only name ever created or renamed into
    it is pyxis.conf itself (aws-parallelcluster#6459)."""
    from node_sandbox import DirWatch
    conf_d = sandbox.root / "opt/slurm/etc/plugstack.conf.d"
    conf_d.mkdir(parents=True)
    watch, etc_watch = DirWatch(conf_d), DirWatch(conf_d.parent)
    try:
        r = sandbox.run("head_node.sh", *HEAD_ARGS)
    finally:
        events, etc_events = watch.stop(), etc_watch.stop()
    assert r.returncode == 0, r.stderr
    assert events == ["pyxis.conf"]
    assert sorted(p.name for p in conf_d.iterdir()) == ["pyxis.conf"]
    # The temp file was made outside the include directory, in Slurm's etc dir (the same file system).
    assert [e for e in etc_events if e.startswith(".pyxis.conf.ck-")], etc_events


def test_missing_pyxis_fails_without_installing_pyxis_conf(tmp_path) -> None:
    sb = Sandbox(tmp_path, mounts={"/fsx"}).provide_ami(pyxis=False)
    r = sb.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()[-1]
    assert "/usr/local/lib/slurm/spank_pyxis.so" in err and "3.11.1" in err
    assert "/opt/parallelcluster/examples/pyxis/pyxis.conf" in err
    assert not (sb.root / PYXIS_CONF).exists() and not (sb.root / PLUGSTACK).exists()
    assert r.calls("scontrol") == [] and r.calls("systemctl") == []


def test_missing_enroot_fails_naming_it(tmp_path) -> None:
    sb = Sandbox(tmp_path, mounts={"/fsx"}).provide_ami(enroot=False)
    r = sb.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 1
    assert "enroot binary" in r.stderr and "3.11.1" in r.stderr
    assert not (sb.root / "etc/enroot/enroot.conf").exists()


@pytest.mark.parametrize("bad, code, needle", [
    ("CK_FOO=1", 2, "unknown key CK_FOO"),
    ("ck_store=/fsx/x", 2, "did you mean CK_STORE?"),
    ("PYXIS_CONTAINER_SCOPE=node", 2, "PYXIS_CONTAINER_SCOPE=node: invalid value (expected job or global)"),
    ("ENROOT_SQUASH_OPTIONS=$(reboot)", 2, "ENROOT_SQUASH_OPTIONS=$(reboot): invalid value"),
    ("CK_STORE=/fsx/../etc", 2, "CK_STORE=/fsx/../etc: invalid value (expected an absolute path whose parts are "
                                "letters, digits, . _ - and do not start with a dot"),
    ("CK_CLUSTER=other", 2, "CK_CLUSTER: given twice"),
    ("novalue", 2, "not KEY=VALUE"),
])
def test_bad_args_exit_2_and_change_nothing(sandbox: Sandbox, bad: str, code: int, needle: str) -> None:
    r = sandbox.run("head_node.sh", *HEAD_ARGS, bad)
    assert r.returncode == code, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert needle in last, last
    for p in ("etc/clusterkit/node.env", PYXIS_CONF, "etc/enroot/enroot.conf", UNIT,
              "opt/parallelcluster/shared/clusterkit"):
        assert not (sandbox.root / p).exists(), p
    assert r.calls("scontrol") == [] and r.calls("systemctl") == []


@pytest.mark.parametrize("drop, needle", [
    ("CK_OS", "missing required key CK_OS"),
    ("CK_REGION", "missing required key CK_REGION"),
    ("CK_BUNDLE", "missing required key CK_BUNDLE"),
])
def test_missing_required_arg(sandbox: Sandbox, drop: str, needle: str) -> None:
    r = sandbox.run("head_node.sh", *[a for a in HEAD_ARGS if not a.startswith(drop + "=")])
    assert r.returncode == 2 and needle in r.stderr


def test_bundle_lacking_a_file_fails_and_stays_inactive(sandbox: Sandbox, tmp_path) -> None:
    sandbox.bundle = bundle_zip(tmp_path / "broken.zip", drop=("images.lock",))
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 1 and "lacks images.lock" in r.stderr
    assert sorted(p.name for p in (sandbox.root / "opt/parallelcluster/shared").iterdir()) == []


def test_head_checks_for_every_file_the_bundle_ships() -> None:
    """head_node.sh's BUNDLE_FILES (checked before a bundle goes live) is what clusterkit/artifacts/bundle.py zips,
    less head_node.sh and node.args (the launcher checks and uses those) and the launcher (stage 0 checks
    and runs it), so nothing the nodes run or read can be missing on them."""
    from clusterkit.artifacts.bundle import BUNDLE_DATA, BUNDLE_FILES, LAUNCHER, SCRIPTS, ZIPAPP
    from clusterkit_node.contract.health_plan import PLAN_NAME

    m = re.search(r"^readonly BUNDLE_FILES=\(([^)]*)\)", (SCRIPTS / "head_node.sh").read_text(), re.M)
    assert m, "readonly BUNDLE_FILES=(...) not found in head_node.sh"
    assert sorted(m.group(1).split()) == sorted(
        {*BUNDLE_FILES, ZIPAPP, *BUNDLE_DATA, "images.lock", "compute.args", PLAN_NAME} - {"head_node.sh", LAUNCHER})


def test_download_failure_names_the_bundle(sandbox: Sandbox) -> None:
    r = sandbox.run("head_node.sh", *HEAD_ARGS, env={"CK_TEST_BUNDLE_ZIP": ""})
    assert r.returncode == 1 and f"cannot download CK_BUNDLE={BUNDLE_URI}" in r.stderr
    assert list((sandbox.root / "opt/parallelcluster/shared").iterdir()) == []


def test_store_must_be_on_a_mount(tmp_path) -> None:
    sb = Sandbox(tmp_path, mounts={"/scratch"}).provide_ami()   # FSx not mounted
    r = sb.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 1 and "CK_STORE=/fsx/containers is not on a mounted file system" in r.stderr
    assert not (sb.root / "fsx/containers").exists()
    assert r.calls("systemctl") == []


def test_no_nvme_uses_tmpfs_and_root_volume(tmp_path) -> None:
    sb = Sandbox(tmp_path, mounts={"/fsx"}).provide_ami()
    r = sb.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0, r.stderr
    conf = sb.read("etc/enroot/enroot.conf").splitlines()
    assert "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)" in conf
    assert "ENROOT_DATA_PATH /var/tmp/enroot/data/user-$(id -u)" in conf
    assert "ENROOT_CACHE_PATH /var/tmp/enroot/cache/user-$(id -u)" in conf
    assert "ENROOT_TEMP_PATH /var/tmp/enroot/tmp" in conf
    assert sb.mode("run/enroot") == 0o755 and sb.mode("var/tmp/enroot/data") == 0o755
    assert sb.mode("var/tmp/enroot/tmp") == 0o1777
    assert sb.read("etc/tmpfiles.d/clusterkit-enroot.conf").splitlines()[-1] == "d /run/enroot 0755 root root -"
    assert not (sb.root / "scratch/enroot").exists()
    assert "WARN no NVMe at /scratch" in r.stdout


def test_ubuntu2404_sysctl(sandbox: Sandbox) -> None:
    r = sandbox.run("head_node.sh", *args_with(CK_OS="ubuntu2404"))
    assert r.returncode == 0, r.stderr
    path = "etc/sysctl.d/99-clusterkit-enroot.conf"
    assert sandbox.read(path).splitlines()[-1] == "kernel.apparmor_restrict_unprivileged_userns = 0"
    assert sandbox.mode(path) == 0o644
    assert r.calls("sysctl") == [["-q", "-e", "-p", str(sandbox.root / path)]]
    again = sandbox.run("head_node.sh", *args_with(CK_OS="ubuntu2404"))
    assert again.returncode == 0 and again.calls("sysctl") == []


def test_ecr_credentials_system_wide_and_removed_when_unset(sandbox: Sandbox) -> None:
    hosts = "123456789012.dkr.ecr.us-west-2.amazonaws.com 210987654321.dkr.ecr-fips.us-east-1.amazonaws.com"
    r = sandbox.run("head_node.sh", *args_with(CK_ECR_REGISTRIES=hosts))
    assert r.returncode == 0, r.stderr
    creds = "etc/enroot/credentials"
    assert sandbox.read(creds).splitlines() == [
        "machine 123456789012.dkr.ecr.us-west-2.amazonaws.com login AWS password "
        "$(aws ecr get-login-password --region us-west-2)",
        "machine 210987654321.dkr.ecr-fips.us-east-1.amazonaws.com login AWS password "
        "$(aws ecr get-login-password --region us-east-1)",
    ]
    # Readable by every user (no secret inside; evaluated at pull time), writable by root only.
    assert sandbox.mode(creds) == 0o644
    assert "ln -s /etc/enroot/credentials" in sandbox.read("etc/enroot/enroot.conf")
    assert ["ecr", "get-login-password"] not in [c[:2] for c in r.calls("aws")]  # never at bootstrap
    # The image sync's own copy: root's only, in the config dir its unit names (users cannot read what it uses).
    sync_creds = "etc/clusterkit/sync-enroot/.credentials"
    assert sandbox.read(sync_creds) == sandbox.read(creds)
    assert sandbox.mode(sync_creds) == 0o600 and sandbox.mode("etc/clusterkit/sync-enroot") == 0o700
    assert "Environment=ENROOT_CONFIG_PATH=/etc/clusterkit/sync-enroot" in sandbox.read(UNIT).splitlines()
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0
    assert not (sandbox.root / creds).exists() and not (sandbox.root / sync_creds).exists()
    assert "ln -s" not in sandbox.read("etc/enroot/enroot.conf")


def test_hooks_optional_pmix_and_examples_fallback(sandbox: Sandbox) -> None:
    """50-slurm-pmix.sh is enabled when the package ships it; a hook found only in PC's examples dir
    is taken from there."""
    sandbox.write("usr/share/enroot/hooks.d/50-slurm-pmix.sh", "#!/bin/bash\n# pmix hook\n")
    examples = sandbox.root / "opt/parallelcluster/examples/enroot/hooks.d"
    examples.mkdir(parents=True)
    (sandbox.root / "usr/share/enroot/hooks.d/50-slurm-pytorch.sh").rename(examples / "50-slurm-pytorch.sh")
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0, r.stderr
    hooks = sorted(p.name for p in (sandbox.root / "etc/enroot/hooks.d").iterdir())
    assert hooks == ["50-slurm-pmi.sh", "50-slurm-pmix.sh", "50-slurm-pytorch.sh"]
    assert sandbox.mode("etc/enroot/hooks.d/50-slurm-pmix.sh") == 0o755


def test_missing_required_hook_fails(sandbox: Sandbox) -> None:
    (sandbox.root / "usr/share/enroot/hooks.d/50-slurm-pmi.sh").unlink()
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 1 and "enroot hook 50-slurm-pmi.sh not found" in r.stderr


def test_stale_download_dir_is_cleaned(sandbox: Sandbox) -> None:
    stale = sandbox.root / "opt/parallelcluster/shared/.clusterkit-tmp.KILLED"
    (stale / "unpacked").mkdir(parents=True)
    assert sandbox.run("head_node.sh", *HEAD_ARGS).returncode == 0
    assert not stale.exists()


def test_existing_site_plugstack_is_kept(sandbox: Sandbox) -> None:
    sandbox.write(PLUGSTACK, "optional /usr/lib/site/spank_site.so\n")
    r = sandbox.run("head_node.sh", *HEAD_ARGS)
    assert r.returncode == 0, r.stderr
    assert sandbox.read(PLUGSTACK) == ("optional /usr/lib/site/spank_site.so\n"
                                       "include /opt/slurm/etc/plugstack.conf.d/*\n")


def test_reconfigure_failure_fails_the_node(sandbox: Sandbox) -> None:
    r = sandbox.run("head_node.sh", *HEAD_ARGS, env={"CK_TEST_SCONTROL_RC": "1"})
    assert r.returncode == 1 and "scontrol reconfigure failed" in r.stderr
