"""The boot self-test's image: a tiny root file system whose /bin/sh is a static program that prints one line.

Why a hand-made program: the image must ship with the node package (no download, no compiler on nodes) and
run on x86_64 and aarch64 GPU instances alike, and enroot's ``enroot-switchroot`` runs every command through
the image's shell (``/bin/sh -c 'exec "$@"'``, enroot ``bin/enroot-switchroot.c`` ``sys_init``), so the
image's /bin/sh is the one program it needs. Each is a minimal static ELF (one PT_LOAD segment) making two
Linux system calls: write(1, MESSAGE) and exit(0). The node turns the tree into a .sqsh with its own
mksquashfs and the store's squash options, so the self-test also proves the node's squashfs-tools.
"""
from __future__ import annotations

import os
import struct
from typing import Dict

MESSAGE = b"clusterkit-selftest: container started\n"
BASE = 0x400000  # load address (64 KiB aligned: fine for 4 KiB and 64 KiB page kernels)
_EHDR, _PHDR = 64, 56


def _x86_64_code() -> bytes:
    code = (b"\xb8\x01\x00\x00\x00"            # mov eax, 1      (write)
            b"\xbf\x01\x00\x00\x00"            # mov edi, 1      (stdout)
            b"\x48\x8d\x35\x10\x00\x00\x00"    # lea rsi, [rip+16] -> MESSAGE right after the code
            + b"\xba" + struct.pack("<I", len(MESSAGE))  # mov edx, len
            + b"\x0f\x05"                      # syscall
            b"\xb8\x3c\x00\x00\x00"            # mov eax, 60     (exit)
            b"\x31\xff"                        # xor edi, edi    (status 0)
            b"\x0f\x05")                       # syscall
    assert len(code) == 33  # the lea's displacement (16) counts from its end (offset 17) to here
    return code


def _aarch64_code() -> bytes:
    def movz(reg: int, imm: int) -> int:  # MOVZ Xd, #imm
        return 0xD2800000 | (imm << 5) | reg

    words = [movz(0, 1),                        # x0 = 1 (stdout)
             0x10000000 | ((28 >> 2) << 5) | 1,  # adr x1, .+28 -> MESSAGE right after the 8 instructions
             movz(2, len(MESSAGE)),             # x2 = len
             movz(8, 64),                       # x8 = 64 (write)
             0xD4000001,                        # svc #0
             movz(0, 0),                        # x0 = 0
             movz(8, 93),                       # x8 = 93 (exit)
             0xD4000001]                        # svc #0
    return struct.pack("<8I", *words)


MACHINES = {"x86_64": (0x3E, _x86_64_code), "aarch64": (0xB7, _aarch64_code)}
ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def static_program(machine: str) -> bytes:
    """The ELF for ``machine`` (``os.uname().machine``); KeyError for one no GPU instance type has."""
    e_machine, code_of = MACHINES[ALIASES.get(machine, machine)]
    body = code_of() + MESSAGE
    size = _EHDR + _PHDR + len(body)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little endian, version 1, System V
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, e_machine, 1, BASE + _EHDR + _PHDR, _EHDR, 0, 0,
                               _EHDR, _PHDR, 1, 0, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x10000)  # PT_LOAD, R+X
    return ehdr + phdr + body


def rootfs_files(machine: str) -> Dict[str, bytes]:
    """The image's files (path -> content); /bin/sh is the program, the rest is what enroot's hooks read."""
    return {"bin/sh": static_program(machine),
            "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\n",
            "etc/group": b"root:x:0:\n",
            "etc/os-release": b'NAME="ClusterKit self-test"\nID=clusterkit-selftest\n'}


def write_rootfs(directory: str, machine: str) -> None:
    for rel, data in rootfs_files(machine).items():
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o755 if rel == "bin/sh" else 0o644)
