"""The KEY=VALUE settings the node bootstrap scripts read, derived from the spec.

Scripts never hold cluster values of their own: the head node reads these from ``node.args`` inside
the bootstrap bundle, compute nodes get them as CustomActions Args (see bootstrap_scripts/).
"""
from __future__ import annotations

from .spec import ClusterSpec

# The spec field each node setting comes from, for errors that name the field (clusterkit/rules.py checks
# every setting against the nodes' own contract, clusterkit_node/settings.py).
SETTING_FIELDS = {
    "CK_CLUSTER": "name",
    "CK_OS": "os",
    "CK_REGION": "region",
    "CK_STORE": "storage.fsx_lustre.image_store",
    "CK_UNLOCKED_IMAGES": "containers.pyxis.unlocked_images",
    "CK_ECR_REGISTRIES": "containers.images",
    "ENROOT_SQUASH_OPTIONS": "containers.enroot.squash_options",
    "ENROOT_MOUNT_HOME": "containers.enroot.mount_home",
    "ENROOT_ROOTFS_WRITABLE": "containers.enroot.rootfs_writable",
    "ENROOT_TRANSFER_RETRIES": "containers.enroot.transfer_retries",
    "ENROOT_CONNECT_TIMEOUT": "containers.enroot.connect_timeout_s",
    "ENROOT_TRANSFER_TIMEOUT": "containers.enroot.transfer_timeout_s",
    "PYXIS_CONTAINER_SCOPE": "containers.pyxis.container_scope",
    "PYXIS_SBATCH_SUPPORT": "containers.pyxis.sbatch_support",
    "PYXIS_EXECUTE_ENTRYPOINT": "containers.pyxis.execute_entrypoint",
    "PYXIS_USE_ENROOT_LOAD": "containers.pyxis.use_enroot_load",
    "PYXIS_USE_SQUASHFUSE": "containers.pyxis.use_squashfuse",
}


def setting_field(spec: ClusterSpec, key: str) -> str:
    """The spec path to name for a node setting (the store comes from mount_dir when image_store is unset)."""
    if key == "CK_STORE" and spec.storage.fsx_lustre.image_store is None:
        return "storage.fsx_lustre.mount_dir"
    return SETTING_FIELDS[key]


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
