"""The KEY=VALUE settings the node bootstrap scripts read, derived from the spec.

Scripts never hold cluster values of their own: the head node reads these from ``node.args`` inside
the bootstrap bundle, compute nodes get them as CustomActions Args (see bootstrap_scripts/).
"""
from __future__ import annotations

from .spec import ClusterSpec


def _flag(value: bool, yes: str = "yes", no: str = "no") -> str:
    return yes if value else no


def ecr_registries(spec: ClusterSpec) -> list[str]:
    from .imageref import parse_image_ref

    hosts = {parse_image_ref(i.uri).registry for i in spec.containers.images}
    return sorted(h for h in hosts if ".dkr.ecr." in h)


def common_settings(spec: ClusterSpec) -> list[str]:
    """Settings both node roles need, in a fixed order (the order shows up in rendered diffs)."""
    e, p = spec.containers.enroot, spec.containers.pyxis
    return [
        f"CK_CLUSTER={spec.name}",
        f"CK_OS={spec.os}",
        f"CK_REGION={spec.region}",
        f"CK_STORE={spec.storage.fsx_lustre.store}",
        f"CK_UNLOCKED_IMAGES={p.unlocked_images}",
        f"ENROOT_SQUASH_OPTIONS={e.squash_options}",
        f"ENROOT_MOUNT_HOME={_flag(e.mount_home)}",
        f"ENROOT_ROOTFS_WRITABLE={_flag(e.rootfs_writable)}",
        f"ENROOT_TRANSFER_RETRIES={e.transfer_retries}",
        f"ENROOT_CONNECT_TIMEOUT={e.connect_timeout_s}",
        f"ENROOT_TRANSFER_TIMEOUT={e.transfer_timeout_s}",
        f"PYXIS_CONTAINER_SCOPE={p.container_scope}",
        f"PYXIS_SBATCH_SUPPORT={_flag(p.sbatch_support, '1', '0')}",
        f"PYXIS_EXECUTE_ENTRYPOINT={_flag(p.execute_entrypoint, '1', '0')}",
        f"PYXIS_USE_ENROOT_LOAD={_flag(p.use_enroot_load, '1', '0')}",
        f"PYXIS_USE_SQUASHFUSE={_flag(p.use_squashfuse, '1', '0')}",
    ]


def head_settings(spec: ClusterSpec) -> list[str]:
    return common_settings(spec) + [f"CK_ECR_REGISTRIES={' '.join(ecr_registries(spec))}"]


def compute_settings(spec: ClusterSpec) -> list[str]:
    """Compute nodes pull too (`srun --container-image=<private ECR image>`): they get the ECR registries
    for enroot's credentials file, only when there are any, so other clusters' Args stay as they were."""
    registries = ecr_registries(spec)
    return common_settings(spec) + ([f"CK_ECR_REGISTRIES={' '.join(registries)}"] if registries else [])
