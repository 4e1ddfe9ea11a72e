"""Every warning ``validate`` can print, by its stable id: the one list of them.

A warning's id is printed with it (``warning[image-fanout-slow]: ...``, ``"id"`` in ``validate --format json``)
and is what a spec names to accept it: ``acknowledge: [{id: image-fanout-slow, reason: ...}]``
(clusterkit/spec/model.py; docs/spec.md "Warnings and acknowledgements" lists these ids). An id is a contract
with the specs that name it: rename or remove one only with a note for their owners. ``Problem`` refuses an id
that is not here, and tests/spec/test_warning_ids.py has one case per id that raises it.

This module imports nothing, so ``clusterkit.spec.errors`` can check ids against it.
"""
from __future__ import annotations

# id -> what it warns about, one line (docs/spec.md's table says the same).
WARNINGS: dict[str, str] = {
    "container-start-extracts": "the OS's ParallelCluster AMI has no squashfuse: pyxis extracts every image per job",
    "container-start-extracts-slow-reader": "the OS's ParallelCluster AMI has no multi-threaded squashfuse_ll: "
                                            "nodes extract every image per job rather than read it on one thread",
    "image-fanout-slow": "a job start on all max nodes reads every image from FSx for more than 10 minutes",
    "head-root-volume-small": "the head node has no local NVMe and its root volume is too small to import the images",
    "compute-root-volume-small": "a queue without local NVMe has a root volume too small to unpack the largest image",
    "capacity-block-exceeded": "a capacity block's min/max exceed its instance count: nodes beyond it never launch",
    "capacity-block-partial": "a capacity block's min/max use only part of it: the whole block is paid for",
    "capacity-block-size-unlisted": "the instance size is not among the Capacity Block sizes AWS lists",
    "instance-type-not-in-az": "the offline catalog does not list the instance type in the availability zone",
    "image-expect-incompatible": "an image's expected versions break a rule of clusterkit/data/compat_rules.json",
    "image-combination-untested": "an image's expected aws-ofi-nccl + NCCL combination is beyond what the plugin's "
                                  "release notes say it was tested with (untested, not known broken)",
    "image-no-gpu": "enroot's NVIDIA hook gives a locked image no GPU on a GPU queue (NVIDIA_VISIBLE_DEVICES unset, "
                    "void or none)",
    "image-gpu-requirement-unchecked": "an image's NVIDIA_REQUIRE_* depends on what validate cannot know (the GPU's "
                                       "brand, or the AMI's driver): the nodes judge it",
    "gpu-check-in-job-start": "a queue runs DCGM's deep GPU check in the job's prolog on a type where it outlasts "
                              "ParallelCluster's 180 s job start (aws-parallelcluster#6777)",
    "gpu-check-none": "a GPU queue has no deep GPU check",
    "compute-imds-job-pulls": "jobs may pull a private ECR image at job time, which needs the compute role's "
                              "credentials that security.compute_imds: root_only keeps from jobs",
    "acknowledgement-unused": "an acknowledge entry names a warning the spec no longer raises",
    "pcluster-validator": "a warning of ParallelCluster's own validators (validate --pcluster)",
}

# Ids a spec cannot acknowledge, and why (the hint of the error when one tries).
NOT_ACKNOWLEDGEABLE: dict[str, str] = {
    "image-no-gpu": "enroot's NVIDIA hook gives a locked image no GPU on a GPU queue (NVIDIA_VISIBLE_DEVICES unset, "
                    "void or none)",
    "image-gpu-requirement-unchecked": "an image's NVIDIA_REQUIRE_* depends on what validate cannot know (the GPU's "
                                       "brand, or the AMI's driver): the nodes judge it",
    "compute-imds-job-pulls": "jobs may pull a private ECR image at job time, which needs the compute role's "
                              "credentials that security.compute_imds: root_only keeps from jobs",
    "acknowledgement-unused": "remove the stale acknowledge entry instead",
    "pcluster-validator": "ParallelCluster's own findings are not ClusterKit's to accept; --strict leaves them "
                         "warnings",
}


def acknowledgeable() -> list[str]:
    """The ids a spec's ``acknowledge`` may name, in registry order."""
    return [warning_id for warning_id in WARNINGS if warning_id not in NOT_ACKNOWLEDGEABLE]
