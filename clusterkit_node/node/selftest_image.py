"""The boot self-test's image: a tiny root file system whose /bin/sh is a static program that checks paths and
prints one line.

Why a hand-made program: the image must ship with the node package (no download, no compiler on nodes) and
run on x86_64 and aarch64 GPU instances alike, and enroot's ``enroot-switchroot`` runs every command through
the image's shell (``/bin/sh -c 'exec "$@"'``, enroot ``bin/enroot-switchroot.c`` ``sys_init``), so the
image's /bin/sh is the one program it needs. Each is a minimal static ELF (one PT_LOAD segment) making three
Linux system calls: faccessat on every absolute path it is given, write and exit. The node turns the tree into a
.sqsh with its own mksquashfs and the store's squash options, so the self-test also proves the node's squashfs-tools.

On GPU nodes the image asks for GPUs the way CUDA images do (its /etc/environment, which enroot reads as it reads
an imported image's config Env): enroot's 98-nvidia.sh hook then runs nvidia-container-cli exactly as it will for
users' jobs, and the program checks inside the container that the device nodes, libcuda and the driver's /proc
entry arrived (GPU_PATHS).
"""
from __future__ import annotations

import os
import struct
from typing import Dict

MESSAGE = b"clusterkit-selftest: container started\n"
BASE = 0x400000  # load address (64 KiB aligned: fine for 4 KiB and 64 KiB page kernels)
_EHDR, _PHDR = 64, 56


# Each program, assembled from tests/node_package/selftest_program/<machine>.S (a test re-assembles them and compares):
# position independent, so it runs wherever the one PT_LOAD segment puts it. Every argument starting with "/" must
# be readable (faccessat R_OK) or it prints "missing: <path>" and exits 1; else it prints MESSAGE and exits 0.
_X86_64 = bytes.fromhex(
    "4c8b24244c8d6c24084531f6bb010000004c39e30f8d820000004d8b7cdd0041803f2f756fb80d010000bf9cffffff4c"
    "89feba040000004531d20f054885c0745349ffc6b801000000bf01000000488d3579000000ba090000000f0548c7c2ff"
    "ffffff48ffc241803c170075f6b801000000bf010000004c89fe0f05b801000000bf01000000488d354a000000ba0100"
    "00000f0548ffc3e975ffffff4d85f67521b801000000bf01000000488d3526000000ba270000000f05b83c00000031ff"
    "0f05b83c000000bf010000000f056d697373696e673a200a636c75737465726b69742d73656c66746573743a20636f6e"
    "7461696e657220737461727465640a")
_AARCH64 = bytes.fromhex(
    "f30340f9f4230091150080d2360080d2df0213eb4a040054977a76f8e00240391fbc007181030054600c8092e10317aa"
    "820080d2030080d2080680d2010000d4a00200b4b5060091200080d201040010220180d2080880d2010000d4020080d2"
    "e36a62386300003442040091fdffff17200080d2e10317aa080880d2010000d4200080d281020030220080d2080880d2"
    "010000d4d6060091deffff17350100b5200080d281010050e20480d2080880d2010000d4000080d2a80b80d2010000d4"
    "200080d2a80b80d2010000d46d697373696e673a200a636c75737465726b69742d73656c66746573743a20636f6e7461"
    "696e657220737461727465640a")


# What a CUDA image's environment says (nvidia/cuda and NGC images set these; 98-nvidia.sh reads them).
GPU_ENVIRONMENT = b"NVIDIA_VISIBLE_DEVICES=all\nNVIDIA_DRIVER_CAPABILITIES=compute,utility\n"
# What nvidia-container-cli puts into a container that asks for that (libnvidia-container src/nvc_mount.c: the
# device nodes, the driver's libraries in /usr/lib64 for an image without /etc/debian_version (src/nvc_container.c),
# /proc/driver/nvidia/{params,version,registry}); a missing one is named by the program.
GPU_PATHS = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/usr/lib64/libcuda.so.1",
             "/usr/lib64/libnvidia-ml.so.1", "/proc/driver/nvidia/version")
MACHINES = {"x86_64": (0x3E, _X86_64), "aarch64": (0xB7, _AARCH64)}
ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def static_program(machine: str) -> bytes:
    """The ELF for ``machine`` (``os.uname().machine``); KeyError for one no GPU instance type has."""
    e_machine, body = MACHINES[ALIASES.get(machine, machine)]
    size = _EHDR + _PHDR + len(body)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, version 1, System V
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, e_machine, 1, BASE + _EHDR + _PHDR, _EHDR, 0, 0,
                               _EHDR, _PHDR, 1, 0, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x10000)  # PT_LOAD, R+X
    return ehdr + phdr + body


def rootfs_files(machine: str, gpu: bool = False) -> Dict[str, bytes]:
    """The image's files (path -> content); /bin/sh is the program, the rest is what enroot's hooks read."""
    files = {"bin/sh": static_program(machine),
             "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\n",
             "etc/group": b"root:x:0:\n",
             "etc/os-release": b'NAME="ClusterKit self-test"\nID=clusterkit-selftest\n'}
    if gpu:
        files["etc/environment"] = GPU_ENVIRONMENT
    return files


def write_rootfs(directory: str, machine: str, gpu: bool = False) -> None:
    for rel, data in rootfs_files(machine, gpu).items():
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o755 if rel == "bin/sh" else 0o644)
