"""The dynamic loader's choice inside an image (library_search.py) and the ELF reader under it (elf_dynamic.py).

Real: ELF objects compiled here by gcc with chosen DT_RPATH / DT_RUNPATH / DT_NEEDED, read back by elf_dynamic;
the search order is ld.so(8)'s: DT_RPATH (ignored when DT_RUNPATH exists), LD_LIBRARY_PATH, DT_RUNPATH, the
ld.so.conf directories, the default directories. The image listings are synthetic (image_files.Entry maps).
"""
from __future__ import annotations

import subprocess

import pytest

from clusterkit_node.image.elf_dynamic import Dynamic, read_dynamic
from clusterkit_node.image.image_files import Entry
from clusterkit_node.image.library_search import LoaderSetup, conf_dirs, find_library, parse_environment


def reader(data: bytes):
    return lambda ranges: {r: data[r[0]: r[0] + r[1]] for r in ranges}


def test_elf_entries_as_the_linker_wrote_them(tmp_path):
    """gcc (make test installs it) links with each tag; the reader gets exactly what ld wrote."""
    src = tmp_path / "a.c"
    src.write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libdep.so"), str(src)], check=True)
    for flag, field in (("--disable-new-dtags", "rpath"), ("--enable-new-dtags", "runpath")):
        out = tmp_path / f"lib{field}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,--no-as-needed", f"-Wl,{flag}",
                        "-Wl,-rpath,$ORIGIN/../a:/opt/b", "-Wl,-soname,libx.so.1", f"-L{tmp_path}", "-ldep"],
                       check=True)
        dyn = read_dynamic(reader(out.read_bytes()))
        assert dyn is not None and "libdep.so" in dyn.needed and dyn.soname == "libx.so.1"
        assert getattr(dyn, field) == ("$ORIGIN/../a", "/opt/b")
        assert getattr(dyn, "runpath" if field == "rpath" else "rpath") == ()


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 58, b"not an elf at all" * 10,
                                  b"\x7fELF\x01\x01" + b"\0" * 100])
def test_garbage_is_none_never_an_exception(data):
    assert read_dynamic(reader(data)) is None


def files(*paths: str, links: dict[str, str] | None = None) -> dict[str, Entry]:
    entries = {p: Entry("f", 1) for p in paths}
    for link, target in (links or {}).items():
        entries[link] = Entry("l", len(target), target)
    for p in list(entries):
        parts = p.split("/")
        for i in range(2, len(parts)):
            entries.setdefault("/".join(parts[:i]), Entry("d", 0))
    return entries


LIBS = files("/w/nvidia/nccl/lib/libnccl.so.2", "/env/libnccl.so.2", "/run/libnccl.so.2",
             "/conf/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2")
SETUP = LoaderSetup(ld_library_path=("/env",), conf_dirs=("/conf",))
TORCH = "/w/torch/lib/libtorch_cuda.so"


@pytest.mark.parametrize("dyn,setup,want", [
    (Dynamic(("libnccl.so.2",), ("$ORIGIN/../../nvidia/nccl/lib",), ()), SETUP, "/w/nvidia/nccl/lib/libnccl.so.2"),
    # DT_RUNPATH present: DT_RPATH is ignored and LD_LIBRARY_PATH comes first
    (Dynamic(("libnccl.so.2",), ("$ORIGIN/../../nvidia/nccl/lib",), ("/run",)), SETUP, "/env/libnccl.so.2"),
    (Dynamic(("libnccl.so.2",), (), ("/run",)), LoaderSetup((), ("/conf",)), "/run/libnccl.so.2"),
    (Dynamic(("libnccl.so.2",), (), ()), LoaderSetup((), ("/conf",)), "/conf/libnccl.so.2"),
    (Dynamic(("libnccl.so.2",), (), ()), LoaderSetup((), ()), "/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
])
def test_search_order_is_ld_so_s(dyn, setup, want):
    found = find_library(LIBS, setup, "libnccl.so.2", needed_by=(TORCH, dyn))
    assert found is not None and found.path == want


def test_symlinks_resolve_inside_the_image_and_missing_is_none():
    entries = files("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5",
                    links={"/usr/lib/x86_64-linux-gnu/libnccl.so.2": "libnccl.so.2.21.5",
                           "/opt/evil/libnccl.so.2": "/../../../etc/shadow"})
    found = find_library(entries, LoaderSetup(("/opt/evil",), ()), "libnccl.so.2")
    assert found is not None and found.path == "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"
    assert find_library(entries, LoaderSetup((), ()), "libcudart.so.12") is None


def test_environment_and_ld_so_conf_as_images_write_them():
    assert parse_environment('PATH=/bin\nexport LD_LIBRARY_PATH="/a:/b"\n# x\nbad line\n') == {
        "PATH": "/bin", "LD_LIBRARY_PATH": "/a:/b"}
    texts = {"/etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n/opt/first # comment\n",
             "/etc/ld.so.conf.d/b.conf": "/opt/b\n", "/etc/ld.so.conf.d/000_efa.conf": "/opt/amazon/efa/lib\n"}
    entries = files(*texts)
    assert conf_dirs(entries, texts.get) == ["/opt/amazon/efa/lib", "/opt/b", "/opt/first"]
