"""Text and markdown forms of a ``clusterkit diff`` report.

Text is for a terminal (ANSI colour only on a TTY without NO_COLOR, or with ``--color always``);
markdown is the pull-request comment. Both list the most disruptive update impact first and shorten
64-hex hashes to 12 characters: the full values are one click away in the rendered file's git diff.
"""
from __future__ import annotations

import os
import re
from typing import Any, TextIO

from clusterkit.diff.gate import levels
from clusterkit.diff.impact import (
    FLEET,
    HEAD_NODE,
    LIVE,
    QUEUE,
    RECREATE,
    UNKNOWN,
    VERSION_LABEL,
    VERSION_REASON,
    Assessed,
)
from clusterkit.diff.platforms import BLOCKED_LABEL, HOW_TO, PlatformDiff
from clusterkit.diff.report import ClusterDiff, CostDelta, ImageChange, Report
from clusterkit.diff.sources import PLATFORM, file_path
from clusterkit.diff.structure import MISSING, Change
from clusterkit.images.ref import ImageRef, ImageRefError, parse_image_ref
from clusterkit_node.image import nvidia_hook

MARKER = "<!-- clusterkit-diff -->"  # lets the PR workflow find and update its own comment
MARKDOWN_LIMIT = 60_000  # GitHub rejects comments over 65,536 characters
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ANSI = {RECREATE: "1;31", HEAD_NODE: "1;35", FLEET: "1;33", QUEUE: "36", LIVE: "32", UNKNOWN: "2"}
_EMOJI = {RECREATE: "🔴", HEAD_NODE: "🟠", FLEET: "🟠", QUEUE: "🟡", LIVE: "🟢", UNKNOWN: "⚪"}
_LIMIT = 90


def use_color(choice: str, stream: TextIO) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def short(text: str) -> str:
    return _HEX64.sub(lambda m: m.group(0)[:12] + "…", text)


def show(value: Any) -> str:
    """One line for a value: YAML flow style for mappings and lists, hashes shortened, long text cut."""
    if value is MISSING:
        return ""
    text = short(_flow(value))
    return text if len(text) <= _LIMIT else text[: _LIMIT - 1] + "…"


def _flow(value: Any) -> str:
    """YAML-like flow text without YAML's quoting: for reading, not for parsing back."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, inner),) = value.items()
            return f"{key}: {_flow(inner)}"
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def before_after(change: Change) -> tuple[str, str]:
    """Both sides of a change as text; "" for a side that has nothing. A list shows only the elements
    that differ, so one changed Arg does not repeat the other thirteen."""
    old, new = change.old, change.new
    if isinstance(old, list) and isinstance(new, list):
        gone = [v for v in old if v not in new]
        came = [v for v in new if v not in old]
        if gone or came:
            return ", ".join(show(v) for v in gone), ", ".join(show(v) for v in came)
    return show(old), show(new)


def _arrow(before: str, after: str) -> str:
    if before and after:
        return f"{before} → {after}"
    return f"+ {after}" if after else f"− {before}"


def _versions(image: ImageChange) -> str:
    """The versions the lock records (``expect``), with their changes for a re-pinned image."""
    old = (image.old or {}).get("expect") or {}
    new = (image.new or {}).get("expect") or {}
    if image.kind != "changed":
        return ", ".join(f"{k} {v}" for k, v in (old or new).items())
    parts = []
    for key in list(old) + [k for k in new if k not in old]:
        a, b = old.get(key), new.get(key)
        parts.append(f"{key} {a}" if a == b else f"{key} {_arrow(a or '', b or '')}")
    return ", ".join(parts)


def _source_change(old: str, new: str) -> str:
    """A tag change as just the tags when the repository stays; else both sources."""
    a: ImageRef | None
    b: ImageRef | None
    try:
        a, b = parse_image_ref(old), parse_image_ref(new)
    except ImageRefError:
        a = b = None
    if a and b and (a.registry, a.repository) == (b.registry, b.repository) and a.tag != b.tag:
        return f"tag {_arrow(a.tag or '', b.tag or '')}"
    return f"source {_arrow(short(old), short(new))}"


def _size(entry: dict[str, Any] | None) -> str:
    size = (entry or {}).get("compressed_size")
    return f"{size / 1e9:.2f} GB" if isinstance(size, int) else ""


def _image_details(image: ImageChange) -> list[str]:
    """What changed about one image besides its digest, as short phrases."""
    old, new = image.old or {}, image.new or {}
    details = []
    if image.kind != "changed":
        details.append(f"source {short((image.new or image.old or {}).get('source', ''))}")
    elif "source" in image.fields:
        details.append(_source_change(old.get("source", ""), new.get("source", "")))
    if "platform" in image.fields:
        details.append("platform " + _arrow(old.get("platform", ""), new.get("platform", "")))
    if "compressed_size" in image.fields and (_size(old) or _size(new)):
        details.append("size " + _arrow(_size(old), _size(new)))
    hook = _hook_change(image)
    if hook:
        details.append(hook)
    return details


def _hook_plan(entry: dict[str, Any]) -> str:
    """What enroot's NVIDIA hook will do with the lock entry's NVIDIA_* settings ('' when the lock did not read
    them)."""
    read_from = entry.get("nvidia_from") or ""
    if not read_from or read_from.startswith("not read") or not isinstance(entry.get("nvidia"), dict):
        return ""
    return nvidia_hook.plan({str(k): str(v) for k, v in entry["nvidia"].items()}).summary()


def _hook_change(image: ImageChange) -> str:
    """One phrase when a re-pin changes what the hook will do (both sides' settings read, by the lock)."""
    if image.kind != "changed" or "nvidia" not in image.fields:
        return ""
    before, after = _hook_plan(image.old or {}), _hook_plan(image.new or {})
    if not before or not after or before == after:
        return ""
    return f"NVIDIA hook: {before} → {after}"


def _digest(entry: dict[str, Any] | None) -> str:
    return short(entry.get("digest", "")) if entry else ""


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _signed(value: float) -> str:
    if abs(value) < 0.005:
        return "±$0.00"
    return ("+" if value > 0 else "−") + _money(abs(value))


def cost_lines(cost: CostDelta | str | None) -> list[str]:
    """The cost estimate of both sides (list prices, USD per hour): idle = min nodes, busy = max nodes."""
    if cost is None:
        return []
    if isinstance(cost, str):
        return [cost]
    old, new = cost.old, cost.new
    if old is None and new is not None:
        lines = [f"new cluster: idle {_money(new.idle_hourly)}/h, all max nodes {_money(new.busy_hourly)}/h "
                 f"({_money(new.busy_hourly * cost.hours_30_days)} per 30 days flat out)"]
    elif new is None and old is not None:
        lines = [f"cluster removed: was idle {_money(old.idle_hourly)}/h, all max nodes {_money(old.busy_hourly)}/h"]
    elif old is not None and new is not None:
        idle, busy = cost.delta("idle_hourly"), cost.delta("busy_hourly")
        idle_text = (f"idle {_money(old.idle_hourly)}/h → {_money(new.idle_hourly)}/h ({_signed(idle)}/h)"
                     if abs(idle) >= 0.005 else f"idle {_money(new.idle_hourly)}/h (unchanged)")
        pct = f", {busy / old.busy_hourly * 100:+.1f}%".replace("-", "−") if old.busy_hourly else ""
        busy_text = (f"all max nodes {_money(old.busy_hourly)}/h → {_money(new.busy_hourly)}/h "
                     f"({_signed(busy)}/h{pct}, {_signed(busy * cost.hours_30_days)} per 30 days)"
                     if abs(busy) >= 0.005 else f"all max nodes {_money(new.busy_hourly)}/h (unchanged)")
        lines = [f"{idle_text}; {busy_text}"]
    else:
        return []
    unpriced = _unpriced(old.missing if old else (), new.missing if new else ())
    return lines + ([f"not in the figures: {unpriced}"] if unpriced else [])


def platform_cost_lines(cost: CostDelta | str | None) -> list[str]:
    """A platform's own cost (list prices, USD per hour; no nodes, so one figure a side), paid once by its clusters."""
    if not isinstance(cost, CostDelta):
        return [cost] if cost else []
    old, new = cost.old, cost.new
    if old is None or new is None:
        side = new or old
        if side is None:
            return []
        what = "new platform" if old is None else "platform removed: was"
        lines = [f"{what} {_money(side.busy_hourly)}/h ({_money(side.busy_hourly * cost.hours_30_days)} per 30 days)"]
    else:
        change = cost.delta("busy_hourly")
        lines = [f"{_money(old.busy_hourly)}/h → {_money(new.busy_hourly)}/h ({_signed(change)}/h, "
                 f"{_signed(change * cost.hours_30_days)} per 30 days), shared by the clusters on it"
                 if abs(change) >= 0.005 else f"{_money(new.busy_hourly)}/h (unchanged"
                 + (" in the priced parts)" if old.missing or new.missing else ")")]
    unpriced = _unpriced(old.missing if old else (), new.missing if new else ())
    return lines + ([f"not in the figures: {unpriced}"] if unpriced else [])


def _unpriced(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    def brief(text: str) -> str:
        return re.sub(r" \([^()]*\)$", "", text)  # the price file's hint is for `clusterkit cost`

    both = [m for m in old if m in new]
    parts = [f"{brief(m)} (both)" for m in both]
    parts += [f"{brief(m)} (base)" for m in old if m not in both]
    parts += [f"{brief(m)} (working tree)" for m in new if m not in both]
    return "; ".join(parts)


def _cost_cell(cost: CostDelta | str | None) -> str:
    if not isinstance(cost, CostDelta):
        return "unavailable" if isinstance(cost, str) else ""
    if cost.old is None and cost.new is not None:
        return f"new: {_money(cost.new.busy_hourly)}/h at max nodes"
    if cost.new is None:
        return "removed"
    return f"idle {_signed(cost.delta('idle_hourly'))}/h, max nodes {_signed(cost.delta('busy_hourly'))}/h"


def _worst(cluster: ClusterDiff) -> Assessed | None:
    """The most disruptive impact; on a tie the spec's (update_cluster checks the version before the config)."""
    found = [*cluster.spec_impacts[:1], *cluster.platform_impacts[:1], *cluster.rendered[:1]]
    return min(found, key=lambda a: a.impact.rank) if found else None


def _why(item: Assessed) -> str:
    """Why a spec value outside the rendered config has its impact (the version's reason, the file system's)."""
    return VERSION_REASON if item.impact.label == VERSION_LABEL else item.impact.policy


def _platform_status(platform: PlatformDiff) -> str:
    return {"added": "new platform", "removed": "removed", "changed": "changed",
            "unchanged": "no effective change (comments, layout or defaults written out)"}[platform.status]


def _members(platform: PlatformDiff, level_of: dict[str, str | None], code: bool = False) -> str:
    """The clusters on a platform with their levels: ``train-a (recreate), train-b (recreate)``."""
    if not platform.members:
        return "none"
    parts = []
    for m in platform.members:
        name = f"`{m.name}`" if code else m.name
        where = "" if m.sides == "both" else f", {'was' if m.sides == 'base' else 'now'} on it"
        parts.append(f"{name} ({level_of.get(m.name) or 'unchanged'}{where})")
    return ", ".join(parts)


def _status(cluster: ClusterDiff) -> str:
    return {"added": "new cluster", "removed": "removed", "changed": "changed"}[cluster.status]


def _unchanged(report: Report, code: bool = False) -> list[str]:
    """Unchanged clusters, noting those whose files changed only in comments or layout."""
    return [(f"`{c.name}`" if code else c.name) + (" (comments or layout only)" if c.text_only else "")
            for c in report.clusters if not c.changed]


# -- text -------------------------------------------------------------------------------------------------


class _Paint:
    def __init__(self, on: bool):
        self.on = on

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.on and text else text


def render_text(report: Report, color: bool = False) -> str:
    paint = _Paint(color)
    lines = [f"{paint('clusterkit diff', '1')}: base {report.base} ({report.base_sha[:12]}) → {report.head}"]
    lines += [f"note: {note}" for note in report.notes]
    changed = [c for c in report.clusters if c.changed]
    unchanged = _unchanged(report)
    lines += _text_platforms(report, paint)
    if not changed:
        lines += [""] if report.platforms else []
        lines.append("no cluster config changes" + (f" (unchanged: {', '.join(unchanged)})" if unchanged else ""))
        return "\n".join(lines) + "\n"
    for cluster in changed:
        lines.append("")
        head = f"{paint(cluster.name, '1')}: {_status(cluster)}"
        worst = _worst(cluster)
        if worst is not None:
            head += " — most disruptive: " + paint(worst.impact.label, _ANSI[worst.impact.rank])
        lines.append(head)
        lines += [f"  note: {note}" for note in cluster.notes]
        lines += [f"  cost: {line}" if n == 0 else f"        {line}" for n, line in enumerate(cost_lines(cluster.cost))]
        lines += _text_spec_impacts(cluster, paint)
        lines += _text_platform_impacts(cluster, paint)
        lines += _text_rendered(cluster, paint)
        lines += _text_images(cluster)
        for title, kind, changes in (("image lock", "lock", cluster.lock), ("spec", "spec", cluster.spec)):
            if changes:
                lines.append(f"  {title} ({file_path(cluster.name, kind)}):")
                lines += [f"    {c.dotted}: {_arrow(*before_after(c))}" for c in changes]
    if unchanged:
        lines += ["", f"unchanged: {', '.join(unchanged)}"]
    return "\n".join(lines) + "\n"


def _text_spec_impacts(cluster: ClusterDiff, paint: _Paint) -> list[str]:
    if not cluster.spec_impacts:
        return []
    lines = [f"  update impact of spec values outside the ParallelCluster config ({file_path(cluster.name, 'spec')}):"]
    for item in cluster.spec_impacts:
        lines.append("    " + paint(item.impact.label, _ANSI[item.impact.rank]))
        lines.append(f"      {item.change.dotted}: {_arrow(*before_after(item.change))}")
        lines += [f"      {_why(item)}"] if _why(item) else []
    return lines


def _text_platforms(report: Report, paint: _Paint) -> list[str]:
    """Each changed platform: its file's changes, what CloudFormation does with them, the clusters it reaches."""
    lines: list[str] = []
    for platform in report.platforms:
        head = f"{paint('platform ' + platform.name, '1')} ({file_path(platform.name, PLATFORM)}): " \
               f"{_platform_status(platform)}"
        worst = platform.worst
        if worst is not None:
            head += " — most disruptive: " + paint(worst.impact.label, _ANSI[worst.impact.rank])
        lines += ["", head]
        lines += [f"  note: {note}" for note in platform.notes]
        lines += [f"  cost: {line}" if n == 0 else f"        {line}"
                  for n, line in enumerate(platform_cost_lines(platform.cost))]
        if platform.changes:
            lines.append("  changes:")
            lines += [f"    {c.dotted}: {_arrow(*before_after(c))}" for c in platform.changes]
        if platform.consequences and platform.status == "changed":
            lines.append("  on the platform's stacks (CloudFormation), most disruptive first:")
            label = None
            for item in platform.consequences:
                if item.impact.label != label:
                    label = item.impact.label
                    lines.append("    " + paint(label, _ANSI[item.impact.rank]))
                why = paint(f"  [{item.why}]", "2") if item.why else ""
                lines.append(f"      {item.change.dotted}: {_arrow(*before_after(item.change))}{why}")
        if any(c.impact.label == BLOCKED_LABEL for c in platform.consequences):
            lines.append(f"  to apply it: {HOW_TO}")
        lines.append(f"  clusters on it: {_members(platform, levels(report))}")
    return lines


def _text_platform_impacts(cluster: ClusterDiff, paint: _Paint) -> list[str]:
    if not cluster.platform_impacts:
        return []
    lines = ["  update impact of its platform's changes, which no rendered config shows:"]
    label = None
    for item in cluster.platform_impacts:
        if item.impact.label != label:
            label = item.impact.label
            lines.append("    " + paint(label, _ANSI[item.impact.rank]))
        lines.append(f"      {item.change.dotted}: {_arrow(*before_after(item.change))}")
    return lines


def _text_rendered(cluster: ClusterDiff, paint: _Paint) -> list[str]:
    if not cluster.rendered:
        if cluster.status == "changed":
            return [f"  ParallelCluster config ({file_path(cluster.name, 'rendered')}): unchanged"]
        return []
    lines = [f"  ParallelCluster update impact ({file_path(cluster.name, 'rendered')}) on a running cluster, "
             "most disruptive first:"]
    label = None
    for item in cluster.rendered:
        if item.impact.label != label:
            label = item.impact.label
            lines.append("    " + paint(label, _ANSI[item.impact.rank]))
        policy = paint(f"  [{item.impact.policy}]", "2") if item.impact.policy else ""
        lines.append(f"      {item.change.dotted}: {_arrow(*before_after(item.change))}{policy}")
    return lines


def _text_images(cluster: ClusterDiff) -> list[str]:
    if not cluster.images:
        return []
    where = file_path(cluster.name, "lock")
    lines = [f"  images ({where}):" if cluster.status != "added" else f"  images ({where}, new):"]
    for image in cluster.images:
        lines.append(f"    {image.name}: {_arrow(_digest(image.old), _digest(image.new))}")
        extra = _image_details(image)
        versions = _versions(image)
        if versions:
            extra.append(f"versions {versions}")
        lines += [f"      {d}" for d in extra]
    return lines


# -- markdown ----------------------------------------------------------------------------------------------


def _code(text: str) -> str:
    if not text:
        return "—"
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "—"


def render_markdown(report: Report) -> str:
    text = _markdown(report)
    if len(text) <= MARKDOWN_LIMIT:
        return text
    cut = text.rfind("\n", 0, MARKDOWN_LIMIT)
    return text[:cut] + "\n\n… truncated to fit a GitHub comment: run `python -m clusterkit diff` for all of it.\n"


def _markdown(report: Report) -> str:
    lines = [MARKER, "### ClusterKit config diff", "",
             f"Base: {report.base} (`{report.base_sha[:12]}`) → {report.head}."]
    if report.notes:
        lines += [""] + [f"> **Note:** {_cell(note)}" for note in report.notes]
    changed = [c for c in report.clusters if c.changed]
    unchanged = _unchanged(report, code=True)
    lines += _md_platforms(report)
    if not changed:
        lines += ["", "No cluster config changes."]
    else:
        lines += ["", "| cluster | status | most disruptive update impact | cost |", "|---|---|---|---|"]
        for cluster in changed:
            worst = _worst(cluster)
            impact = f"{_EMOJI[worst.impact.rank]} {worst.impact.label}" if worst else "—"
            lines.append(f"| `{cluster.name}` | {_status(cluster)} | {impact} | {_cell(_cost_cell(cluster.cost))} |")
    if unchanged:
        lines += ["", f"Unchanged: {', '.join(unchanged)}."]
    for cluster in changed:
        lines += ["", f"#### `{cluster.name}` ({_status(cluster)})"]
        lines += [f"\n> **Note:** {_cell(note)}" for note in cluster.notes]
        costs = cost_lines(cluster.cost)
        if costs:
            lines += ["", f"**Cost** (list prices, USD): {_cell(costs[0])}"] + [f"<br>{_cell(c)}" for c in costs[1:]]
        lines += _md_spec_impacts(cluster) + _md_platform_impacts(cluster) + _md_rendered(cluster) + _md_images(cluster)
        for title, kind, changes in (("Image lock", "lock", cluster.lock), ("Spec", "spec", cluster.spec)):
            if changes:
                lines += ["", f"**{title}** (`{file_path(cluster.name, kind)}`):", "",
                          "| path | before | after |", "|---|---|---|"]
                for change in changes:
                    before, after = before_after(change)
                    lines.append(f"| {_code(change.dotted)} | {_code(before)} | {_code(after)} |")
    return "\n".join(lines) + "\n"


def _md_spec_impacts(cluster: ClusterDiff) -> list[str]:
    if not cluster.spec_impacts:
        return []
    title = (f"**Update impact of spec values outside the ParallelCluster config** "
             f"(`{file_path(cluster.name, 'spec')}`):")
    return _md_impact_table(title, "why", [(item, _cell(_why(item))) for item in cluster.spec_impacts])


def _md_platforms(report: Report) -> list[str]:
    if not report.platforms:
        return []
    lines = ["", "| platform | status | most disruptive | clusters on it (level) |", "|---|---|---|---|"]
    for platform in report.platforms:
        worst = platform.worst
        impact = f"{_EMOJI[worst.impact.rank]} {worst.impact.label}" if worst else "—"
        lines.append(f"| `{platform.name}` | {_platform_status(platform)} | {_cell(impact)} | "
                     f"{_cell(_members(platform, levels(report), code=True))} |")
    for platform in report.platforms:
        if not platform.changed:
            continue
        where = file_path(platform.name, PLATFORM)
        lines += ["", f"#### platform `{platform.name}` ({_platform_status(platform)})"]
        lines += [f"\n> **Note:** {_cell(note)}" for note in platform.notes]
        costs = platform_cost_lines(platform.cost)
        if costs:
            lines += ["", f"**Cost** (list prices, USD): {_cell(costs[0])}"] + [f"<br>{_cell(c)}" for c in costs[1:]]
        if platform.changes:
            lines += ["", f"**Platform** (`{where}`):", "", "| path | before | after |", "|---|---|---|"]
            for change in platform.changes:
                before, after = before_after(change)
                lines.append(f"| {_code(change.dotted)} | {_code(before)} | {_code(after)} |")
        if platform.consequences and platform.status == "changed":
            lines += _md_impact_table("**On the platform's stacks** (CloudFormation), most disruptive first:", "why",
                                      [(item, _cell(item.why)) for item in platform.consequences])
        if any(c.impact.label == BLOCKED_LABEL for c in platform.consequences):
            lines += ["", f"To apply it: {_cell(HOW_TO)}."]
        lines += ["", f"Clusters on it: {_cell(_members(platform, levels(report), code=True))}."]
    return lines


def _md_platform_impacts(cluster: ClusterDiff) -> list[str]:
    if not cluster.platform_impacts:
        return []
    return _md_impact_table("**Update impact of its platform's changes**, which no rendered config shows:", "why",
                            [(item, _cell(item.impact.policy)) for item in cluster.platform_impacts])


def _md_rendered(cluster: ClusterDiff) -> list[str]:
    where = file_path(cluster.name, "rendered")
    if not cluster.rendered:
        return ["", f"**ParallelCluster config** (`{where}`): unchanged."] if cluster.status == "changed" else []
    title = f"**ParallelCluster update impact** (`{where}`) on a running cluster, most disruptive first:"
    return _md_impact_table(title, "ParallelCluster policy",
                            [(item, _code(item.impact.policy)) for item in cluster.rendered])


def _md_impact_table(title: str, last_column: str, rows: list[tuple[Any, str]]) -> list[str]:
    """A markdown table of impacted changes, most disruptive first, with ``last_column`` saying why."""
    lines = ["", title, "", f"| impact | path | before | after | {last_column} |", "|---|---|---|---|---|"]
    for item, last in rows:
        before, after = before_after(item.change)
        impact = f"{_EMOJI[item.impact.rank]} {item.impact.label}"
        lines.append(f"| {_cell(impact)} | {_code(item.change.dotted)} | {_code(before)} | {_code(after)} | "
                     f"{last} |")
    return lines


def _md_images(cluster: ClusterDiff) -> list[str]:
    if not cluster.images:
        return []
    lines = ["", f"**Images** (`{file_path(cluster.name, 'lock')}`):", "",
             "| image | before | after | versions (expect) | also changed |", "|---|---|---|---|---|"]
    for image in cluster.images:
        lines.append(f"| `{image.name}` | {_code(_digest(image.old))} | {_code(_digest(image.new))} | "
                     f"{_cell(_versions(image))} | {_cell('; '.join(_image_details(image)))} |")
    return lines


def render(report: Report, fmt: str, color: bool = False) -> str:
    return render_markdown(report) if fmt == "markdown" else render_text(report, color)
