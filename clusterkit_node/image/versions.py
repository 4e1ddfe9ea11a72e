"""Software versions inside a .sqsh (CUDA, NCCL, aws-ofi-nccl, EFA installer, libfabric, PyTorch), read as
the image's programs will meet them, and whether they match what the lock expects.

Why: an image whose versions contradict the lock's ``expect`` never gets the stable name, so jobs never start
on a stack nobody asked for; and a reviewer can only trust "NCCL 2.32.3" when it is the NCCL the job loads.
So versions come from the binaries themselves (the string NCCL compiles in, the plugin's own version, the
libfabric the plugin links), and where an image holds several copies, the loader decides which one counts
(library_search.py: PyTorch's DT_RPATH before LD_LIBRARY_PATH before ld.so.conf). File names, headers,
dist-info and the EFA installer's package list are fallbacks. Nothing from the image is executed.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clusterkit_node.contract.console import log
from clusterkit_node.image.elf_dynamic import Dynamic, read_dynamic
from clusterkit_node.image.image_files import Entry, cat_file, is_file, list_image, read_ranges, resolve, search
from clusterkit_node.image.library_search import Found, LoaderSetup, find_library

__all__ = ["Entry", "Inspection", "KNOWN_VERSION_KEYS", "Reading", "expect_problems", "inspect_image",
           "list_image", "parse_efa_packages", "read_versions", "resolve", "version_key", "version_matches"]

NCCL_STRING = re.compile(rb"NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+(?:\.\d+)*))?")
OFI_STRING = re.compile(rb"aws-ofi-nccl (\d+\.\d+(?:\.\d+)?)")
# libfabric compiles its PACKAGE_VERSION in as a string of its own (fi_tostr's FI_TYPE_VERSION)
FABRIC_STRING = re.compile(rb"\0(\d+\.\d+\.\d+(?:amzn\d+(?:\.\d+)*)?)\0")
CUDART_NAME = re.compile(r"libcudart\.so\.(\d+)\.(\d+)(?:\.\d+)*$")
NCCL_LIB = re.compile(r"libnccl\.so(?:\.\d+)*$")


@dataclass(frozen=True)
class Reading:
    version: str
    source: str  # the file it was read from and how, e.g. "/usr/lib/.../libnccl.so.2 (embedded 'NCCL version ...')"


@dataclass
class Inspection:
    """What ``inspect_image`` found: one reading per component, and notes on what did not count and why."""
    readings: Dict[str, Reading] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    @property
    def versions(self) -> Dict[str, str]:
        return {k: r.version for k, r in sorted(self.readings.items())}


def version_key(v: str) -> Tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.+-]", v))


def parse_efa_packages(text: str) -> Dict[str, str]:
    """/opt/amazon/efa_installed_packages as written by efa_installer.sh::write_package_file:
    '# EFA installer version: 1.38.0' then the package file names (deb name_ver_arch or rpm
    name-ver-rel.arch), whitespace separated."""
    found: Dict[str, str] = {}
    m = re.search(r"^#\s*EFA installer version:\s*(\S+)", text, re.M)
    if m:
        found["efa_installer"] = m.group(1)
    for token in text.split():
        for key, pat in (("aws_ofi_nccl", r"libnccl-ofi"), ("libfabric", r"libfabric1?-aws")):
            mt = re.match(pat + r"(?:-[A-Za-z][A-Za-z0-9]*)*[-_](\d[^_\s-]*)", token)
            if mt and key not in found:
                found[key] = mt.group(1)
    return found


def in_site_packages(path: str) -> bool:
    return "/site-packages/" in path or "/dist-packages/" in path


class _Image:
    """One image's listing plus the readers every component shares (files, ELF entries, the loader)."""

    def __init__(self, sqsh: str):
        self.sqsh = sqsh
        self.entries = list_image(sqsh)
        self.loader = LoaderSetup.of_image(self.entries, self.read_text)
        self._dynamic: Dict[str, Optional[Dynamic]] = {}

    def read_text(self, path: str) -> Optional[str]:
        real = is_file(self.entries, path)
        data = cat_file(self.sqsh, real) if real else None
        return data.decode("utf-8", "replace") if data is not None else None

    def files(self, name_re: "re.Pattern[str]", under: str = "/") -> List[str]:
        """Regular files (symlinks resolved, each once) whose name matches, sorted by path."""
        real = {is_file(self.entries, p) for p, e in self.entries.items()
                if p.startswith(under) and e.kind in "fl" and name_re.search(posixpath.basename(p))}
        return sorted(p for p in real if p)

    def dynamic(self, path: str) -> Optional[Dynamic]:
        if path not in self._dynamic:
            self._dynamic[path] = read_dynamic(lambda ranges: read_ranges(self.sqsh, path, ranges))
        return self._dynamic[path]

    def needed(self, path: str, name_re: "re.Pattern[str]") -> Optional[Tuple[str, Optional[Found]]]:
        """(the NEEDED name matching ``name_re``, where the loader finds it) for the object at ``path``."""
        dyn = self.dynamic(path)
        name = next((n for n in (dyn.needed if dyn else ()) if name_re.fullmatch(n)), None)
        if dyn is None or name is None:
            return None
        return name, find_library(self.entries, self.loader, name, needed_by=(path, dyn))

    def embedded(self, path: str, pattern: "re.Pattern[bytes]") -> Optional["re.Match[bytes]"]:
        hit = search(self.sqsh, path, pattern)
        return pattern.search(hit) if hit else None


def _wheel_version(img: _Image, lib: str, dist: str) -> Optional[str]:
    """The version of the pip wheel ``dist`` (e.g. nvidia_nccl_cu12) that installed ``lib``:
    site-packages/<dist>-<version>.dist-info next to the nvidia/ tree holding the library."""
    m = re.match(r"(.*/(?:site|dist)-packages)/", lib)
    if not m:
        return None
    name_re = re.compile(rf"{dist}-(\d[\w.]*)\.dist-info")
    versions = sorted((hit.group(1) for p in img.entries
                       if posixpath.dirname(p) == m.group(1)
                       for hit in [name_re.fullmatch(posixpath.basename(p))] if hit), key=version_key)
    return versions[-1] if versions else None


def _torch_libs(img: _Image) -> List[str]:
    """PyTorch's CUDA libraries (site-packages/torch/lib/libtorch_cuda*.so), the ones that load NCCL."""
    return [p for p in img.files(re.compile(r"^libtorch_cuda(?:_\w+)?\.so$")) if in_site_packages(p)
            and p.rsplit("/", 3)[-3] == "torch"]


def _nccl_version(img: _Image, lib: str) -> Optional[Reading]:
    hit = img.embedded(lib, NCCL_STRING)
    if hit:
        return Reading(hit.group(1).decode(), f"{lib} (embedded '{hit.group(0).decode()}')")
    m = re.search(r"libnccl\.so\.(\d+\.\d+\.\d+)$", lib)
    if m:
        return Reading(m.group(1), f"{lib} (file name)")
    wheel = _wheel_version(img, lib, r"nvidia_nccl(?:_cu\d+)?")
    return Reading(wheel, f"{lib} (its wheel's dist-info)") if wheel else None


def _read_nccl(img: _Image, out: Inspection) -> None:
    libs = [p for p in img.files(NCCL_LIB) if not posixpath.basename(p).startswith("libnccl-net")]
    readings = {lib: r for lib in libs for r in [_nccl_version(img, lib)] if r}
    chosen: Optional[Tuple[str, str]] = None  # (library, why it counts)
    for torch_lib in _torch_libs(img):
        need = img.needed(torch_lib, re.compile(r"libnccl\.so(?:\.\d+)*"))
        if need and need[1]:
            chosen = (need[1].path, f"loaded by PyTorch: {torch_lib} needs {need[0]}, found by {need[1].via}")
            break
        if need is None:  # NCCL linked statically into PyTorch (older wheels)
            hit = img.embedded(torch_lib, NCCL_STRING)
            if hit:
                out.readings["nccl"] = Reading(hit.group(1).decode(),
                                               f"{torch_lib} (NCCL linked into PyTorch: '{hit.group(0).decode()}')")
                chosen = (torch_lib, "linked into PyTorch")
                break
    if chosen is None:
        found = find_library(img.entries, img.loader, "libnccl.so.2")
        if found:
            chosen = (found.path, f"found by the dynamic loader ({found.via})")
    if chosen is None and len(readings) == 1:
        chosen = (next(iter(readings)), "the only NCCL in the image")
    if chosen is None and readings:
        best = max(readings, key=lambda p: version_key(readings[p].version))
        chosen = (best, "the highest of several, none on the loader's path")
    if chosen and chosen[0] in readings:
        r = readings[chosen[0]]
        out.readings["nccl"] = Reading(r.version, f"{r.source}; {chosen[1]}")
    others = sorted(f"{readings[p].version} at {p}" for p in readings if not chosen or p != chosen[0])
    if others and "nccl" in out.readings:
        out.notes.append(f"NCCL {out.readings['nccl'].version} counts; "
                         f"also present but not loaded: {', '.join(others)}")
    if "nccl" in out.readings:
        return
    for p in sorted(p for p in img.entries if p.endswith("/include/nccl.h") and not in_site_packages(p)):
        txt = img.read_text(p) or ""
        parts = [re.search(rf"#define\s+NCCL_{k}\s+(\d+)", txt) for k in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            out.readings["nccl"] = Reading(".".join(x.group(1) for x in parts), f"{p} (header)")  # type: ignore[union-attr]
            return
    for p in sorted(img.entries):
        m = re.search(r"/nvidia_nccl_cu\d+-(\d[\w.]*)\.dist-info$", p)
        if m:
            out.readings["nccl"] = Reading(m.group(1), f"{p} (wheel metadata, no library found)")
            return


def _cuda_from_toolkit(img: _Image, d: str) -> Optional[Reading]:
    txt = img.read_text(f"{d}/version.json")
    if txt:
        try:
            v = json.loads(txt).get("cuda", {}).get("version")
            if isinstance(v, str) and v:
                return Reading(v, f"{resolve(img.entries, d + '/version.json')} (toolkit version.json)")
        except (ValueError, AttributeError):
            pass
    txt = img.read_text(f"{d}/version.txt")
    m = re.search(r"CUDA Version\s+(\d[\w.]*)", txt or "")
    return Reading(m.group(1), f"{resolve(img.entries, d + '/version.txt')} (toolkit version.txt)") if m else None


def _cuda_from_runtime(img: _Image, lib: str) -> Optional[Reading]:
    """CUDA X.Y of a libcudart: its file name (libcudart.so.12.9.79), else its wheel (dist-info, cross-checked
    with CUDART_VERSION in the wheel's cuda_runtime_api.h). The toolkit's patch level is not knowable here."""
    m = CUDART_NAME.search(lib)
    if m:
        return Reading(f"{m.group(1)}.{m.group(2)}", f"{lib} (CUDA runtime file name)")
    wheel = _wheel_version(img, lib, r"nvidia_cuda_runtime(?:_cu\d+)?")
    if not wheel:
        return None
    major_minor = ".".join(wheel.split(".")[:2])
    header = img.read_text(posixpath.join(posixpath.dirname(posixpath.dirname(lib)), "include", "cuda_runtime_api.h"))
    hm = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", header or "")
    if hm:
        from_header = f"{int(hm.group(1)) // 1000}.{int(hm.group(1)) % 1000 // 10}"
        if from_header != major_minor:
            return Reading(from_header, f"{lib} (CUDART_VERSION {hm.group(1)}; its wheel says {wheel})")
        return Reading(major_minor, f"{lib} (wheel nvidia-cuda-runtime {wheel}, CUDART_VERSION {hm.group(1)})")
    return Reading(major_minor, f"{lib} (wheel nvidia-cuda-runtime {wheel})")


def _read_cuda(img: _Image, out: Inspection) -> None:
    for torch_lib in _torch_libs(img):
        need = img.needed(torch_lib, re.compile(r"libcudart\.so(?:\.\d+)*"))
        if need and need[1]:
            r = _cuda_from_runtime(img, need[1].path)
            if r:
                out.readings["cuda"] = Reading(r.version, f"{r.source}; loaded by PyTorch ({need[1].via})")
                return
    reading = _cuda_from_toolkit(img, "/usr/local/cuda")
    if not reading:
        dirs = sorted((p for p, e in img.entries.items()
                       if e.kind == "d" and re.fullmatch(r"/usr/local/cuda-\d+(\.\d+)*", p)),
                      key=lambda p: version_key(p.rsplit("-", 1)[1]), reverse=True)
        reading = next((r for d in dirs for r in [_cuda_from_toolkit(img, d)] if r), None)
    if not reading:
        runtimes = [r for lib in img.files(re.compile(r"^libcudart\.so(?:\.\d+)*$"))
                    for r in [_cuda_from_runtime(img, lib)] if r]
        reading = max(runtimes, key=lambda r: (not in_site_packages(r.source), version_key(r.version)),
                      default=None)
    if reading:
        out.readings["cuda"] = reading


def _read_ofi(img: _Image, out: Inspection, efa: Dict[str, str]) -> None:
    plugins: List[Tuple[str, str]] = []  # (path, why it counts)
    found = find_library(img.entries, img.loader, "libnccl-net.so")
    if found:
        plugins.append((found.path, f"the plugin NCCL loads (libnccl-net.so, {found.via})"))
    for root in ("/opt/aws-ofi-nccl/", "/opt/amazon/ofi-nccl/"):
        plugins += [(p, "installed under " + root.rstrip("/") + ", not on the loader's path")
                    for p in img.files(re.compile(r"^libnccl-net.*\.so$"), root)]
    for path, why in plugins:
        hit = img.embedded(path, OFI_STRING)
        if not hit:
            continue
        out.readings["aws_ofi_nccl"] = Reading(hit.group(1).decode(), f"{path} ('{hit.group(0).decode()}'); {why}")
        need = img.needed(path, re.compile(r"libfabric\.so(?:\.\d+)*"))
        if need and need[1]:
            fab = img.embedded(need[1].path, FABRIC_STRING)
            if fab:
                out.readings["libfabric"] = Reading(fab.group(1).decode(), f"{need[1].path} (its version string); "
                                                    f"linked by the plugin, found by {need[1].via}")
        elif need:
            out.notes.append(f"{path} needs {need[0]}, which the loader does not find in the image")
        return
    if "aws_ofi_nccl" in efa:
        out.readings["aws_ofi_nccl"] = Reading(efa["aws_ofi_nccl"], "/opt/amazon/efa_installed_packages (package list)")


def inspect_image(sqsh: str) -> Inspection:
    """Every version the image reveals, each with where it was read and why that copy counts.

    cuda          the CUDA runtime PyTorch loads (its wheel or file name), else /usr/local/cuda's version.json
                  or version.txt (following the cuda -> cuda-X.Y chain), else the highest /usr/local/cuda-*,
                  else any libcudart (system before pip)
    nccl          the embedded "NCCL version X.Y.Z" of the libnccl PyTorch loads (its DT_RPATH/RUNPATH), else
                  the one the loader finds (LD_LIBRARY_PATH, ld.so.conf, default dirs), else the only one, else
                  the highest; file name and wheel dist-info when the string is missing; else include/nccl.h
    aws_ofi_nccl  the "aws-ofi-nccl X.Y.Z" string of the plugin NCCL loads (libnccl-net.so on the loader's
                  path), else of one under /opt/aws-ofi-nccl or /opt/amazon/ofi-nccl, else the package list
    libfabric     the version string of the libfabric.so.1 the plugin links, else the libfabric-aws package
    efa_installer '# EFA installer version:' in /opt/amazon/efa_installed_packages
    pytorch       __version__ in .../site-packages|dist-packages/torch/version.py
    """
    img = _Image(sqsh)
    out = Inspection()
    _read_cuda(img, out)
    _read_nccl(img, out)
    efa = parse_efa_packages(img.read_text("/opt/amazon/efa_installed_packages") or "")
    if "efa_installer" in efa:
        out.readings["efa_installer"] = Reading(efa["efa_installer"], "/opt/amazon/efa_installed_packages")
    _read_ofi(img, out, efa)
    if "libfabric" not in out.readings and "libfabric" in efa:
        out.readings["libfabric"] = Reading(efa["libfabric"], "/opt/amazon/efa_installed_packages (package list)")
    for p in sorted((p for p in img.entries if p.endswith("/torch/version.py") and in_site_packages(p)), key=len):
        txt = img.read_text(p) or ""
        m = re.search(r"^__version__\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)['\"]", txt, re.M)
        if m:
            out.readings["pytorch"] = Reading(m.group(1), f"{p}")
            cm = re.search(r"^cuda\s*(?::\s*[\w\[\]]+\s*)?=\s*['\"]([^'\"]+)['\"]", txt, re.M)
            if cm:
                out.notes.append(f"PyTorch {m.group(1)} was built for CUDA {cm.group(1)}")
            break
    return out


def read_versions(sqsh: str) -> Dict[str, str]:
    """The versions ``inspect_image`` reads, as the manifest records them; notes go to the log."""
    found = inspect_image(sqsh)
    for note in found.notes:
        log(f"{os.path.basename(sqsh)}: {note}")
    return found.versions

KNOWN_VERSION_KEYS = ("aws_ofi_nccl", "cuda", "efa_installer", "libfabric", "nccl", "pytorch")


def version_matches(expect: str, found: str) -> bool:
    """Prefix match on version boundaries: 12.8 matches 12.8.1 and 12.8, not 12.80."""
    if found == expect:
        return True
    return bool(expect) and found.startswith(expect) and not found[len(expect)].isdigit()


def expect_problems(expect: Dict[str, str], versions: Dict[str, str]) -> List[str]:
    problems = []
    for key in sorted(expect):
        want = expect[key]
        if key not in KNOWN_VERSION_KEYS:
            problems.append(f"cannot check expect {key} (known: {', '.join(KNOWN_VERSION_KEYS)})")
        elif key not in versions:
            problems.append(f"expected {key} {want}, found none")
        elif not version_matches(want, versions[key]):
            problems.append(f"expected {key} {want}, found {versions[key]}")
    return problems
