"""What a platform costs, and a cluster's share of it.

A platform's stacks create what a standalone cluster's own stacks would: the FSx for Lustre file system, the NAT
gateway and flow logs of a new VPC, the image store's bucket (``estimate.shared_parts`` prices both alike). They
are paid once, however many clusters run on the platform, so a cluster's estimate carries a ``Share``: the
platform's total split evenly between the cluster specs that name the platform in the cluster's directory, the
set ``validate`` checks the platform against offline (``pipeline.platform.members``). Even, not by use: the
capacity, the gateway and the bucket are provisioned for all of them, and nothing offline says who uses what.
The bucket holds each distinct image once (``advice.shared_store``).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusterkit.cost.estimate import Estimate, PriceBook, Share, StoreSize, shared_parts
from clusterkit.effective.expand import EffectivePlatform, EffectiveSpec, expand_platform, expand_spec
from clusterkit.images.lock_file import parse_lock_text
from clusterkit.pipeline.loader import Loaded
from clusterkit.pipeline.platform import load_platform, merged
from clusterkit.rules import advice
from clusterkit.spec.errors import SpecError
from clusterkit.spec.files import display, platform_path
from clusterkit.spec.model import parse_platform, parse_spec
from clusterkit_node.contract.lock import ImageLock


def platform_estimate(platform: EffectivePlatform, clusters: Sequence[tuple[EffectiveSpec, ImageLock | None]],
                      book: PriceBook, *, where: str = "") -> Estimate:
    """The platform's own lines; ``clusters`` (effective specs with the platform merged in, and their locks)
    fill the image store, and are the ones its cost is shared between."""
    store = advice.shared_store(clusters)
    size = StoreSize(sum(store.sqsh.values()) / advice.GIB, len(store.sqsh), store.assumed)
    lines = shared_parts(platform.region, platform.network, platform.storage, size, book)
    return Estimate(platform.name, platform.region, tuple(line for line in lines if line is not None),
                    kind="platform", clusters=tuple(spec.name for spec, _ in clusters), where=where)


def _where(spec_dir: Path) -> str:
    return display(spec_dir).rstrip("/") + "/"


def load_estimate(path: Path, book: PriceBook) -> Estimate:
    """The platform file at ``path`` priced with the specs beside it that name it; ``SpecError`` with its errors."""
    loaded, problems = load_platform(path)
    errors = [p for p in problems if p.level == "error"]
    if errors:
        raise SpecError(errors)
    clusters = [(expand_spec(merged(m.spec, loaded.spec)), m.lock) for m in loaded.members]
    return platform_estimate(expand_platform(loaded.spec), clusters, book, where=_where(path.parent.parent))


def share_of(loaded: Loaded, book: PriceBook) -> Share | None:
    """The share of its platform a loaded cluster carries; None for a cluster with its own network and storage."""
    if loaded.spec.platform is None:
        return None
    platform = load_estimate(platform_path(loaded.source.path, loaded.spec.platform), book)
    members = platform.clusters if loaded.spec.name in platform.clusters else (*platform.clusters, loaded.spec.name)
    return Share(platform, tuple(sorted(members)), platform.where)


def from_texts(platform_text: str, clusters: Sequence[tuple[str | None, str | None]], book: PriceBook,
               *, where: str) -> Estimate | None:
    """A committed platform file priced with its clusters' committed spec and lock texts (``clusterkit diff``
    prices both sides this way); None when the platform file does not parse. A cluster spec that does not parse
    fills no store; a lock that does not parse gives no sizes."""
    platform, _, problems = parse_platform(platform_text, where)
    if platform is None or any(p.level == "error" for p in problems):
        return None
    found: list[tuple[EffectiveSpec, ImageLock | None]] = []
    for spec_text, lock_text in clusters:
        spec, _, spec_problems = parse_spec(spec_text or "", where)
        if spec is None or any(p.level == "error" for p in spec_problems):
            continue
        lock, broken = parse_lock_text(lock_text, where) if lock_text is not None else (None, [])
        found.append((expand_spec(merged(spec, platform)), None if broken else lock))
    return platform_estimate(expand_platform(platform), found, book)
