"""The KEY=VALUE settings the node bootstrap scripts read: ``EffectiveSpec.node``, and which spec field each
key comes from.

Scripts never hold cluster values of their own: the head node reads these from ``node.args`` inside
the bootstrap bundle, compute nodes get them as CustomActions Args (see bootstrap_scripts/). The lines are
resolved with every other derived value in ``clusterkit.effective.expand`` (``resolve_node_settings``); this module
reads them, and maps keys back to spec fields for error messages.
"""
from __future__ import annotations

from clusterkit.spec.model import ClusterSpec

# The spec field each node setting comes from, for errors that name the field (clusterkit/rules/check.py checks
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
