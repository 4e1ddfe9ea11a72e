"""The self-test image's /bin/sh, both machines: assembled from its source here and compared with the bytes the node
package ships, then EXECUTED (x86_64 natively, aarch64 under qemu-aarch64) with paths that exist and paths that do
not, as the GPU self-test passes them (selftest_image.GPU_PATHS) after enroot-switchroot's own arguments."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit_node.node.selftest_image import _AARCH64, _X86_64, MESSAGE, static_program

SOURCES = Path(__file__).resolve().parent / "selftest_program"
ASSEMBLERS = {"x86_64": (("as", "--64"), "objcopy", _X86_64),
              "aarch64": (("aarch64-linux-gnu-as",), "aarch64-linux-gnu-objcopy", _AARCH64)}


@pytest.mark.parametrize("machine", sorted(ASSEMBLERS))
def test_shipped_bytes_are_the_assembled_source(tmp_path: Path, machine: str) -> None:
    assembler, objcopy, shipped = ASSEMBLERS[machine]
    for tool in (assembler[0], objcopy):
        assert shutil.which(tool), f"{tool} is missing: `make test` installs binutils and binutils-aarch64-linux-gnu"
    obj, raw = tmp_path / "p.o", tmp_path / "p.bin"
    subprocess.run([*assembler, "-o", str(obj), str(SOURCES / f"{machine}.S")], check=True)
    relocs = subprocess.run([objcopy.replace("objcopy", "objdump"), "-r", str(obj)], capture_output=True, text=True,
                            check=True).stdout
    assert "R_" not in relocs, f"the program must be position independent:\n{relocs}"
    subprocess.run([objcopy, "-O", "binary", "-j", ".text", str(obj), str(raw)], check=True)
    assert raw.read_bytes() == shipped, (f"clusterkit_node/node/selftest_image.py's bytes for {machine} are not "
                                         f"{SOURCES / machine}.S assembled: paste bytes.fromhex of {raw}")
    assert MESSAGE in shipped


def _run(machine: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    program = tmp_path / f"sh-{machine}"
    program.write_bytes(static_program(machine))
    program.chmod(0o755)
    argv = [str(program), "-c", 'exec "$@"', "sh", "/bin/sh", *args]  # what enroot-switchroot runs
    if platform.machine() != machine:
        qemu = shutil.which(f"qemu-{machine}")
        assert qemu, f"qemu-{machine} is missing: `make test` installs qemu-user (Makefile DEB_PACKAGES)"
        argv = [qemu, *argv]
    return subprocess.run(argv, capture_output=True, timeout=30)


@pytest.mark.parametrize("machine", sorted(ASSEMBLERS))
def test_every_readable_path_passes(tmp_path: Path, machine: str) -> None:
    present = tmp_path / "libcuda.so.1"
    present.write_bytes(b"x")
    proc = _run(machine, tmp_path, str(present), "/proc/self/status", "not-a-path")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, MESSAGE, b"")


@pytest.mark.parametrize("machine", sorted(ASSEMBLERS))
def test_each_missing_path_is_named_and_fails(tmp_path: Path, machine: str) -> None:
    present = tmp_path / "present"
    present.write_bytes(b"x")
    unreadable = tmp_path / "unreadable"
    unreadable.write_bytes(b"x")
    unreadable.chmod(0)
    gone = tmp_path / "dev" / "nvidiactl"
    args = [str(present), str(gone), "/usr/lib64/libcuda.so.1-not-here"]
    if os.geteuid() != 0:  # root reads anything: R_OK cannot fail for it
        args.append(str(unreadable))
    proc = _run(machine, tmp_path, *args)
    expected = [f"missing: {gone}", "missing: /usr/lib64/libcuda.so.1-not-here"]
    if os.geteuid() != 0:
        expected.append(f"missing: {unreadable}")
    assert proc.returncode == 1
    assert proc.stdout.decode().splitlines() == expected
    assert MESSAGE not in proc.stdout
