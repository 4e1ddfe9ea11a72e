"""How much disk an image import needs, relative to the lock's ``compressed_size``: the sizing factors.

One set of numbers for two consumers: the head node's disk preflight (disk_preflight.py) refuses an
import that would fill a file system, and the CLI's sizing advice (clusterkit/rules/advice.py imports this
module) warns at ``validate`` time with the same factors, so the advice and the refusal cannot disagree.
"""
from __future__ import annotations

import shlex

# Disk factors, relative to the lock's compressed_size (sum of the gzip/zstd layer blobs):
# - ENROOT_TEMP_PATH holds the unpacked root filesystem while enroot converts the layers; container
#   layers compress about 2.5-3.5x with gzip, so 3x is a realistic upper bound (ADT #427/#127: root
#   volumes filled up exactly here). Imports run one at a time, so the largest image sets the need.
# - ENROOT_CACHE_PATH keeps the downloaded layer blobs (1x each, persistent), so they add up.
# - The store receives the .sqsh: with compressed data (zstd, lz4, lzo without -noD) it is about the
#   size of the layers, 1.2x leaves headroom; with -noD (enroot's default) data blocks are stored
#   uncompressed, so the .sqsh is about the unpacked size: 3x. enroot writes it as a partial file in the
#   staging directory next to the store, which ensure_staging guarantees is on the store's file system
#   (then one rename): counting it against --store's file system, once, is exact.
TEMP_FACTOR = 3.0
CACHE_FACTOR = 1.0
STORE_FACTOR_COMPRESSED = 1.2
STORE_FACTOR_UNCOMPRESSED_DATA = 3.0


def data_uncompressed(squash_options: str) -> bool:
    """True when mksquashfs will store data blocks uncompressed (the .sqsh is ~ the unpacked size)."""
    opts = shlex.split(squash_options)
    return any(o in ("-noD", "-noData", "-no-compression") for o in opts)
