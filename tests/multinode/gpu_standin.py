"""Stand-ins for what a p5.48xlarge shows the health checks and this machine cannot: its GPUs (nvidia-smi), its EFA
devices (libfabric's fi_info) and the bandwidth between two of them (nccl-tests' all_reduce_perf).

Each answers in the real tool's output format, and only the questions the health loop asks (anything else fails as
nvidia-smi does without a driver, exit 9), so every other check on the fleet sees what it saw before:
- ``nvidia-smi --query-gpu=index,name,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits``: one
  ``index, name, count`` row per GPU (nvidia-smi's CSV: ", " between fields, no units with nounits);
- ``fi_info -p efa -t FI_EP_RDM``: one ``provider:``/``fabric:``/``domain: rdmapXsY-rdm`` block per device, as
  libfabric's fi_info prints each fi_info entry (util/info.c);
- ``all_reduce_perf``: rank 0 prints nccl-tests' summary line ``# Avg bus bandwidth    : X`` (src/common.cu), X the
  slowest of the step's nodes' link figures.
What each node shows is a file the test changes: ``/etc/ck-test/gpus`` (one ``name,ecc`` line per GPU),
``/etc/ck-test/gpu-hang`` (nvidia-smi hangs), ``/etc/ck-test/efa`` (the device count) on the node;
``/opt/parallelcluster/shared/ck-test/link/<node>`` (GB/s, default LINK_GBPS) on the NFS-shared directory, since a
pair's bandwidth is both nodes' business.
"""
from __future__ import annotations

H100 = "NVIDIA H100 80GB HBM3"
GPUS, EFA, LINK_GBPS = 8, 32, 400
LINKS = "/opt/parallelcluster/shared/ck-test/link"

NVIDIA_SMI = r"""#!/bin/bash
if [[ "$*" != "--query-gpu=index,name,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits" ]]; then
    echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2
    exit 9
fi
if [[ -e /etc/ck-test/gpu-hang ]]; then sleep 600 & wait; fi
i=0
while IFS=, read -r name ecc; do
    [[ -n "${name}" ]] || continue
    printf '%s, %s, %s\n' "${i}" "${name}" "${ecc}"
    i=$((i + 1))
done </etc/ck-test/gpus
"""

FI_INFO = r"""#!/bin/bash
[[ "$*" == "-p efa -t FI_EP_RDM" ]] || { echo "fi_info: stand-in answers -p efa -t FI_EP_RDM only" >&2; exit 1; }
count="$(cat /etc/ck-test/efa)"
for ((i = 0; i < count; i++)); do
    printf 'provider: efa\n    fabric: efa\n    domain: rdmap%ss0-rdm\n    version: 122.0\n' "${i}"
    printf '    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n'
done
"""

ALL_REDUCE_PERF = r"""#!/bin/bash
[[ "${SLURM_PROCID:-0}" == 0 ]] || exit 0
slowest=""
for node in $(scontrol show hostnames "${SLURM_STEP_NODELIST:-$(hostname -s)}"); do
    link="$(cat "LINKS/${node}" 2>/dev/null || echo LINK)"
    if [[ -z "${slowest}" ]] || awk -v a="${link}" -v b="${slowest}" 'BEGIN { exit !(a < b) }'; then
        slowest="${link}"
    fi
done
echo "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20"
echo "#       size         count      type   redop    root     time   algbw   busbw #wrong"
echo "# Out of bounds values : 0 OK"
echo "# Avg bus bandwidth    : ${slowest} "
""".replace("LINKS", LINKS).replace("LINK)", f"{LINK_GBPS})")


def install(node) -> None:
    """A healthy p5 as the health checks see it."""
    node.write("/usr/bin/nvidia-smi", NVIDIA_SMI, 0o755)
    node.write("/opt/amazon/efa/bin/fi_info", FI_INFO, 0o755)
    node.write("/opt/nccl-tests/build/all_reduce_perf", ALL_REDUCE_PERF, 0o755)
    healthy(node)


def healthy(node) -> None:
    gpus(node, [(H100, 0)] * GPUS)
    efa(node, EFA)
    node.run(["rm", "-f", "/etc/ck-test/gpu-hang"])


def gpus(node, rows: list[tuple[str, int]]) -> None:
    node.write("/etc/ck-test/gpus", "".join(f"{name},{ecc}\n" for name, ecc in rows))


def efa(node, count: int) -> None:
    node.write("/etc/ck-test/efa", f"{count}\n")
