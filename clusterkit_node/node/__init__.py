"""Configuring one node: its Args, enroot.conf and pyxis.conf, the per-user enroot dirs, what the node has (facts),
the start path (in place or extracted), the boot self-test and its image, the deep GPU check at boot, and
pyxis' importer.

May import: contract, image, store
"""
