"""What ``validate --pcluster`` checked against simulated AWS answers, and what only a real account can check.

ParallelCluster's validators call AWS; ``check`` runs them under moto against resources ``moto_world`` creates
for exactly the ids the config names. So an id nobody owns (``subnet-0a1b2c3d4e5f60719``) passes: it exists
in the simulation. A result says so in two lines, one each, so an "ok" is never read as "AWS agreed".
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterkit.spec.files import deploy_command, validate_command

# Kinds as moto_world.World.simulated names them -> how a user calls them
KIND_NAMES = {"vpc": "VPC", "subnet": "subnet", "sg": "security group", "fsx": "FSx file system",
              "iam-policy": "IAM policy", "bucket": "S3 bucket", "capacity-reservation": "capacity reservation",
              "key-pair": "key pair", "official-ami": "AMI"}

# What moto cannot stand in for: the account itself. Derived from what moto_world makes up (every subnet in
# the region's first AZ of one made-up VPC, quotas moto does not enforce, a fixture AMI) and from
# check.MOTO_GAP_SUPPRESSIONS (the dry-run RunInstances validators, added per result when they were skipped).
REAL_ACCOUNT_ONLY = (
    "that each id exists in your account in {region} and they belong together (one VPC, the subnets' AZs)",
    "EC2 quotas and capacity for the instance types",
    "the deploying role's IAM permissions",
)
FIRST_REAL_CHECK = "`{deploy}` is the first check against your account"
# moto_world makes every security group the config names WITH the rules EFA needs (and the FSx fixture's group
# admits Lustre from them all), so ParallelCluster's EfaSecurityGroupValidator and ExistingFsxNetworkingValidator
# pass on any existing group id: their real rules are read only by `validate --aws` (clusterkit/rules/security_groups).
GROUP_RULES = ("the rules of the existing security groups {ids} (the simulation gave them EFA's and Lustre's; "
               "`{validate} --aws` reads the real ones)")


@dataclass(frozen=True)
class SimulationNote:
    """One rendered config's two facts: what was simulated, what was left to a real account."""

    file: str
    simulated: tuple[tuple[str, str], ...]  # (kind, id as the config writes it)
    real_account_only: tuple[str, ...]

    def simulated_line(self) -> str:
        literal = [f"{KIND_NAMES.get(k, k)} {i}" for k, i in self.simulated if not i.startswith("${")
                   and k != "official-ami"]
        standins = [i for k, i in self.simulated if i.startswith("${") or k == "official-ami"]
        parts = []
        if literal:
            parts.append(f"{', '.join(literal)} exist only in the simulation (looked up in no account)")
        if standins:
            parts.append(f"stood in for {', '.join(standins)}")
        what = "; ".join(parts) or "no AWS resource named"
        return (f"{self.file}: ParallelCluster's validators ran against simulated AWS answers (moto), not an "
                f"account: {what}")

    def real_account_line(self) -> str:
        return f"{self.file}: only a real account can check: {'; '.join(self.real_account_only)}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "simulated": [{"kind": k, "id": i} for k, i in self.simulated],
                "real_account_only": list(self.real_account_only)}


def note(result: Mapping[str, Any], *, region: str, cluster: str, spec: Path | None = None) -> SimulationNote:
    """The note for one ``runner.run_check(..., "validate")`` result; ``spec``: the cluster's spec file, so the
    commands it names act on that file (outside the checkout a bare name would mean another one)."""
    if spec is None:
        validate, deploy = f"clusterkit validate {cluster}", f"make deploy CLUSTER={cluster}"
    else:
        validate, deploy = validate_command(spec), deploy_command(spec)
    skipped = [s["type"] for s in result.get("suppressed") or []]
    real = [line.format(region=region) for line in REAL_ACCOUNT_ONLY]
    if skipped:
        real.append(f"the launch templates (dry-run RunInstances, skipped under moto: {', '.join(skipped)})")
    simulated = tuple((str(s["kind"]), str(s["id"])) for s in result.get("simulated") or [])
    groups = [i for k, i in simulated if k == "sg" and not i.startswith("${")]
    if groups:
        real.append(GROUP_RULES.format(ids=", ".join(groups), validate=validate))
    real.append(FIRST_REAL_CHECK.format(deploy=deploy))
    return SimulationNote(str(result["path"]), simulated, tuple(real))


def notes(results: Sequence[Mapping[str, Any]], regions: Mapping[str, str],
          specs: Mapping[str, Path] | None = None) -> list[SimulationNote]:
    """One note per result; ``regions``: cluster name -> region; ``specs``: cluster name -> its spec file."""
    return [note(r, region=regions.get(str(r.get("name")), "its region"), cluster=str(r.get("name", "NAME")),
                 spec=(specs or {}).get(str(r.get("name")))) for r in results]
