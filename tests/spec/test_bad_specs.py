"""Every user mistake gets one line: file:line:col: path: problem (hint). Exact lines are asserted."""
from __future__ import annotations

import textwrap

import pytest

from clusterkit.effective.expand import expand
from clusterkit.pipeline.loader import load
from clusterkit.spec.errors import SpecError
from tests.spec_text import BASE_SPEC

BASE = BASE_SPEC


def _with(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def _extra(text: str) -> str:
    return BASE + textwrap.dedent(text)


IMAGE = "containers:\n  images:\n    - name: {name}\n      uri: {uri}\n"
MOUNT = "storage:\n  fsx_lustre:\n    mount_dir: {}\n"
EMAIL_HINT = "one address like ops@example.com; SNS mails it a confirmation link"

CASES = [
    ("all_users IMDS without a reason", _extra("security:\n  compute_imds: all_users\n"),
     ["11:17: security.compute_imds: all_users gives every job user the compute role's credentials: needs a reason "
      "(add compute_imds_reason: (e.g. 'jobs read s3://team-data with the node role'), or remove compute_imds "
      "(root_only))"]),
    ("an IMDS reason without all_users", _extra("security:\n  compute_imds_reason: jobs read S3\n"),
     ["11:24: security.compute_imds_reason: a reason without compute_imds: all_users changes nothing (remove "
      "compute_imds_reason, or set compute_imds: all_users)"]),
    ("unknown top-level key", _extra("regoin: us-east-1\n"),
     ["10:1: regoin: unknown key (did you mean 'region'?)"]),
    ("unknown nested key", _with("        max: 2\n", "        max: 2\n        mni: 1\n"),
     ["10:9: queues[0].compute_resources[0].mni: unknown key (did you mean 'min'?)"]),
    ("string for integer", _with("max: 2", "max: two"),
     ["9:14: queues[0].compute_resources[0].max: expected an integer, got string 'two'"]),
    ("integer for string", _extra("account: 123456789012\n"),
     ['10:10: account: expected a string, got integer \'123456789012\' (quote it: "123456789012")']),
    ("missing required", _with("        instance_type: p5.48xlarge\n", ""),
     ["7:9: queues[0].compute_resources[0]: missing required key 'instance_type' (EC2 instance type)"]),
    ("bad enum", _extra("os: alinux2\n"),
     ["10:5: os: must be one of alinux2023 | ubuntu2204 | ubuntu2404 | rhel9, got string 'alinux2' "
      "(did you mean 'alinux2023'?)"]),
    ("bad cluster name", _with("name: t\n", "name: 1cluster\n"),
     ["1:7: name: '1cluster' is not a valid ParallelCluster cluster name "
      "(start with a letter; letters, digits and hyphens; at most 60 characters)"]),
    ("unknown region", _with("region: us-east-1", "region: us-eats-1"),
     ["2:9: region: unknown region 'us-eats-1' (did you mean 'us-east-1'?)"]),
    ("az outside region", _with("us-east-1a", "us-west-2a"),
     ["3:20: availability_zone: 'us-west-2a' is not in us-east-1 "
      "(one of us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1e, us-east-1f)"]),
    ("use_enroot_load on a release whose pyxis lacks it",
     _extra("containers:\n  pyxis:\n    use_enroot_load: true\n"),
     ["12:22: containers.pyxis.use_enroot_load: needs pyxis >= 0.21.0, and ParallelCluster 3.16.1 AMIs are only "
      "known to ship pyxis 0.20.0 (remove it: where the node's pyxis is older the head node leaves it out (an "
      "unknown option would stop slurmd), so it would not take effect)"]),
    ("rhel8: python 3.6 on the nodes", _extra("os: rhel8\n"),
     ["10:5: os: rhel8 is not supported: its python3 is 3.6 and ClusterKit's node tools need Python 3.9 or "
      "later (use alinux2023, ubuntu2204, ubuntu2404 or rhel9)"]),
    ("compute root volume below the AMI",
     _with("    compute_resources:\n", "    root_volume_gib: 10\n    compute_resources:\n"),
     ["6:22: queues[0].root_volume_gib: 10 GiB is not a usable root volume "
      "(40 (the AMI's root snapshot) to 16384 (the EBS gp3 limit))"]),
    ("old pc version", _extra("parallelcluster_version: 3.10.1\n"),
     ["10:26: parallelcluster_version: 3.10.1 is too old "
      "(ParallelCluster 3.11.1 or later ships Enroot and Pyxis on its official AMIs)"]),
    ("unknown instance type", _with("p5.48xlarge", "p5.48xlargee"),
     ["8:24: queues[0].compute_resources[0].instance_type: unknown instance type 'p5.48xlargee' "
      "(did you mean 'p5.48xlarge'?)"]),
    ("efa on non-efa type",
     _with("        instance_type: p5.48xlarge\n", "        instance_type: c5.large\n        efa: true\n"),
     ["9:14: queues[0].compute_resources[0].efa: c5.large does not support EFA "
      "(set efa: false or pick an EFA type)"]),
    ("min greater than max", _with("        max: 2\n", "        max: 3\n        min: 4\n"),
     ["9:14: queues[0].compute_resources[0].max: must be >= min (3 < 4)"]),
    ("capacity block without reservation",
     _with("  - name: gpu\n", "  - name: gpu\n    capacity_type: capacity_block\n"),
     ["8:9: queues[0].compute_resources[0]: capacity_block needs capacity_reservation_id "
      "(the cr-... id of the capacity block)",
      "8:9: queues[0].compute_resources[0].min: capacity_block needs min == max > 0 (min 0, max 2) "
      "(set both to the block's instance count)"]),
    ("capacity block with placement group",
     _with("  - name: gpu\n", "  - name: gpu\n    capacity_type: capacity_block\n    placement_group: true\n")
     .replace("        max: 2\n", "        max: 2\n        min: 2\n"
                                  "        capacity_reservation_id: cr-0123456789abcdef0\n"),
     ["7:22: queues[0].placement_group: capacity blocks cannot use a placement group "
      "(the reservation already fixes placement; remove placement_group)"]),
    ("fsx capacity", _extra("storage:\n  fsx_lustre:\n    new:\n      capacity_gib: 2000\n"),
     ["13:21: storage.fsx_lustre.new.capacity_gib: 2000 GiB is not a valid Lustre capacity "
      "(1200 or a multiple of 2400, e.g. 2400)"]),
    ("fsx throughput", _extra("storage:\n  fsx_lustre:\n    new:\n      throughput_mb_per_tib: 200\n"),
     ["13:30: storage.fsx_lustre.new.throughput_mb_per_tib: 200 is not allowed for PERSISTENT_2 "
      "(one of 125, 250, 500, 1000)"]),
    ("scratch with throughput",
     _extra("storage:\n  fsx_lustre:\n    new:\n      deployment_type: SCRATCH_2\n      throughput_mb_per_tib: 200\n"),
     ["14:30: storage.fsx_lustre.new.throughput_mb_per_tib: SCRATCH_2 has no per-unit throughput setting "
      "(set it to null)"]),
    ("bad fsx id", _extra("storage:\n  fsx_lustre:\n    existing:\n      file_system_id: fs-123\n"),
     ["13:23: storage.fsx_lustre.existing.file_system_id: 'fs-123' is not an FSx id "
      "(fs- followed by 17 lowercase hex characters)"]),
    ("duplicate queue",
     BASE + "  - name: gpu\n    compute_resources:\n"
            "      - name: c\n        instance_type: c6i.xlarge\n        max: 1\n",
     ["10:11: queues[1].name: duplicate queue name 'gpu' (names must be unique)"]),
    ("duplicate compute resource",
     _with("        max: 2\n",
           "        max: 2\n      - name: p5\n        instance_type: p5.48xlarge\n        max: 1\n"),
     ["10:15: queues[0].compute_resources[1].name: duplicate compute resource name 'p5' (names must be unique)"]),
    ("duplicate image", _extra(IMAGE.format(name="a", uri="ubuntu:22.04") + "    - name: a\n      uri: ubuntu:24.04\n"),
     ["14:13: containers.images[1].name: duplicate image name 'a' (names must be unique)"]),
    ("too many queues", BASE.replace("queues:\n", "queues:\n" + "".join(
        f"  - name: q{i}\n    compute_resources:\n      - name: c\n        instance_type: c6i.xlarge\n        max: 1\n"
        for i in range(50))),
     ["5:3: queues: 51 compute resources; ParallelCluster allows 50 per cluster",
      "5:3: queues: 51 queues; ParallelCluster allows 50"]),
    ("unsupported os", _extra("os: centos7\n"),
     ["10:5: os: must be one of alinux2023 | ubuntu2204 | ubuntu2404 | rhel9, got string 'centos7'"]),
    ("newer pc version", _extra("parallelcluster_version: 3.17.0\n"),
     ["10:26: parallelcluster_version: 3.17.0 is newer than ClusterKit supports (supported: 3.11.1 to 3.16.1)"]),
    ("image without tag", _extra(IMAGE.format(name="a", uri="nvcr.io/nvidia/pytorch")),
     None),  # message text comes from imageref; asserted by prefix below
    ("uppercase image repository", _extra(IMAGE.format(name="a", uri="nvcr.io/NVIDIA/pytorch:25.01-py3")),
     None),
    ("bad image name", _extra(IMAGE.format(name="My Image", uri="ubuntu:22.04")),
     ["12:13: containers.images[0].name: 'My Image' is not a valid image name "
      "(lowercase letters, digits, '.', '_', '-'; it becomes <store>/<name>.sqsh)"]),
    ("image name collides with store files", _extra(IMAGE.format(name="manifest.json", uri="ubuntu:22.04")),
     ["12:13: containers.images[0].name: 'manifest.json' collides with the image store's own files "
      "(drop the .sqsh/.json/.lock ending)"]),
    ("uppercase compute resource", _with("      - name: p5\n", "      - name: P5\n"),
     ["7:15: queues[0].compute_resources[0].name: 'P5' is not a valid compute resource name "
      "(lowercase letter first; lowercase letters, digits, hyphens; at most 25; not 'default')"]),
    ("reserved queue name", _with("  - name: gpu\n", "  - name: default\n"),
     ["5:11: queues[0].name: 'default' is not a valid queue name "
      "(lowercase letter first; lowercase letters, digits, hyphens; at most 25; not 'default')"]),
    ("head node architecture", _extra("head_node:\n  instance_type: c7g.2xlarge\n"),
     ["11:18: head_node.instance_type: c7g.2xlarge is arm64, the compute nodes are x86_64 "
      "(ParallelCluster needs one architecture for head and compute nodes)"]),
    ("kms on scratch",
     _extra("storage:\n  fsx_lustre:\n    new:\n      deployment_type: SCRATCH_2\n"
            "      kms_key_arn: arn:aws:kms:us-east-1:123456789012:key/12345678-1234-1234-1234-123456789012\n"),
     ["14:20: storage.fsx_lustre.new.kms_key_arn: SCRATCH_2 cannot use a customer-managed KMS key "
      "(scratch file systems are encrypted with an AWS-managed key; use PERSISTENT_2)"]),
    ("subnet too small", _extra("network:\n  new:\n    compute_subnet_mask: 26\n").replace("max: 2", "max: 4"),
     ["12:26: network.new.compute_subnet_mask: compute subnet has 59 usable addresses but max nodes need 129 "
      "(EFA takes one address per interface; use a /24 or fewer max nodes)"]),
    ("new and existing network",
     _extra("network:\n  new: {}\n  existing:\n    vpc_id: vpc-12345678\n    head_node_subnet_id: subnet-12345678\n"
            "    compute_subnet_id: subnet-12345678\n"),
     ["13:5: network.existing: give either network.new or network.existing, not both"]),
    ("spot with reservation",
     _with("  - name: gpu\n", "  - name: gpu\n    capacity_type: spot\n")
     .replace("        max: 2\n", "        max: 2\n        capacity_reservation_id: cr-0123456789abcdef0\n"),
     ["11:34: queues[0].compute_resources[0].capacity_reservation_id: spot capacity cannot use a capacity reservation "
      "(use capacity_type: ondemand or capacity_block)"]),
    ("duplicate key", _extra("region: us-west-2\n"),
     ["10:1: region: key given twice (remove one)"]),
    ("log retention", _extra("monitoring:\n  log_retention_days: 10\n"),
     ["11:23: monitoring.log_retention_days: 10 is not a retention ParallelCluster accepts (nearest allowed: 7)"]),
    ("invalid yaml", "name: t\nqueues: [\n",
     ["3:1: not valid YAML: expected the node content, but found '<stream end>'"]),
    ("image store outside mount", _extra("storage:\n  fsx_lustre:\n    image_store: /data/containers\n"),
     ["12:18: storage.fsx_lustre.image_store: '/data/containers' is not inside mount_dir /fsx (e.g. /fsx/containers)"]),
    ("notify_email not an address", _extra("lifecycle:\n  notify_email: ops-at-example.com\n"),
     ["11:17: lifecycle.notify_email: 'ops-at-example.com' is not an email address (" + EMAIL_HINT + ")"]),
    ("notify_email two addresses", _extra("lifecycle:\n  notify_email: a@example.com, b@example.com\n"),
     ["11:17: lifecycle.notify_email: 'a@example.com, b@example.com' is not an email address (" + EMAIL_HINT + ")"]),
    ("notify_email header injection", _extra('lifecycle:\n  notify_email: "ops@example.com\\nBcc: x@example.com"\n'),
     ["11:17: lifecycle.notify_email: 'ops@example.com\\nBcc: x@example.com' contains a control or invisible "
      "character (" + EMAIL_HINT + ")"]),
    ("notify_email terminal escape", _extra('lifecycle:\n  notify_email: "ops@example.com\\e[2J"\n'),
     ["11:17: lifecycle.notify_email: 'ops@example.com\\x1b[2J' contains a control or invisible character ("
      + EMAIL_HINT + ")"]),
    ("notify_email too long", _extra("lifecycle:\n  notify_email: " + "a" * 65 + "@example.com\n"),
     ["11:17: lifecycle.notify_email: '" + "a" * 65 + "@example.com' is longer than an email address may be "
      "(64 before the @, 254 in all) (" + EMAIL_HINT + ")"]),
    # Values reach files, shells and AWS APIs: the nodes' own contract (clusterkit_node/contract/settings.py) decides.
    ('image_store with ..',
     _extra("storage:\n  fsx_lustre:\n    image_store: /fsx/../etc/containers\n"),
     ["12:18: storage.fsx_lustre.image_store: '/fsx/../etc/containers' has a '..' part, which climbs out of the "
      "directory before it (write the directory it means without . or .. parts, inside mount_dir, e.g. "
      "/fsx/containers)"]),
    ('image_store with a space', _extra('storage:\n  fsx_lustre:\n    image_store: "/fsx/my containers"\n'),
     ["12:18: storage.fsx_lustre.image_store: '/fsx/my containers' is refused by the nodes' check of CK_STORE "
      "(an absolute path whose parts are letters, digits, . _ - and do not start with a dot, e.g. /fsx/containers)"]),
    ('image_store with shell metacharacters', _extra('storage:\n  fsx_lustre:\n    image_store: "/fsx/c$(id)"\n'),
     ["12:18: storage.fsx_lustre.image_store: '/fsx/c$(id)' is refused by the nodes' check of CK_STORE "
      "(an absolute path whose parts are letters, digits, . _ - and do not start with a dot, e.g. /fsx/containers)"]),
    ('image_store with an embedded newline (settings injection)',
     _extra('storage:\n  fsx_lustre:\n    image_store: "/fsx/containers\\nCK_OS=rhel8"\n'),
     ["12:18: storage.fsx_lustre.image_store: '/fsx/containers\\nCK_OS=rhel8' is refused by the nodes' check of "
      "CK_STORE (an absolute path whose parts are letters, digits, . _ - and do not start with a dot, "
      "e.g. /fsx/containers)"]),
    ('mount_dir with ..', _extra('storage:\n  fsx_lustre:\n    mount_dir: /fsx/..\n'),
     ["12:16: storage.fsx_lustre.mount_dir: '/fsx/..' has a '..' part, which climbs out of the directory before it "
      "(write the directory it means without . or .. parts, like /fsx)"]),
    ('squash_options as a YAML block scalar',
     _extra("containers:\n  enroot:\n    squash_options: |\n      -comp zstd -b 128K\n"),
     ["12:21: containers.enroot.squash_options: '-comp zstd -b 128K\\n' is not a list of mksquashfs options on one "
      "line (letters, digits, . _ = , - and spaces) (e.g. -comp zstd -Xcompression-level 3 -b 128K -no-fragments)"]),
    ('squash_options unknown compressor', _extra("containers:\n  enroot:\n    squash_options: -comp zstdd\n"),
     ["12:21: containers.enroot.squash_options: unknown compressor 'zstdd' (one of gzip, lzo, lz4, xz, zstd) "
      "(e.g. -comp zstd -Xcompression-level 3 -b 128K -no-fragments)"]),
    ('squash_options level out of range',
     _extra("containers:\n  enroot:\n    squash_options: -comp zstd -Xcompression-level 99\n"),
     ['12:21: containers.enroot.squash_options: -Xcompression-level 99 is outside 1..22 for zstd '
      '(e.g. -comp zstd -Xcompression-level 3 -b 128K -no-fragments)']),
    ('transfer_retries beyond what nodes accept', _extra("containers:\n  enroot:\n    transfer_retries: 1000\n"),
     ['12:23: containers.enroot.transfer_retries: 1000 is outside 0..999 '
      '(the nodes accept a whole number of retries, e.g. 5, up to 999)']),
    ('connect_timeout_s beyond what nodes accept', _extra("containers:\n  enroot:\n    connect_timeout_s: 100000\n"),
     ['12:24: containers.enroot.connect_timeout_s: 100000 is outside 0..99999 '
      '(the nodes accept seconds, e.g. 30, up to 99999)']),
    ('transfer_timeout_s negative', _extra("containers:\n  enroot:\n    transfer_timeout_s: -1\n"),
     ['12:25: containers.enroot.transfer_timeout_s: -1 is outside 0..999999 '
      '(the nodes accept seconds, e.g. 600 (0 = no limit), up to 999999)']),
    ('store_gc stale_days zero', _extra("containers:\n  store_gc:\n    stale_days: 0\n"),
     ['12:17: containers.store_gc.stale_days: 0 is outside 1..9999 (a cluster record not refreshed for this many '
      'days is a cluster that is gone; at least 1 (the heartbeat is hourly))']),
    ('store_gc grace_hours negative', _extra("containers:\n  store_gc:\n    grace_hours: -1\n"),
     ['12:18: containers.store_gc.grace_hours: -1 is outside 0..99999 (the head node accepts hours, e.g. 72, '
      'up to 99999)']),
    ('image name with a trailing newline',
     _extra('containers:\n  images:\n    - name: "pytorch\\n"\n      uri: nvcr.io/nvidia/pytorch:25.01-py3\n'),
     ["12:13: containers.images[0].name: 'pytorch\\n' is not a valid image name "
      "(lowercase letters, digits, '.', '_', '-'; it becomes <store>/<name>.sqsh)"]),
    ('tag value with a newline', _extra('tags:\n  team: "ml\\nops"\n'),
     ["11:9: tags.team: 'ml\\nops' contains a control character (newline, tab, ...) "
      "(write it on one line; a YAML block scalar (| or >) keeps its final newline)"]),
    # Every value in its real range (issue 25): counts as AWS counts them, maxima no AWS limit exceeds.
    ("max beyond any subnet (EFA)", _with("max: 2", "max: 100000000"),
     ["9:14: queues[0].compute_resources[0].max: 100000000 nodes need more addresses than any subnet has: each "
      "p5.48xlarge node takes 32 (one per EFA interface), and the largest subnet AWS allows (/16) has 65531 "
      "(at most 2047)"]),
    ("max beyond any subnet (no EFA)", _with("p5.48xlarge", "c6i.xlarge").replace("max: 2", "max: 70000"),
     ["9:14: queues[0].compute_resources[0].max: 70000 nodes need more addresses than any subnet has: each node "
      "takes one, and the largest subnet AWS allows (/16) has 65531 (at most 65531)"]),
    ("negative reservation count",
     _with("        max: 2\n", "        max: 2\n        reservation_instance_count: -3\n"),
     ["10:37: queues[0].compute_resources[0].reservation_instance_count: must be >= 1 (got -3) (a capacity "
      "reservation holds at least one instance (EC2 CreateCapacityReservation); leave it out when unknown)"]),
    ("capacity block larger than EC2 sells",
     _with("  - name: gpu\n", "  - name: gpu\n    capacity_type: capacity_block\n")
     .replace("        max: 2\n", "        max: 2\n        min: 2\n"
                                  "        capacity_reservation_id: cr-0123456789abcdef0\n"
                                  "        reservation_instance_count: 128\n"),
     ["13:37: queues[0].compute_resources[0].reservation_instance_count: 128 instances is more than one Capacity "
      "Block holds (EC2 sells blocks of 1, 2, 4, 8, 16, 32, 64 instances)"]),
    ("fsx capacity beyond the API", _extra("storage:\n  fsx_lustre:\n    new:\n      capacity_gib: 24000000000\n"),
     ["13:21: storage.fsx_lustre.new.capacity_gib: 24000000000 is larger than any AWS API takes (AWS reads whole "
      "numbers as 32-bit integers, at most 2147483647; real limits (service quotas) are far lower)"]),
    ("scaledown idle time beyond any integer", _extra("scheduling:\n  scaledown_idletime_minutes: 99999999999\n"),
     ["11:31: scheduling.scaledown_idletime_minutes: 99999999999 is larger than any AWS API takes (AWS reads whole "
      "numbers as 32-bit integers, at most 2147483647; real limits (service quotas) are far lower)"]),
    ("ttl_hours in e-notation YAML 1.1 reads as text", _extra("lifecycle:\n  ttl_hours: 1e308\n"),
     ["11:14: lifecycle.ttl_hours: expected a number, got string '1e308' (YAML 1.1 reads 1e308 as a string, not a "
      "number: write 1.0e+308 (a dot before the e, a sign after it))"]),
    ("ttl_hours written as YAML 1.1 wants is range-checked", _extra("lifecycle:\n  ttl_hours: 1.0e+308\n"),
     ["11:14: lifecycle.ttl_hours: 1e+308 is outside 2..2160 hours (at least 2: the clock starts at the deploy and "
      "creating the cluster may take up to an hour (ParallelCluster's custom resource timeout); unset it to keep "
      "the cluster)"]),
    ("integer in e-notation", _with("max: 2", "max: 1e3"),
     ["9:14: queues[0].compute_resources[0].max: expected an integer, got string '1e3' (YAML 1.1 reads 1e3 as a "
      "string, not a number: write the whole number in digits, e.g. 1000)"]),
    # Every path checked for what it overwrites: ParallelCluster's reserved directories and file_path pattern.
    ("mount_dir over /etc", _extra(MOUNT.format("/etc")),
     ["12:16: storage.fsx_lustre.mount_dir: '/etc' is a system directory ParallelCluster reserves: the file system "
      "would hide it (use a directory of its own, like /fsx or /mnt/fsx)"]),
    ("mount_dir over /var", _extra(MOUNT.format("/var")),
     ["12:16: storage.fsx_lustre.mount_dir: '/var' is a system directory ParallelCluster reserves: the file system "
      "would hide it (use a directory of its own, like /fsx or /mnt/fsx)"]),
    ("mount_dir over /", _extra(MOUNT.format("/")),
     ["12:16: storage.fsx_lustre.mount_dir: '/' is the root of the file system: the file system would hide it "
      "(use a directory of its own, like /fsx or /mnt/fsx)"]),
    ("mount_dir over /lib32", _extra(MOUNT.format("/lib32")),
     ["12:16: storage.fsx_lustre.mount_dir: '/lib32' is a system library directory: the file system would hide it "
      "(use a directory of its own, like /fsx or /mnt/fsx)"]),
    ("mount_dir climbing out with ..", _extra(MOUNT.format("/mnt/../usr")),
     ["12:16: storage.fsx_lustre.mount_dir: '/mnt/../usr' has a '..' part, which climbs out of the directory before "
      "it (write the directory it means without . or .. parts, like /fsx)"]),
    ("mount_dir with a . part", _extra(MOUNT.format("/fsx/./data")),
     ["12:16: storage.fsx_lustre.mount_dir: '/fsx/./data' has a '.' part (write the directory it means without . "
      "or .. parts, like /fsx)"]),
    ("mount_dir inside Slurm's installation", _extra(MOUNT.format("/opt/slurm/etc")),
     ["12:16: storage.fsx_lustre.mount_dir: '/opt/slurm/etc' is inside /opt/slurm, Slurm's installation and "
      "configuration: nothing can be mounted there (use a directory of its own, like /fsx or /mnt/fsx)"]),
    ("mount_dir inside the nodes' NVMe mount", _extra(MOUNT.format("/scratch/fsx")),
     ["12:16: storage.fsx_lustre.mount_dir: '/scratch/fsx' is inside /scratch, where ParallelCluster mounts the "
      "nodes' instance-store NVMe: nothing can be mounted there (use a directory of its own, like /fsx or "
      "/mnt/fsx)"]),
    ("mount_dir inside a kernel file system", _extra(MOUNT.format("/proc/fsx")),
     ["12:16: storage.fsx_lustre.mount_dir: '/proc/fsx' is inside /proc, a kernel file system, where no directory "
      "can be made: nothing can be mounted there (use a directory of its own, like /fsx or /mnt/fsx)"]),
    ("mount_dir with a trailing slash", _extra(MOUNT.format("/fsx/")),
     ["12:16: storage.fsx_lustre.mount_dir: '/fsx/' ends with '/' (write /fsx: ParallelCluster's MountDir pattern "
      "refuses a trailing slash)"]),
    # Identifiers and versions in ASCII: \d and int() also read Arabic-Indic digits.
    ("parallelcluster_version in Arabic-Indic digits", _extra('parallelcluster_version: "3.\u0661\u0666.1"\n'),
     ["10:26: parallelcluster_version: '3.\u0661\u0666.1' is not a version like 3.16.1 (three numbers in ASCII "
      "digits)"]),
    ("expected CUDA version in Arabic-Indic digits",
     _extra(IMAGE.format(name="a", uri="ubuntu:22.04") + '      expect:\n        cuda: "\u0661\u0662.9"\n'),
     ["15:15: containers.images[0].expect.cuda: '\u0661\u0662.9' is not a version like 12.9 or 2.29.3 (ASCII digits "
      "and dots)"]),
    ("account id in Arabic-Indic digits", _extra('account: "' + "\u0661" * 12 + '"\n'),
     ["10:10: account: '" + "\u0661" * 12 + "' is not a 12-digit account id"]),
    # YAML 1.1 merge keys are read (tests below); what they cannot merge is one line.
    ("merge key of a scalar", _with("      - name: p5\n", "      - <<: 3\n        name: p5\n"),
     ["7:13: queues[0].compute_resources[0].<<: a merge key takes a mapping or a list of mappings, got integer '3' "
      "(like <<: *defaults)"]),
]


def _errors(tmp_path, text: str) -> list[str]:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load(str(path), check_lock=False)
    prefix = f"{path}:"
    lines = info.value.lines()
    assert all(line.startswith(prefix) for line in lines), lines
    return [line[len(prefix):] for line in lines]


@pytest.mark.parametrize("email", ["ops@example.com", "first.last+gpu@mail.example.co.uk", "o'brien@example.org"])
def test_notify_email_accepts_plain_addresses(tmp_path, email):
    path = tmp_path / "t.yaml"
    path.write_text(_extra(f'lifecycle:\n  notify_email: "{email}"\n'))
    assert load(str(path), check_lock=False).spec.lifecycle.notify_email == email


def test_base_spec_is_valid(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(BASE)
    assert load(str(path), check_lock=False).spec.queues[0].compute_resources[0].max == 2


@pytest.mark.parametrize("text,expected", [c[1:] for c in CASES if c[2] is not None],
                         ids=[c[0] for c in CASES if c[2] is not None])
def test_bad_spec_reports_exact_line(tmp_path, text, expected):
    assert _errors(tmp_path, text) == expected


@pytest.mark.parametrize("uri,needle", [("nvcr.io/nvidia/pytorch", "tag"),
                                        ("nvcr.io/NVIDIA/pytorch:25.01-py3", "uppercase")])
def test_malformed_image_uri(tmp_path, uri, needle):
    (line,) = _errors(tmp_path, _extra(IMAGE.format(name="a", uri=uri)))
    assert line.startswith(f"13:12: containers.images[0].uri: malformed image reference '{uri}': ")
    assert needle in line.lower()


def test_all_problems_reported_at_once(tmp_path):
    """Rule problems in different parts of one file come out together, in file order."""
    text = (_with("max: 2", "max: 0").replace("region: us-east-1", "region: mars-1")
            + "head_node:\n  root_volume_gib: 8\n")
    paths = [line.split(": ")[1] for line in _errors(tmp_path, text)]
    assert paths == ["region", "queues[0].compute_resources[0].max", "head_node.root_volume_gib"]


def test_defaults_follow_their_neighbours(tmp_path):
    """SCRATCH_2 alone needs no throughput; a new mount_dir moves the default image store with it."""
    path = tmp_path / "t.yaml"
    path.write_text(_extra("storage:\n  fsx_lustre:\n    mount_dir: /lustre\n"
                           "    new:\n      deployment_type: SCRATCH_2\n"))
    storage = expand(load(str(path), check_lock=False)).storage
    assert storage.image_store == "/lustre/containers" and storage.image_store_fs_path == "/containers"
    assert storage.new.deployment_type == "SCRATCH_2" and storage.new.throughput_mb_per_tib is None
    assert expand(load("demo")).storage.new.throughput_mb_per_tib == 250


@pytest.mark.parametrize("data,expected", [
    (b"name: \xff\n", "t.yaml: not UTF-8 text (byte 6: invalid start byte) (a spec is plain UTF-8 YAML)"),
    (b"\x00\x01", "t.yaml:1:1: not valid YAML: unacceptable character \\x00 (a spec is plain UTF-8 text)"),
    (b"name: !foo x\nregion: us-east-1\navailability_zone: us-east-1a\nqueues: []\n",
     "t.yaml:1:7: name: cannot read value: could not determine a constructor for the tag '!foo' "
     "(write a plain value without a YAML tag)"),
])
def test_unreadable_files_are_one_line_errors(tmp_path, capsys, data, expected):
    from clusterkit.cli.main import main

    path = tmp_path / "t.yaml"
    path.write_bytes(data)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and expected in err.replace(str(tmp_path) + "/", "")


def test_cli_exit_code_and_no_traceback(tmp_path, capsys):
    from clusterkit.cli.main import main

    path = tmp_path / "t.yaml"
    path.write_text(_with("max: 2", "max: zero"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "expected an integer" in err
