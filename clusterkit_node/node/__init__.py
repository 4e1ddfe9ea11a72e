"""Configuring one node: its Args, enroot.conf and pyxis.conf, the per-user enroot dirs, what the node has (facts),
the start path (in place or extracted), the boot self-test and its image, nvidia-container-cli on GPU nodes, the
deep GPU check at boot, pyxis' importer, and ``inspect`` (an image judged with this node's driver).

May import: contract, image, store
"""
