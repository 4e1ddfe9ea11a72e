"""Machine-readable forms of what the CLI reports: JSON for scripts, annotations for GitHub Actions.

Every JSON document names its shape and version in ``"schema"`` (``clusterkit.<command>/v<N>``); a
new key is not a new version, a renamed or removed one is. The shapes (also in docs/cli-output.md):

- ``clusterkit.validate/v1``: ``{schema, ok, clusters: [{name, file}], problems: [{file, line, col,
  path, message, hint, level, id}], acknowledged: [{file, line, col, path, message, hint, level, id,
  reason}]}``; line and col are 0 when a problem has no position; ``id`` is a warning's id
  (clusterkit/spec/warning_ids.py, kept when ``--strict`` makes it an error), "" for other errors;
  ``acknowledged`` holds the warnings the loaded specs accept, with their ``reason``; with ``--pcluster``,
  ``pcluster: [{file, simulated: [{kind, id}], real_account_only: [...]}]`` says per rendered config which
  resources existed only in the simulated AWS its validators met, and what only a real account can check.
- ``clusterkit.cost/v1``: ``{schema, cluster, region, currency, hours_30_days, idle_hourly,
  busy_hourly, idle_30_days, busy_30_days, lines: [{item, detail, idle_hourly, busy_hourly, note,
  missing}], not_in_totals: [...], refreshed: [...], price_sources: [...]}``; an unpriced line has
  null figures and says what is ``missing``.
- ``clusterkit.lock/v1``: ``{schema, locks: [{cluster, path, images: [{name, digest, compressed_size,
  platform, source}]}]}``.
- ``clusterkit.diff/v1``: diff_json.py.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterkit.jsondoc import dumps
from clusterkit.spec.errors import Acknowledged, Problem


def _problem(p: Problem) -> dict[str, Any]:
    return {"file": p.file, "line": p.line, "col": p.col, "path": p.path, "message": p.message, "hint": p.hint,
            "level": p.level, "id": p.id}


def validate_json(clusters: Sequence[tuple[str, str]], problems: Sequence[Problem],
                  acknowledged: Sequence[Acknowledged] = (), pcluster: Sequence[dict[str, Any]] | None = None) -> str:
    return dumps({
        "schema": "clusterkit.validate/v1",
        "ok": not any(p.level == "error" for p in problems),
        "clusters": [{"name": name, "file": file} for name, file in clusters],
        "problems": [_problem(p) for p in problems],
        "acknowledged": [{**_problem(a.problem), "reason": a.reason} for a in acknowledged],
        **({} if pcluster is None else {"pcluster": list(pcluster)}),
    })


def github_annotations(problems: Sequence[Problem]) -> str:
    """One GitHub Actions workflow command per problem (``::error file=..,line=..::message``), which the
    PR page shows on the line of the spec; the title is the spec path, after the warning id when there is
    one (``[image-fanout-slow] storage.fsx_lustre.new.capacity_gib``). Escaping follows the runner's rules
    (actions/toolkit packages/core/src/command.ts: ``%``, CR and LF in the message; also ``:`` and ``,``
    in properties)."""
    lines = []
    for p in problems:
        kind = "warning" if p.level == "warning" else "error"
        props = [f"file={_prop(p.file)}"]
        if p.line:
            props += [f"line={p.line}", f"col={p.col}"]
        title = " ".join(part for part in (f"[{p.id}]" if p.id else "", p.path) if part)
        if title:
            props.append(f"title={_prop(title)}")
        message = p.message + (f" ({p.hint})" if p.hint else "")
        lines.append(f"::{kind} {','.join(props)}::{_data(message)}")
    return "".join(line + "\n" for line in lines)


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def cost_json(est: Any, book: Any, unknown: Sequence[str] = ()) -> str:
    from clusterkit.cost import estimate as cost

    doc = _cost_doc(est)
    doc.update({
        "schema": "clusterkit.cost/v1", "currency": "USD", "hours_30_days": cost.HOURS_30_DAYS,
        "refreshed": list(est.refreshed), "not_in_price_list": list(unknown),
        "price_sources": book.sources(est.region),
    })
    if est.share is not None:
        share = est.share
        doc["platform"] = {**_cost_doc(share.platform), "share": {
            "fraction": share.fraction, "clusters": list(share.members), "where": share.where,
            "how": "split evenly between the cluster specs in the directory that name the platform"}}
    return dumps(doc)


def _cost_doc(est: Any) -> dict[str, Any]:
    """The figures of one estimate (a cluster's, or a platform's): ``complete`` is false when a price is missing,
    and ``missing`` names each (the totals are then a lower bound)."""
    doc = {
        "kind": est.kind, "name": est.cluster, "region": est.region,
        "idle_hourly": round(est.idle_hourly, 6), "busy_hourly": round(est.busy_hourly, 6),
        "idle_30_days": round(est.idle_30_days, 2), "busy_30_days": round(est.busy_30_days, 2),
        "complete": est.complete, "missing": list(est.missing), "not_in_totals": list(est.missing),
        "lines": [{"item": line.item, "detail": line.detail, "idle_hourly": line.idle, "busy_hourly": line.busy,
                   "note": line.note, "missing": line.missing} for line in est.lines],
    }
    if est.kind == "cluster":
        doc["cluster"] = est.cluster
    else:
        doc["clusters"] = list(est.clusters)
    return doc


def lock_json(written: Sequence[tuple[Path, Any]]) -> str:
    return dumps({
        "schema": "clusterkit.lock/v1",
        "locks": [{"cluster": lock.cluster, "path": str(path),
                   "images": [{"name": i.name, "digest": i.digest, "compressed_size": i.compressed_size,
                               "platform": i.platform, "source": i.source} for i in lock.images]}
                  for path, lock in written],
    })
