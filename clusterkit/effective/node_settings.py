"""The KEY=VALUE settings the node bootstrap scripts read (``EffectiveSpec.node``), derived from the nodes' own
table.

Scripts never hold cluster values of their own: the head node reads these from ``node.args`` inside the
bootstrap bundle, compute nodes get them as CustomActions Args (see bootstrap_scripts/). Which settings
exist, the spec field each comes from and the order they are written in are the rows of
``clusterkit_node/contract/settings.py`` (its ``spec_field``), so a new node setting is a row there and a spec field,
not an edit here: ``resolve`` reads each field's resolved value, and ``setting_field`` names the field in
errors.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass

from clusterkit.spec.model import ClusterSpec
from clusterkit_node.contract.settings import SETTINGS

SETTING_FIELDS = {s.key: s.spec_field for s in SETTINGS if s.spec_field}
"""The spec field each node setting comes from (clusterkit/rules/check.py checks every setting against the
nodes' own contract and names this field)."""


@dataclass(frozen=True)
class NodeSettings:
    """KEY=VALUE lines the node scripts read, in the table's order (the order shows up in rendered diffs)."""

    head: tuple[str, ...]  # node.args in the bootstrap bundle
    compute: tuple[str, ...]  # Args of the compute CustomActions


def resolve(values: Mapping[str, object], containers: object) -> NodeSettings:
    """Every setting with a spec field, from ``values`` (a resolved value by spec field, for the fields the
    effective spec derives: the store, the ECR registries) or else the effective ``containers`` attribute the
    field names (``containers.enroot.mount_home`` -> ``containers.enroot.mount_home``).

    The head node gets all of them; compute nodes the same without an empty registry list (they get the ECR
    registries for enroot's credentials file only when there are any, so other clusters' Args stay as they
    were) and without the head-only settings (the image gc's: the compute nodes' Args, and so the compute fleet,
    stay as they were when those change)."""
    head, compute = [], []
    for setting in SETTINGS:
        if not setting.spec_field:
            continue
        field = setting.spec_field
        if field in values:
            value = values[field]
        else:
            value = operator.attrgetter(field.removeprefix("containers."))(containers)
        text = _text(value, setting.pattern)
        head.append(f"{setting.key}={text}")
        if (text or setting.key != "CK_ECR_REGISTRIES") and not setting.head_only:
            compute.append(f"{setting.key}={text}")
    return NodeSettings(head=tuple(head), compute=tuple(compute))


def _text(value: object, pattern: str) -> str:
    """A value as the nodes' pattern wants it: a bool as yes/no where the pattern says so, else 1/0; a list
    space-separated."""
    if isinstance(value, bool):
        return ("yes" if value else "no") if pattern == "(yes|no)" else ("1" if value else "0")
    if isinstance(value, (tuple, list)):
        return " ".join(str(v) for v in value)
    return str(value)


def setting_field(spec: ClusterSpec, key: str) -> str:
    """The spec path to name for a node setting (the store comes from mount_dir when image_store is unset)."""
    if key == "CK_STORE" and spec.storage.fsx_lustre.image_store is None:
        return "storage.fsx_lustre.mount_dir"
    return SETTING_FIELDS[key]
