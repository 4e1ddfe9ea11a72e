"""Reading a ``.sqsh`` image without mounting it: its files, ELF headers, the loader's search, the CUDA/NCCL/EFA
versions it carries and those it declares, ``inspect``.

Pure readers: nothing here writes the store or configures the node.

May import: contract
"""
