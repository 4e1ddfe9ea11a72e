"""What a shared library asks the dynamic loader for: DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME.

Why: which NCCL (or CUDA runtime, or libfabric) a program really loads is decided by the loader from these
entries (ld.so(8)), not by the highest version among the files an image happens to hold. Parsed from the
file's bytes (ELF64 little-endian: x86_64 and aarch64), never by running anything from the image.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

# read(ranges) -> {range: bytes}; a range past the end of the file comes back short
RangeReader = Callable[[Sequence[Tuple[int, int]]], Dict[Tuple[int, int], bytes]]

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
HEADER_BYTES = 4096
MAX_DYNAMIC = 1 << 20
MAX_STRTAB = 64 << 20


@dataclass(frozen=True)
class Dynamic:
    needed: Tuple[str, ...]
    rpath: Tuple[str, ...]     # searched before LD_LIBRARY_PATH, and only when there is no RUNPATH
    runpath: Tuple[str, ...]   # searched after LD_LIBRARY_PATH, for this object's own NEEDED entries only
    soname: str = ""
    names: FrozenSet[str] = frozenset()  # every string of the dynamic string table (imported/exported symbol names)


def _split(value: Optional[str]) -> Tuple[str, ...]:
    return tuple(p for p in (value or "").split(":") if p)


def read_dynamic(read: RangeReader) -> Optional[Dynamic]:
    """The dynamic entries of an ELF64 little-endian object, or None (not ELF64 LE, static, truncated, garbage:
    image content is untrusted, so nothing in it can raise out of here)."""
    try:
        return _read_dynamic(read)
    except (struct.error, ValueError, OverflowError):
        return None


def _read_dynamic(read: RangeReader) -> Optional[Dynamic]:
    head = read([(0, HEADER_BYTES)])[(0, HEADER_BYTES)]
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    if phentsize < 56 or phnum == 0 or phnum > 512:
        return None
    ph_range = (phoff, phentsize * phnum)
    phdrs = head[phoff: phoff + ph_range[1]] if phoff + ph_range[1] <= len(head) else read([ph_range])[ph_range]
    if len(phdrs) < ph_range[1]:
        return None
    loads: List[Tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dyn: Optional[Tuple[int, int]] = None
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", phdrs, i * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dyn = (p_offset, min(p_filesz, MAX_DYNAMIC))
    if dyn is None:
        return None
    raw = read([dyn])[dyn]
    entries: List[Tuple[int, int]] = []
    for off in range(0, len(raw) - 15, 16):
        tag, val = struct.unpack_from("<qQ", raw, off)
        if tag == DT_NULL:
            break
        entries.append((tag, val))
    values = dict(entries)
    if DT_STRTAB not in values:
        return None
    strtab_off = next((values[DT_STRTAB] - v + o for v, o, n in loads if v <= values[DT_STRTAB] < v + n), None)
    if strtab_off is None:  # some linkers store the file offset already
        strtab_off = values[DT_STRTAB]
    st_range = (strtab_off, min(values.get(DT_STRSZ, MAX_STRTAB), MAX_STRTAB))
    strtab = read([st_range])[st_range]

    def string(index: int) -> Optional[str]:
        if index >= len(strtab):
            return None
        end = strtab.find(b"\0", index)
        return strtab[index: end if end >= 0 else len(strtab)].decode("utf-8", "surrogateescape")

    def all_of(tag: int) -> List[str]:
        return [s for t, v in entries if t == tag for s in [string(v)] if s is not None]

    rpath = all_of(DT_RPATH)
    runpath = all_of(DT_RUNPATH)
    soname = all_of(DT_SONAME)
    return Dynamic(needed=tuple(all_of(DT_NEEDED)), rpath=_split(rpath[0] if rpath else None),
                   runpath=_split(runpath[0] if runpath else None), soname=soname[0] if soname else "",
                   names=frozenset(n.decode("utf-8", "surrogateescape") for n in strtab.split(b"\0") if n))
