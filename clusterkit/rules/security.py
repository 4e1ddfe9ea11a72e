"""Security rules: who on a compute node may reach the instance metadata service (and the compute role).

``security.compute_imds: root_only`` (the default) locks IMDS to root on compute nodes (clusterkit_node/node/
imds_lock.py), so a job holds none of the compute role: ParallelCluster's agents run as root. What jobs lose with it
is the role's own use from a job: the one ClusterKit configures is enroot pulling a private ECR image at job time
(its credentials file runs ``aws ecr get-login-password`` as the job's user), which this warns about.
"""
from __future__ import annotations

from collections.abc import Iterator

from clusterkit.effective.expand import ecr_repositories
from clusterkit.rules.containers import pyxis_of
from clusterkit.rules.limits import PYXIS_OPTION_SINCE
from clusterkit.spec.errors import Problem
from clusterkit.spec.model import ClusterSpec
from clusterkit.spec.yaml_reader import Marks


def compute_imds(spec: ClusterSpec, m: Marks) -> Iterator[Problem]:
    s = spec.security
    if s.compute_imds == "all_users" and not (s.compute_imds_reason or "").strip():
        yield m.problem("security.compute_imds", "all_users gives every job user the compute role's credentials: "
                        "needs a reason", "add compute_imds_reason: (e.g. 'jobs read s3://team-data with the node "
                        "role'), or remove compute_imds (root_only)")
    elif s.compute_imds_reason is not None and s.compute_imds != "all_users":
        yield m.problem("security.compute_imds_reason", "a reason without compute_imds: all_users changes nothing",
                        "remove compute_imds_reason, or set compute_imds: all_users")
    if s.compute_imds != "root_only":
        return
    repositories = ecr_repositories(spec.containers.images)
    if not repositories:
        return
    pulls = spec.containers.pyxis.unlocked_images == "import" or pyxis_of(spec) < PYXIS_OPTION_SINCE["importer"]
    if pulls:
        names = ", ".join(sorted({f"{r.account}.dkr.ecr.{r.region}" for r in repositories}))
        yield m.problem("security.compute_imds", f"a job that names a private ECR image ({names}) by its registry "
                        "URI pulls it with the compute role's credentials, which root_only IMDS keeps from jobs",
                        "start locked images from the store (--container-image=<store>/<name>.sqsh), or set "
                        "compute_imds: all_users with compute_imds_reason",
                        level="warning", id="compute-imds-job-pulls")
