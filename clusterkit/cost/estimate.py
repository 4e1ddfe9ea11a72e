"""What a cluster costs to keep and to run flat out: an hourly and a 30-day estimate from list prices.

``estimate(effective, lock)`` prices the head node, every compute resource at min nodes (idle: static
nodes only) and at max nodes (busy), the FSx for Lustre file system ClusterKit creates, the NAT
gateway of a new VPC and the S3 twin of the image store, from ``clusterkit/data/prices.json``, which
``python -m clusterkit.cost.price_build`` generates from the AWS Price List API (each section names the service
code it came from and the offer's publication date). Prices are never guessed: a missing one is named in
the report. ``refresh_ec2`` replaces instance prices with the Price List API's for one run (boto3).

Spot queues are priced at on-demand (an upper bound). Capacity blocks are paid up front when the
block is bought, so they are not in the hourly figures. Existing VPCs and file systems belong to
their owners and are not counted. A platform's network and storage are paid once, whatever the number of
clusters: a cluster on a platform carries a ``Share`` of it (clusterkit.cost.platform_cost says how it is split).
An estimate with a missing price is incomplete (``complete``), and every report says so next to its total.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterkit.cost.price_list import PRICING_REGION as PRICING_REGION
from clusterkit.cost.price_list import PriceError as PriceError
from clusterkit.cost.price_list import ec2_query, fetch, on_demand_hourly, products
from clusterkit.effective.expand import (
    EffectiveComputeResource,
    EffectiveNetwork,
    EffectiveQueue,
    EffectiveSpec,
    EffectiveStorage,
)
from clusterkit.paths import PRICES
from clusterkit.rules import advice
from clusterkit.spec.model import LoginPool
from clusterkit_node.contract.lock import ImageLock

PRICES_PATH = PRICES  # the name tests and callers use
HOURS_30_DAYS = 720
NAT_GB_ASSUMED = 0  # data through the NAT gateway is workload-dependent; its per-GB rate is printed instead
FILE_HINT = "not in prices.json: python -m clusterkit.cost.price_build --from-aws adds it, docs/cost.md"


@dataclass(frozen=True)
class PriceBook:
    """The price file, plus any instance prices refreshed from the API for this run."""

    doc: dict[str, Any]
    refreshed: dict[tuple[str, str], float] = field(default_factory=dict)  # (region, type) -> USD/h

    @property
    def hours_per_month(self) -> float:
        return float(self.doc.get("hours_per_month", 730))

    def _section(self, region: str, name: str) -> dict[str, Any] | None:
        section: dict[str, Any] | None = self.doc.get("regions", {}).get(region, {}).get(name)
        return section

    def ec2(self, region: str, instance_type: str) -> float | None:
        if (region, instance_type) in self.refreshed:
            return self.refreshed[(region, instance_type)]
        section = self._section(region, "ec2_on_demand_linux") or {}
        price: float | None = section.get("usd_per_hour", {}).get(instance_type)
        return price

    def fsx(self, region: str, key: str) -> float | None:
        price: float | None = (self._section(region, "fsx_lustre_usd_per_gb_month") or {}).get("prices", {}).get(key)
        return price

    def nat(self, region: str) -> tuple[float, float] | None:
        section = self._section(region, "nat_gateway")
        return None if section is None else (section["usd_per_hour"], section["usd_per_gb"])

    def s3(self, region: str) -> float | None:
        return (self._section(region, "s3_standard_usd_per_gb_month") or {}).get("price")

    def sources(self, region: str) -> list[str]:
        """``section: source (as of)`` for every section of ``region`` in the file."""
        sections = self.doc.get("regions", {}).get(region, {})
        return [f"{name}: {s['source']}; as of {s['as_of']}" for name, s in sorted(sections.items())]


def load_prices(path: Path = PRICES_PATH) -> PriceBook:
    try:
        return PriceBook(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise PriceError(f"{path}: cannot read the price file: {exc}") from None


@dataclass(frozen=True)
class Line:
    """One priced (or unpriceable) part of the cluster. Hourly figures are None when not priced."""

    item: str
    detail: str
    idle: float | None
    busy: float | None
    note: str = ""
    missing: str = ""  # what has no price (the report names it)


@dataclass(frozen=True)
class Share:
    """A cluster's part of its platform's cost: the platform's estimate split evenly between ``members``, the
    cluster specs that name the platform in the cluster's directory (what can be known offline)."""

    platform: Estimate
    members: tuple[str, ...]
    where: str  # the directory whose specs were counted, as shown to the user

    @property
    def fraction(self) -> float:
        return 1 / len(self.members)

    def line(self) -> Line:
        names = ", ".join(self.members)
        n = len(self.members)
        note = f"split evenly between the {n} cluster spec{'s' if n > 1 else ''} in {self.where} naming it: {names}"
        missing = f"{len(self.platform.missing)} of the platform's prices" if self.platform.missing else ""
        return Line("platform share", f"1/{n} of platform {self.platform.cluster}",
                    self.platform.idle_hourly * self.fraction, self.platform.busy_hourly * self.fraction,
                    note=note + (f"; without {missing} (below)" if missing else ""))


@dataclass(frozen=True)
class Estimate:
    cluster: str  # the cluster's name, or the platform's for a platform estimate (``kind``)
    region: str
    lines: tuple[Line, ...]
    refreshed: tuple[str, ...] = ()  # instance types priced by the Price List API in this run
    kind: str = "cluster"  # cluster | platform
    share: Share | None = None  # a cluster on a platform: its part of the platform (its line is in ``lines``)
    clusters: tuple[str, ...] = ()  # a platform: the cluster specs naming it, between which it is shared
    where: str = ""  # a platform: the directory those specs were found in

    @property
    def idle_hourly(self) -> float:
        return sum(line.idle or 0.0 for line in self.lines)

    @property
    def busy_hourly(self) -> float:
        return sum(line.busy or 0.0 for line in self.lines)

    @property
    def missing(self) -> list[str]:
        """Every price the figures lack (the platform's too, for a cluster's share of it)."""
        own = [line.missing for line in self.lines if line.missing]
        theirs = [f"platform {self.share.platform.cluster}: {m}" for m in self.share.platform.missing] \
            if self.share else []
        return own + theirs

    @property
    def complete(self) -> bool:
        """False when any price is missing: the totals are then a lower bound, never the cost."""
        return not self.missing

    @property
    def idle_30_days(self) -> float:
        return self.idle_hourly * HOURS_30_DAYS

    @property
    def busy_30_days(self) -> float:
        return self.busy_hourly * HOURS_30_DAYS


def instance_types(spec: EffectiveSpec) -> list[str]:
    """Every instance type the estimate needs a price for, sorted."""
    types = {spec.head_node.instance_type}
    types |= {cr.instance_type for q in spec.queues for cr in q.compute_resources
              if q.capacity_type != "capacity_block"}
    types |= {pool.instance_type for pool in spec.login_nodes}
    return sorted(types)


def estimate(spec: EffectiveSpec, lock: ImageLock | None = None, prices: PriceBook | None = None,
             share: Share | None = None) -> Estimate:
    """The cost lines of ``spec`` in its region (``lock`` gives image sizes for the S3 store). A cluster on a
    platform prices its nodes, plus ``share`` of the platform when given (the platform's parts are not its own)."""
    book = prices or load_prices()
    region = spec.region
    lines: list[Line | None] = [_head(spec, book)]
    lines += [_compute(q, cr, region, book) for q in spec.queues for cr in q.compute_resources]
    lines += [_login(pool, region, book) for pool in spec.login_nodes]
    if spec.platform is None:
        lines += shared_parts(region, spec.network, spec.storage, store_size(spec, lock), book)
    elif share is not None:
        lines.append(share.line())
    refreshed = tuple(sorted(t for (r, t) in book.refreshed if r == region))
    return Estimate(spec.name, region, tuple(line for line in lines if line is not None), refreshed,
                    share=share if spec.platform is not None else None)


def shared_parts(region: str, network: EffectiveNetwork, storage: EffectiveStorage, store: StoreSize | None,
                 book: PriceBook) -> list[Line | None]:
    """What a standalone cluster's own stacks, or a platform's, create besides nodes: the file system, the NAT
    gateway and flow logs of a new VPC, the image store's bucket."""
    return [_fsx(region, storage, book), _nat(region, network, book), _flow_logs(network),
            _s3(region, storage, store, book)]


def _no_price(what: str, region: str, hint: str) -> str:
    return f"no price for {what} in {region} ({hint})"


def _head(spec: EffectiveSpec, book: PriceBook) -> Line:
    itype = spec.head_node.instance_type
    price = book.ec2(spec.region, itype)
    if price is None:
        return Line("head node", itype, None, None, missing=_no_price(itype, spec.region, "run --refresh"))
    return Line("head node", itype, price, price)


def _compute(queue: EffectiveQueue, cr: EffectiveComputeResource, region: str, book: PriceBook) -> Line:
    capacity_type = queue.capacity_type
    item = f"queue {queue.name}/{cr.name}"
    detail = f"{cr.instance_type} x {cr.min}..{cr.max} ({capacity_type})"
    if capacity_type == "capacity_block":
        return Line(item, detail, None, None, note="capacity block: billed at reservation purchase, not included")
    price = book.ec2(region, cr.instance_type)
    if price is None:
        return Line(item, detail, None, None, missing=_no_price(cr.instance_type, region, "run --refresh"))
    note = "spot: on-demand price shown as the upper bound" if capacity_type == "spot" else ""
    return Line(item, detail, cr.min * price, cr.max * price, note=note)


def _login(pool: LoginPool, region: str, book: PriceBook) -> Line:
    """A login pool runs ``count`` on-demand nodes all the time (an Auto Scaling group of fixed size), idle or busy;
    its load balancer is not priced."""
    item, detail = f"login pool {pool.name}", f"{pool.instance_type} x {pool.count}"
    price = book.ec2(region, pool.instance_type)
    if price is None:
        return Line(item, detail, None, None, missing=_no_price(pool.instance_type, region, "run --refresh"))
    return Line(item, detail, pool.count * price, pool.count * price, note="load balancer not included")


def fsx_price_key(deployment_type: str, throughput: int | None) -> str:
    """``PERSISTENT_2/250`` (per-unit throughput tiers) or ``SCRATCH_2`` (no tier)."""
    return (deployment_type if deployment_type == "SCRATCH_2" or throughput is None
            else f"{deployment_type}/{throughput}")


def _fsx(region: str, storage: EffectiveStorage, book: PriceBook) -> Line:
    new = storage.new
    if new is None:
        return Line("FSx for Lustre", "existing file system", None, None, note="owned elsewhere, not included")
    key = fsx_price_key(new.deployment_type, new.throughput_mb_per_tib)
    tier = f" {new.throughput_mb_per_tib} MB/s/TiB" if "/" in key else ""
    detail = f"{new.capacity_gib} GiB {new.deployment_type}{tier}"
    rate = book.fsx(region, key)
    if rate is None:
        return Line("FSx for Lustre", detail, None, None,
                    missing=_no_price(f"FSx {new.deployment_type}{tier}", region, FILE_HINT))
    hourly = new.capacity_gib * rate / book.hours_per_month
    return Line("FSx for Lustre", detail, hourly, hourly, note=f"SSD: ${rate:g} per GB-month")


def _nat(region: str, network: EffectiveNetwork, book: PriceBook) -> Line | None:
    vpc = network.new
    if vpc is None:
        return None  # an existing VPC's egress belongs to its owner
    note = "interface endpoints: not priced" if vpc.interface_endpoints else ""
    rates = book.nat(region)
    if rates is None:
        return Line("NAT gateway", "1 gateway", None, None, note=note,
                    missing=_no_price("the NAT gateway", region, FILE_HINT))
    hourly, per_gb = rates
    hourly_total = hourly + NAT_GB_ASSUMED * per_gb / book.hours_per_month
    extra = f"+${per_gb:g} per GB processed, {NAT_GB_ASSUMED} GB assumed"
    return Line("NAT gateway", "1 gateway", hourly_total, hourly_total, note=f"{extra}; {note}" if note else extra)


def _flow_logs(network: EffectiveNetwork) -> Line | None:
    """A new VPC sends its flow logs to CloudWatch Logs (stacks/network.py): billed per GB ingested and stored,
    which depends on the traffic, like data transfer, so it is named but not in the totals."""
    vpc = network.new
    if vpc is None:
        return None
    return Line("VPC flow logs", f"CloudWatch Logs, kept {vpc.flow_logs_retention_days} days", None, None,
                note="billed per GB ingested and stored, which depends on traffic: not estimated")


@dataclass(frozen=True)
class StoreSize:
    """The .sqsh bytes the image store's bucket holds, and how many of the images' sizes were assumed."""

    gib: float
    images: int
    assumed: int


def store_size(spec: EffectiveSpec, lock: ImageLock | None) -> StoreSize:
    """One cluster's images in the store (``advice``'s sizes: the lock's, else the assumed default)."""
    sizes = advice.image_sizes(spec, lock)
    return StoreSize(advice.sqsh_bytes(spec, sizes) / advice.GIB, len(sizes), sum(s.assumed for s in sizes))


def _s3(region: str, storage: EffectiveStorage, store: StoreSize | None, book: PriceBook) -> Line | None:
    new = storage.new
    if new is None or not new.image_store_bucket or store is None:
        return None
    gib = store.gib
    detail = f"{gib:.1f} GiB of .sqsh" + (
        f" ({store.assumed} of {store.images} assumed {advice.DEFAULT_IMAGE_GIB} GiB)" if store.assumed else "")
    rate = book.s3(region)
    if rate is None:
        return Line("S3 image store", detail, None, None, missing=_no_price("S3 Standard", region, FILE_HINT))
    hourly = gib * rate / book.hours_per_month
    return Line("S3 image store", detail, hourly, hourly, note=f"${rate:g} per GB-month")


# -- the Price List API -------------------------------------------------------------------------------

def refresh_ec2(book: PriceBook, region: str, types: list[str], client: Any = None) -> tuple[PriceBook, list[str]]:
    """``book`` with current on-demand prices for ``types`` in ``region``; also the types the API lacked.

    The question is the price builder's (``price_list.ec2_query``, paged with NextToken)."""
    if client is None:
        import boto3

        client = boto3.client("pricing", region_name=PRICING_REGION)
    refreshed = dict(book.refreshed)
    unknown = []
    for itype in types:
        query = ec2_query(region, itype)
        answer = fetch(client, query, "(check AWS credentials, or drop --refresh)")
        price = on_demand_hourly(query, products(query, answer))
        if price is None:
            unknown.append(itype)
        else:
            refreshed[(region, itype)] = price
    return dataclasses.replace(book, refreshed=refreshed), unknown


# -- reports ------------------------------------------------------------------------------------------

def money(value: float) -> str:
    return f"${value:,.2f}"


def hourly(value: float) -> str:
    return f"${value:,.4f}/h"


def incomplete(est: Estimate) -> str:
    """``incomplete: N prices missing`` (empty when complete): said next to every total, so a lower bound never
    reads as the cost."""
    n = len(est.missing)
    return "" if est.complete else f"incomplete: {n} price{'s' if n != 1 else ''} missing"


def brief(missing: str) -> str:
    """A missing price without its hint: ``g5.12xlarge in us-west-2``."""
    return re.sub(r" \([^()]*\)$", "", missing).replace("no price for ", "", 1)


def report(est: Estimate, book: PriceBook, unknown: Sequence[str] = ()) -> list[str]:
    """The ``clusterkit cost`` text: one line per item, the totals, what is missing, where prices came from."""
    what = "platform " if est.kind == "platform" else ""
    scope = ("idle = min nodes, busy = max nodes" if est.kind == "cluster"
             else "what the platform's stacks create, whatever its clusters run")
    lines = [f"{what}{est.cluster} ({est.region}): list prices in USD; {scope}"]
    for line in est.lines:
        if line.missing:
            figure = "no price (below)"
        elif line.idle is None or line.busy is None:  # both or neither (Line)
            figure = "-"
        elif line.idle == line.busy:
            figure = hourly(line.idle)
        else:
            figure = f"{hourly(line.idle)} .. {hourly(line.busy)}"
        note = f"  [{line.note}]" if line.note else ""
        lines.append(f"  {line.item:<18} {line.detail:<42} {figure}{note}")
    gap = incomplete(est)
    label = "total" if est.complete else "total (incomplete)"
    if est.kind == "platform" and est.idle_hourly == est.busy_hourly:  # no nodes: one figure
        lines.append(f"  {label:<18} {hourly(est.idle_hourly)} = {money(est.idle_30_days)} per 30 days")
    else:
        lines.append(f"  {label:<18} idle {hourly(est.idle_hourly)} = {money(est.idle_30_days)} per 30 days; "
                     f"busy {hourly(est.busy_hourly)} = {money(est.busy_30_days)} per 30 days")
    if gap:
        lines.append(f"  {gap}: the totals are a lower bound, without:")
        lines += [f"    {m}" for m in est.missing]
    if est.kind == "platform":
        lines.append(platform_split(est))
    if est.share is not None:
        platform = est.share.platform
        lines.append(f"  platform {platform.cluster} in all: {hourly(platform.idle_hourly)} = "
                     f"{money(platform.idle_30_days)} per 30 days" + (f" ({incomplete(platform)})"
                                                                      if not platform.complete else "")
                     + f"; its parts: clusterkit cost {platform.cluster}")
    lines.append("  never included: EBS volumes, data transfer, CloudWatch, capacity block fees")
    if est.refreshed:
        lines.append(f"  from the AWS Price List API now: {', '.join(est.refreshed)}")
    for itype in unknown:
        lines.append(f"  the AWS Price List API has no on-demand Linux price for {itype} in {est.region}")
    file_priced = [t for t in instance_types_of(est) if t not in est.refreshed]
    priced = ("instance prices " + ", ".join(file_priced) + " and " if file_priced else "") + "every other price"
    lines.append(f"  from {PRICES_PATH.name} ({priced}):")
    lines += [f"    {s}" for s in book.sources(est.region)] or ["    (no section for this region)"]
    return lines


def platform_split(est: Estimate) -> str:
    """How a platform's cost is shared, in one line."""
    n = len(est.clusters)
    if not n:
        return f"  shared by: no cluster spec in {est.where} names it yet (its clusters' images fill the store)"
    names = ", ".join(est.clusters)
    return (f"  shared by the {n} cluster spec{'s' if n > 1 else ''} in {est.where} naming it ({names}), split evenly: "
            f"{hourly(est.idle_hourly / n)} each")


def instance_types_of(est: Estimate) -> list[str]:
    found = []
    for line in est.lines:
        if line.item == "head node":
            found.append(line.detail)
        elif (line.item.startswith("queue ") and "capacity_block" not in line.detail) or line.item.startswith(
                "login pool "):
            found.append(line.detail.split(" ", 1)[0])
    return sorted(set(found))


def one_line(est: Estimate, *, whole: str) -> str:
    """The estimate in one line (``make synth``); ``whole``: the command that prints all of it."""
    missing = f"; {incomplete(est)}" if not est.complete else ""
    if est.kind == "platform":
        n = len(est.clusters)
        return (f"cost estimate: {hourly(est.idle_hourly)} (30 days: {money(est.idle_30_days)}; list prices{missing}; "
                f"shared by {n} cluster spec{'s' if n != 1 else ''}; {whole})")
    share = f"; with 1/{len(est.share.members)} of platform {est.share.platform.cluster}" if est.share else ""
    return (f"cost estimate: {hourly(est.idle_hourly)} idle, {hourly(est.busy_hourly)} with all max nodes "
            f"(30 days: {money(est.idle_30_days)} .. {money(est.busy_30_days)}; list prices{share}{missing}; "
            f"{whole})")
