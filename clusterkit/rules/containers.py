"""Container rules: pyxis options the AMIs' pyxis knows, enroot settings within what nodes accept, image names
and references, and expected versions against the compatibility rules.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

from clusterkit.effective.expand import node_profiles
from clusterkit.images.ref import ImageRefError, parse_image_ref
from clusterkit.rules import compat_rules
from clusterkit.rules.common import dotted, duplicates, parse_version
from clusterkit.rules.limits import EXPECT_VERSION, IMAGE_NAME, OLDEST_PC_PYXIS, PC_PYXIS, PYXIS_OPTION_SINCE
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks
from clusterkit_node.contract import profiles
from clusterkit_node.contract import settings as node
from clusterkit_node.contract.layout import image_name_problem


def pyxis_of(spec: ClusterSpec) -> tuple[int, ...]:
    """The pyxis every AMI of the spec's ParallelCluster release is known to ship (limits.PC_PYXIS)."""
    pc = parse_version(spec.parallelcluster_version)
    return PC_PYXIS.get(pc, OLDEST_PC_PYXIS) if pc else OLDEST_PC_PYXIS


def containers(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    c = spec.containers
    pyxis = pyxis_of(spec)
    since = PYXIS_OPTION_SINCE["use_enroot_load"]
    if c.pyxis.use_enroot_load and pyxis < since:
        yield m.problem("containers.pyxis.use_enroot_load",
                        f"needs pyxis >= {dotted(since)}, and ParallelCluster {spec.parallelcluster_version} "
                        f"AMIs are only known to ship pyxis {dotted(pyxis)}",
                        "remove it: where the node's pyxis is older the head node leaves it out (an unknown "
                        "option would stop slurmd), so it would not take effect")
    squash = node.squash_options_problem(c.enroot.squash_options)
    if squash:
        yield m.problem("containers.enroot.squash_options", squash, f"e.g. {node.DEFAULT_SQUASH_OPTIONS}")
    for key, setting in (("transfer_retries", "ENROOT_TRANSFER_RETRIES"),
                         ("connect_timeout_s", "ENROOT_CONNECT_TIMEOUT"),
                         ("transfer_timeout_s", "ENROOT_TRANSFER_TIMEOUT")):
        value, high = getattr(c.enroot, key), node.max_digits(setting)
        if not 0 <= value <= high:
            yield m.problem(f"containers.enroot.{key}", f"{value} is outside 0..{high}",
                            f"the nodes accept {node.BY_KEY[setting].hint}, up to {high}")
    gc_high = node.max_digits("CK_STORE_GC_GRACE_HOURS")
    if not 0 <= c.store_gc.grace_hours <= gc_high:
        yield m.problem("containers.store_gc.grace_hours", f"{c.store_gc.grace_hours} is outside 0..{gc_high}",
                        f"the head node accepts {node.BY_KEY['CK_STORE_GC_GRACE_HOURS'].hint}, up to {gc_high}")
    if not 1 <= c.store_gc.stale_days <= 9999:  # CK_STORE_GC_STALE_DAYS: [1-9][0-9]{0,3}
        yield m.problem("containers.store_gc.stale_days", f"{c.store_gc.stale_days} is outside 1..9999",
                        "a cluster record not refreshed for this many days is a cluster that is gone; at least 1 "
                        "(the heartbeat is hourly)")
    images = [(f"containers.images[{i}].name", img.name) for i, img in enumerate(c.images)]
    yield from duplicates(m, images, "image")
    for i, img in enumerate(c.images):
        ip = f"containers.images[{i}]"
        if img.name.endswith((".sqsh", ".json", ".lock")):
            yield m.problem(f"{ip}.name", f"'{img.name}' collides with the image store's own files",
                            "drop the .sqsh/.json/.lock ending")
        elif not IMAGE_NAME.fullmatch(img.name):
            yield m.problem(f"{ip}.name", f"{node.show(img.name)} is not a valid image name",
                            "lowercase letters, digits, '.', '_', '-'; it becomes <store>/<name>.sqsh")
        elif image_name_problem(img.name) is not None:  # the nodes' own rule (clusterkit_node/contract/layout.py)
            yield m.problem(f"{ip}.name", f"'{img.name}' collides with the image store's own files",
                            "the nodes' lock reader reserves manifest.json and names starting with manifest.json.")
        try:
            parse_image_ref(img.uri)
        except ImageRefError as exc:
            yield m.problem(f"{ip}.uri", f"malformed image reference '{img.uri}': {exc}")
        for key, value in img.expect.as_dict().items():
            if not EXPECT_VERSION.fullmatch(value):
                yield m.problem(f"{ip}.expect.{key}", f"{node.show(value)} is not a version like 12.9 or 2.29.3",
                                "ASCII digits and dots")


def nvidia_container_cli(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """containers.nvidia_container_cli: a version the nodes accept and NVIDIA did not get wrong; off only with why."""
    cli = spec.containers.nvidia_container_cli
    at = "containers.nvidia_container_cli"
    pin = node_profiles().container_cli
    if not cli.install:
        if cli.version is not None:
            yield m.problem(f"{at}.version", "a version with install: false installs nothing",
                            "remove version, or set install: true")
        if not (cli.reason or "").strip():
            yield m.problem(f"{at}.install", "install: false needs a reason: without nvidia-container-cli no image "
                            "that asks for GPUs starts on a ParallelCluster AMI",
                            "add reason: (e.g. 'our custom AMI bakes it in'), or remove install: false")
        return
    if cli.version is None:
        return
    if not re.fullmatch(profiles.CLI_VERSION_RE, cli.version):
        yield m.problem(f"{at}.version", f"{node.show(cli.version)} is not a libnvidia-container version",
                        f"e.g. {pin.version.value} (major.minor.patch), or remove it for ClusterKit's pin")
    elif pin.refused(cli.version):
        yield m.problem(f"{at}.version", str(pin.refused(cli.version)),
                        f"pin another release, e.g. {pin.version.value}")


def single_threaded_in_place(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    """containers.pyxis.single_threaded_in_place: slower jobs by choice only, with the reason written down."""
    pyxis = spec.containers.pyxis
    at = "containers.pyxis"
    if pyxis.single_threaded_in_place and not (pyxis.single_threaded_reason or "").strip():
        yield m.problem(f"{at}.single_threaded_in_place", "single-threaded in-place starts need a reason: parallel "
                        "reads run up to 4.5x slower than from an extracted image (docs/images.md)",
                        "add single_threaded_reason: (e.g. '40 GB images, jobs read under 1 GB of them'), or remove "
                        "single_threaded_in_place")
    elif pyxis.single_threaded_reason is not None and not pyxis.single_threaded_in_place:
        yield m.problem(f"{at}.single_threaded_reason", "a reason without single_threaded_in_place: true changes "
                        "nothing", "remove single_threaded_reason, or set single_threaded_in_place: true")
    if pyxis.single_threaded_in_place and not pyxis.use_squashfuse:
        yield m.problem(f"{at}.single_threaded_in_place", "use_squashfuse is false: nothing starts in place",
                        "remove single_threaded_in_place, or set use_squashfuse: true")


def compat(spec: ClusterSpec, m: Marks) -> list[Problem]:
    """Expected image versions against clusterkit/data/compat_rules.json (warnings; nodes re-check the
    versions recorded at import, with their NVIDIA driver, at boot)."""
    return compat_rules.expect_problems(spec, m)
