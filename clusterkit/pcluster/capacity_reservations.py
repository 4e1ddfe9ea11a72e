"""DescribeCapacityReservations for moto, which lacks it (moto 5.2.5 raises NotImplementedError).

ParallelCluster describes every capacity reservation a config names: once while building the config
object (failures there are only logged) and again in its reservation validators. The answer here is
a reservation shaped from the config itself: the compute resource's instance type, the fixture
subnets' AZ, ``capacity-block`` for CAPACITY_BLOCK queues, room for every MaxCount that targets it,
and the platform PC expects for the OS. So PC's config-only reservation rules run for real (e.g. a
CapacityReservationId next to ``Instances``), while its reservation-versus-config comparisons pass
by construction: the real reservation's facts can only be checked in the account that holds it.
"""
from __future__ import annotations

from typing import Any

# (account, region) -> reservation id -> DescribeCapacityReservations item; replaced for every config
_RESERVATIONS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}


def install() -> None:
    """Add the action to moto's EC2 responses once per process (a no-op once moto has its own)."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    if hasattr(EC2Response, "describe_capacity_reservations"):
        return

    def describe_capacity_reservations(self: Any) -> Any:
        wanted = self._get_param("CapacityReservationIds", [])
        known = _RESERVATIONS.get((self.current_account, self.region), {})
        for reservation_id in wanted:
            if reservation_id not in known:
                raise EC2ClientError(
                    "InvalidCapacityReservationId.NotFound",
                    f"The capacity reservation ID '{reservation_id}' does not exist",
                )
        chosen = [known[i] for i in wanted] if wanted else [known[i] for i in sorted(known)]
        return ActionResult({"CapacityReservations": chosen})

    EC2Response.describe_capacity_reservations = describe_capacity_reservations  # type: ignore[attr-defined]


def _instance_type(resource: dict[str, Any]) -> str | None:
    own = resource.get("InstanceType")
    if isinstance(own, str):
        return own
    for item in resource.get("Instances") or []:
        listed = item.get("InstanceType") if isinstance(item, dict) else None
        if isinstance(listed, str):
            return listed
    return None


def register(account_id: str, region: str, data: dict[str, Any]) -> list[str]:
    """Make the reservations ``data`` (the parsed config) targets answerable, replacing earlier ones; their ids."""
    from pcluster.constants import CAPACITY_RESERVATION_OS_MAP

    platform = CAPACITY_RESERVATION_OS_MAP.get(str((data.get("Image") or {}).get("Os")), "Linux/UNIX")
    reservations: dict[str, dict[str, Any]] = {}
    for queue in (data.get("Scheduling") or {}).get("SlurmQueues") or []:
        queue = queue or {}
        queue_target = (queue.get("CapacityReservationTarget") or {}).get("CapacityReservationId")
        for resource in queue.get("ComputeResources") or []:
            resource = resource or {}
            target = (resource.get("CapacityReservationTarget") or {}).get("CapacityReservationId") or queue_target
            if not isinstance(target, str):
                continue
            count = int(resource.get("MaxCount") or 10)
            entry = reservations.setdefault(
                target,
                {
                    "CapacityReservationId": target,
                    "OwnerId": account_id,
                    "InstanceType": _instance_type(resource) or "unknown",
                    "InstancePlatform": platform,
                    "AvailabilityZone": f"{region}a",  # where moto_world puts every subnet
                    "Tenancy": "default",
                    "TotalInstanceCount": 0,
                    "AvailableInstanceCount": 0,
                    "State": "active",
                    "InstanceMatchCriteria": "targeted",
                    "ReservationType": "capacity-block" if queue.get("CapacityType") == "CAPACITY_BLOCK" else "default",
                },
            )
            entry["TotalInstanceCount"] += count
            entry["AvailableInstanceCount"] += count
    _RESERVATIONS.clear()
    _RESERVATIONS[(account_id, region)] = reservations
    return sorted(reservations)
