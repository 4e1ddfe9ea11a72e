"""CloudFormation's stack deletion replayed from synthesized templates: which stack `cdk destroy --all` leaves
DELETE_FAILED, and what it leaves behind.

The rules modelled, from the AWS documentation:

- Stack order: ``cdk destroy --all`` deletes the stacks in reverse order of the cloud assembly's dependencies,
  and CloudFormation refuses to delete a stack while another stack imports one of its exports
  (CloudFormation User Guide, "Get exported outputs from a deployed CloudFormation stack": "you can't delete a
  stack if another stack references one of its outputs").
- Resource order: within a stack, a resource is deleted only after every resource that depends on it (Ref,
  Fn::GetAtt, Fn::Sub, DependsOn: "DependsOn attribute", "resources are deleted in the reverse order of their
  creation").
- DeletionPolicy: ``Retain`` keeps the resource when its stack is deleted, and the stack still ends
  DELETE_COMPLETE (Template Reference, "DeletionPolicy attribute"); the kept resource goes on using whatever it
  was given, in this stack or through an imported export.
- In use: EC2 refuses to delete a security group "associated with an instance or network interface, [or]
  referenced by another security group" (EC2 API Reference, DeleteSecurityGroup: DependencyViolation), a subnet
  with network interfaces in it (DeleteSubnet), a VPC that still has subnets, security groups or interfaces
  (DeleteVpc), and a route table association of a subnet still in use; CloudFormation then marks the resource
  and the stack DELETE_FAILED (User Guide, "Troubleshooting CloudFormation", "Delete stack fails"). Here: such a
  resource fails while a kept resource references it, directly or through an export it imports.
- Buckets: "you must delete all objects in an Amazon S3 bucket ... before you can delete the bucket" (same
  troubleshooting entry); the templates cannot say whether a bucket is empty, so the caller says whether the
  documented manual step (docs/operations.md, emptying the buckets) was done.

Not modelled: what no template shows (network interfaces of resources made outside the stacks, a nested
stack's own resources, eventual-consistency retries).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IN_USE_TYPES = frozenset({"AWS::EC2::SecurityGroup", "AWS::EC2::Subnet", "AWS::EC2::SubnetRouteTableAssociation",
                          "AWS::EC2::VPC"})
BUCKET = "AWS::S3::Bucket"

Key = tuple[str, str]  # (stack name, logical id)


@dataclass
class Teardown:
    """The outcome of deleting every stack: each stack's final status, why resources failed, what stays."""

    status: dict[str, str] = field(default_factory=dict)  # stack -> DELETE_COMPLETE | DELETE_FAILED | REFUSED
    failures: list[str] = field(default_factory=list)  # "Stack/LogicalId (Type): why"
    kept: dict[Key, str] = field(default_factory=dict)  # retained resource -> type
    # resource -> the wave it went in: CloudFormation deletes every resource nothing else depends on at once,
    # so two resources of one wave go at the same time, in no order anyone can rely on
    wave: dict[Key, int] = field(default_factory=dict)

    def failed(self) -> dict[str, str]:
        return {stack: status for stack, status in self.status.items() if status != "DELETE_COMPLETE"}


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def _sub_names(text: str) -> set[str]:
    names = set()
    for part in text.split("${")[1:]:
        name = part.split("}", 1)[0]
        if not name.startswith("!"):
            names.add(name.split(".", 1)[0])
    return names


def references(value: Any, resources: dict[str, Any]) -> set[str]:
    """Logical ids of this template's resources that ``value`` names (Ref, Fn::GetAtt, Fn::Sub)."""
    names: set[str] = set()
    for key, item in _walk(value):
        if key == "Ref" and isinstance(item, str):
            names.add(item)
        elif key == "Fn::GetAtt":
            names.add(item[0] if isinstance(item, list) else str(item).split(".", 1)[0])
        elif key == "Fn::Sub":
            names |= _sub_names(item if isinstance(item, str) else item[0])
    return names & set(resources)


def imports(value: Any) -> set[str]:
    return {item for key, item in _walk(value) if key == "Fn::ImportValue" and isinstance(item, str)}


def load_assembly(out: Path) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(stack names in deployment order, stack -> template) of a cloud assembly directory."""
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    stacks = {name: [d for d in art.get("dependencies", []) if manifest["artifacts"].get(d, {}).get("type")
                     == "aws:cloudformation:stack"]
              for name, art in manifest["artifacts"].items() if art["type"] == "aws:cloudformation:stack"}
    templates = {name: json.loads((out / manifest["artifacts"][name]["properties"]["templateFile"])
                                  .read_text(encoding="utf-8")) for name in stacks}
    return _deploy_order(stacks), templates


def _deploy_order(dependencies: dict[str, list[str]]) -> list[str]:
    order: list[str] = []
    while len(order) < len(dependencies):
        ready = sorted(s for s, deps in dependencies.items() if s not in order and set(deps) <= set(order))
        assert ready, f"dependency cycle among {dependencies}"
        order.extend(ready)
    return order


def destroy_all(order: list[str], templates: dict[str, dict[str, Any]], *, buckets_emptied: bool) -> Teardown:
    """Delete the stacks of ``order`` (deployment order) as ``cdk destroy --all`` and CloudFormation would.
    ``templates`` may hold more stacks than ``order``: those stay deployed (other apps' stacks, such as the
    clusters on a platform), and their imports refuse the deletion of what they import."""
    exporter: dict[str, str] = {}  # export name -> the stack that exports it
    exported: dict[str, set[Key]] = {}  # export name -> the resources its value names
    for stack, template in templates.items():
        for output in template.get("Outputs", {}).values():
            if "Export" in output:
                exporter[output["Export"]["Name"]] = stack
                exported[output["Export"]["Name"]] = {
                    (stack, name) for name in references(output["Value"], template["Resources"])}
    uses: dict[Key, set[Key]] = {}
    for stack, template in templates.items():
        resources = template["Resources"]
        for lid, res in resources.items():
            properties = res.get("Properties", {})
            uses[(stack, lid)] = {(stack, name) for name in references(properties, resources)}.union(
                *(exported.get(name, set()) for name in imports(properties)))
    result = Teardown()
    for stack in reversed(order):
        importers = [s for s in templates if s != stack and result.status.get(s) != "DELETE_COMPLETE"
                     and any(exporter.get(name) == stack for name in imports(templates[s]))]
        if importers:
            result.status[stack] = "REFUSED"
            result.failures.append(f"{stack}: its exports are imported by {', '.join(importers)}")
            continue
        result.status[stack] = _delete_stack(stack, templates[stack]["Resources"], uses, result,
                                             buckets_emptied=buckets_emptied)
    return result


def _delete_stack(stack: str, resources: dict[str, Any], uses: dict[Key, set[Key]], result: Teardown, *,
                  buckets_emptied: bool) -> str:
    depends = {lid: references(res.get("Properties", {}), resources) | set(_depends_on(res))
               for lid, res in resources.items()}
    remaining = set(resources)
    failed: set[str] = set()
    wave = 0
    while True:
        wave += 1
        # Deletable now: nothing still in the stack depends on it (failed resources stay, blocking theirs).
        ready = sorted(lid for lid in remaining - failed
                       if not any(lid in depends[other] for other in remaining if other != lid))
        if not ready:
            break
        for lid in ready:
            res = resources[lid]
            remaining.discard(lid)
            if res.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate"):
                result.kept[(stack, lid)] = res["Type"]
                result.wave[(stack, lid)] = wave  # it leaves the stack then, and stays in the account
                continue
            why = _refusal(stack, lid, res, uses, result, buckets_emptied=buckets_emptied)
            if why:
                failed.add(lid)
                remaining.add(lid)
                result.failures.append(f"{stack}/{lid} ({res['Type']}): {why}")
            else:
                result.wave[(stack, lid)] = wave
    return "DELETE_FAILED" if remaining else "DELETE_COMPLETE"


def _refusal(stack: str, lid: str, res: dict[str, Any], uses: dict[Key, set[Key]], result: Teardown, *,
             buckets_emptied: bool) -> str | None:
    if res["Type"] == BUCKET and not buckets_emptied:
        return "the bucket still holds objects"
    if res["Type"] in IN_USE_TYPES:
        holders = sorted(f"{s}/{k}" for (s, k) in result.kept if (stack, lid) in uses[(s, k)])
        if holders:
            return f"in use by retained {', '.join(holders)}"
    return None


def _depends_on(res: dict[str, Any]) -> list[str]:
    value = res.get("DependsOn", [])
    return [value] if isinstance(value, str) else list(value)
