"""Reading a ``.sqsh`` image without mounting it: its files, ELF headers, the loader's search, the CUDA/NCCL/EFA
versions it carries and those it declares, its ``/etc/environment`` (the ``NVIDIA_*`` settings) and what enroot's
NVIDIA hook does with them.

Pure readers: nothing here writes the store or configures the node.

May import: contract
"""
