"""What enroot's NVIDIA hook (98-nvidia.sh) does with an image on a GPU node, from the image's ``NVIDIA_*`` settings.

Why one module: ``clusterkit lock`` records the settings from the image config, ``validate`` judges them against the
driver of the spec's ParallelCluster AMI, and ``inspect``, the image sync and ``fingerprint`` judge them on the node
with the real driver; the rule must be the same everywhere. It follows, read from the sources (never copied):

- enroot 4.1.2 ``src/docker.sh`` writes the config's ``Env`` to the image's ``/etc/environment``; ``src/runtime.sh``
  substitutes ``${VAR}`` and ``common::envfmt`` drops comments, ill-formed and ``ENROOT_*`` lines and surrounding
  quotes; ``conf/hooks/98-nvidia.sh`` reads the ``NVIDIA_*`` lines, the last of a key winning;
- the hook: ``NVIDIA_VISIBLE_DEVICES`` unset, empty or ``void``: it exits 0 (no GPU); ``none``: no device but
  ``nvidia-container-cli configure`` still runs (driver libraries, requirements checked); ``NVIDIA_DRIVER_CAPABILITIES``
  unset or empty means ``utility`` (no libcuda); ``all`` or ``compute`` mounts libcuda; an unknown capability is
  an error (the container does not start); each ``NVIDIA_REQUIRE_*`` becomes ``--require`` unless
  ``NVIDIA_DISABLE_REQUIRE`` is non-empty;
- libnvidia-container 1.17.0 ``src/cli/dsl.c``: a requirement is alternatives separated by spaces, each a
  comma-separated conjunction of ``name op value`` (ops ``= != < <= > >=``; ``cuda`` and ``driver`` compare
  dotted numbers, ``arch`` too, ``brand`` case-insensitive text); the first alternative whose terms all hold
  satisfies it, evaluation stops at the first false term, an unknown name or malformed term reached is "invalid
  expression"; ``configure.c``: at most 32 requirements, evaluated per visible GPU, or once without a device
  (``none``) where ``brand``/``arch`` hold; ``cuda`` is the driver's CUDA version (major.minor from NVML).

Stdlib only, Python 3.9 (it ships in the node zipapp).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

PREFIX = "NVIDIA_"
CAPABILITIES = ("compute", "compat32", "display", "graphics", "utility", "video")
MAX_REQUIREMENTS = 32  # libnvidia-container src/cli/cli.h: char *reqs[32]
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_QUOTED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=[\"'](.*)[\"'][ \t\r\f\v]*\Z", re.S)
_SUBST = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_OPERATORS = ("=", "!=", "<", "<=", ">", ">=")  # dsl.c's table, in its order (the first prefix match wins)

# outcomes, worst first
REFUSED = "refused"        # the container does not start on this GPU node
NO_LIBCUDA = "no-libcuda"  # starts with GPU devices but without libcuda (CUDA error 35 in the job)
NO_GPU = "no-gpu"          # the hook does nothing: no GPU, no driver library
NO_DEVICES = "no-devices"  # NVIDIA_VISIBLE_DEVICES=none: driver libraries, no GPU device
UNKNOWN = "unknown"        # a requirement depends on what is not known here (the GPU's brand or arch, the driver)
OK = "ok"


def nvidia_settings(env: Iterable[object], host_env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The ``NVIDIA_*`` variables the hook sees, from an image config's ``Env`` (``KEY=VALUE`` strings) or the lines
    of the image's ``/etc/environment``. ``host_env``: the values enroot substitutes for ``${VAR}``. What this
    judges is the image as it starts by default: pyxis imports the job's environment into enroot's (pyxis
    pyxis_slurmstepd.c enroot_import_job_env), and a NVIDIA_* the job sets wins over the image's (98-nvidia.sh
    keeps a variable already set), measured in tests/real_runtime/test_gpu_path.py."""
    found: Dict[str, str] = {}
    host = host_env or {}
    for item in env:
        if not isinstance(item, str):
            continue
        for line in item.split("\n"):  # enroot writes a value's newline as a line break
            line = _SUBST.sub(lambda m: host.get(m.group(1), ""), line).lstrip(" \t\r\f\v")
            if not _ENV_KEY.match(line) or line.startswith("ENROOT_"):
                continue
            quoted = _QUOTED.match(line)
            if quoted:
                line = f"{quoted.group(1)}={quoted.group(2)}"
            if not line.startswith(PREFIX):
                continue
            key, _, value = line.partition("=")
            if value.endswith("=") and "=" not in value[:-1]:
                value = value[:-1]  # bash's read with IFS='=' drops a single trailing delimiter
            found[key] = value  # the last line of a key wins (the hook reads the file backwards)
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class HookPlan:
    """What the hook asks of nvidia-container-cli for these settings, before it meets a driver."""

    runs: bool                      # False: NVIDIA_VISIBLE_DEVICES unset, empty or void; the hook exits 0
    devices: str                    # NVIDIA_VISIBLE_DEVICES as given ("none": no device)
    libcuda: bool                   # compute (or all) among the capabilities
    capabilities: Tuple[str, ...]   # as the hook passes them
    requirements: Tuple[Tuple[str, str], ...]  # (variable, expression), in the hook's (name) order
    error: str = ""                 # the hook itself fails (an unknown capability)

    def summary(self) -> str:
        """One phrase for a review (the diff): what the hook will do, whatever the driver."""
        if not self.runs:
            return "no GPU (NVIDIA_VISIBLE_DEVICES unset or void)"
        if self.error:
            return f"refused: {self.error}"
        parts = ["no GPU device" if self.devices == "none" else "GPUs",
                 "libcuda" if self.libcuda else "no libcuda (NVIDIA_DRIVER_CAPABILITIES lacks compute)"]
        parts += [f"{name}='{expr}'" for name, expr in self.requirements]
        return ", ".join(parts)


def plan(settings: Dict[str, str]) -> HookPlan:
    devices = settings.get("NVIDIA_VISIBLE_DEVICES", "")
    if devices in ("", "void"):
        return HookPlan(False, devices, False, (), ())
    caps: List[str] = []
    error = ""
    for cap in (settings.get("NVIDIA_DRIVER_CAPABILITIES") or "utility").replace(",", " ").split():
        if cap == "all":
            caps = list(CAPABILITIES)
            break
        if cap not in CAPABILITIES:
            error = f"NVIDIA_DRIVER_CAPABILITIES names '{cap}', which the hook does not know"
            break
        caps.append(cap)
    reqs: Tuple[Tuple[str, str], ...] = ()
    if not settings.get("NVIDIA_DISABLE_REQUIRE"):
        reqs = tuple((k, v) for k, v in sorted(settings.items()) if k.startswith("NVIDIA_REQUIRE_"))
    if not error and len(reqs) > MAX_REQUIREMENTS:
        error = f"{len(reqs)} NVIDIA_REQUIRE_* variables, nvidia-container-cli takes {MAX_REQUIREMENTS}"
    return HookPlan(True, devices, "compute" in caps, tuple(caps), reqs, error)


@dataclass(frozen=True)
class Driver:
    """What nvidia-container-cli compares requirements with; None: not known here (so not judged)."""

    version: Optional[str]      # e.g. 580.159.04
    cuda: Optional[str]         # the driver's CUDA version, major.minor (nvidia-smi's "CUDA Version")
    brand: Optional[str] = None  # NVML's brand name, e.g. Tesla
    arch: Optional[str] = None   # the GPU's compute capability, e.g. 9.0


@dataclass(frozen=True)
class Verdict:
    outcome: str     # one of the outcomes above
    reason: str      # one line: why, naming the variable
    variable: str = ""  # the NVIDIA_* variable that decided it


def _compare_version(have: str, op: str, want: str) -> Optional[bool]:
    """dsl_compare_version: dotted numbers, missing or zero tail parts equal; None where it fails (invalid)."""
    if not re.fullmatch(r"[0-9.]*", have) or not re.fullmatch(r"[0-9.]*", want):
        return None
    a, b = have, want
    while a and b:
        ma, mb = re.match(r"[0-9]+", a), re.match(r"[0-9]+", b)
        if not ma or not mb:
            return None
        na, nb = int(ma.group()), int(mb.group())
        if na >= 2 ** 64 - 1 or nb >= 2 ** 64 - 1:
            return None
        if na != nb:
            return {"=": False, "!=": True, "<": na < nb, "<=": na < nb, ">": na > nb, ">=": na > nb}[op]
        a, b = a[ma.end():].lstrip("."), b[mb.end():].lstrip(".")
    a, b = a.lstrip(".0"), b.lstrip(".0")
    if op == "!=":
        return bool(a or b)
    if op in ("=", "<=", ">=") and not a and not b:
        return True
    if op == "=":
        return False
    return (not a and bool(b)) if op in ("<", "<=") else (bool(a) and not b)


def _term(term: str, driver: Driver, device: bool) -> Tuple[Optional[bool], bool]:
    """(value, invalid) of one ``name op value`` term; value None: unknown here."""
    m = re.match(r"([^<>=!]+)([<>=!]+)(.*)\Z", term, re.S)
    if not m:
        return None, True
    name, ops, value = m.group(1).lower(), m.group(2), m.group(3)
    op = next((o for o in _OPERATORS if o.startswith(ops)), None)  # strncmp over the operator run
    if op is None or not value or name not in ("cuda", "driver", "arch", "brand"):
        return None, True
    if name in ("arch", "brand") and not device:
        return True, False  # no device visible: libnvidia-container assumes it holds
    if name == "brand":
        if op not in ("=", "!="):
            return None, True
        if driver.brand is None:
            return None, False
        return (driver.brand.lower() == value.lower()) == (op == "="), False
    if not re.fullmatch(r"[0-9.]*", value):
        return None, True
    have = {"cuda": driver.cuda, "driver": driver.version, "arch": driver.arch}[name]
    if have is None:
        return None, False
    result = _compare_version(have, op, value)
    return (result, False) if result is not None else (None, True)


def requirement(expr: str, driver: Driver, device: bool = True) -> Tuple[Optional[bool], str]:
    """(satisfied, why not) of one ``--require`` expression, as dsl_evaluate walks it; satisfied None: it depends
    on what is not known here. A malformed term it reaches refuses the container ("invalid expression")."""
    alts = [a.split(",") for a in expr.split(" ")]
    memo: Dict[Tuple[int, int, bool], FrozenSet[Tuple[bool, str]]] = {}

    def walk(i: int, j: int, last: bool) -> FrozenSet[Tuple[bool, str]]:
        """The outcomes from alternative i, term j; ``last``: the value of the last term evaluated. An unknown
        term forks the walk (true and false), so the outcomes are every result some GPU or driver could give."""
        key = (i, j, last)
        if key not in memo:
            memo[key] = _step(alts, i, j, last, driver, device, walk)
        return memo[key]

    outcomes = walk(0, 0, True)
    if outcomes == {(True, "")}:
        return True, ""
    refusals = sorted(why for ok, why in outcomes if not ok)
    if len(refusals) == len(outcomes):
        invalid = [why for why in refusals if why.startswith("invalid")]
        return False, (invalid or refusals)[0]
    return None, "depends on " + ("the GPU's brand or architecture" if driver.version and driver.cuda
                                  else "the driver version")


def _step(alts: List[List[str]], i: int, j: int, last: bool, driver: Driver, device: bool,
          walk: Callable[[int, int, bool], FrozenSet[Tuple[bool, str]]]) -> FrozenSet[Tuple[bool, str]]:
    """dsl_evaluate's two loops (alternatives split on ' ', terms on ','), from alternative i, term j."""
    while i < len(alts):
        terms = alts[i]
        if terms == [""]:
            i, j = i + 1, 0
            continue
        while j < len(terms):
            term = terms[j]
            j += 1
            if not term:
                continue
            value, invalid = _term(term, driver, device)
            if invalid:
                return frozenset({(False, f"invalid expression '{term}'")})
            if value is None:
                return walk(i, j, True) | walk(i + 1, 0, False)
            last = value
            if not value:
                break
        else:
            return frozenset({(True, "") if last else (False, "unsatisfied")})  # every term held, or none ran
        i, j = i + 1, 0
    return frozenset({(True, "") if last else (False, "unsatisfied")})


def verdict(settings: Dict[str, str], driver: Driver) -> Verdict:
    """What the hook does with an image of these settings on a GPU node with this driver."""
    p = plan(settings)
    if not p.runs:
        shown = settings.get("NVIDIA_VISIBLE_DEVICES")
        return Verdict(NO_GPU, "NVIDIA_VISIBLE_DEVICES is " + (f"'{shown}'" if shown is not None else "not set") +
                       ": enroot's NVIDIA hook does nothing, the job sees no GPU and no driver library",
                       "NVIDIA_VISIBLE_DEVICES")
    if p.error:
        return Verdict(REFUSED, f"{p.error}: the hook fails and the container does not start",
                       "NVIDIA_DRIVER_CAPABILITIES" if "CAPABILITIES" in p.error else "NVIDIA_REQUIRE_*")
    unknown: Optional[Verdict] = None
    for name, expr in p.requirements:
        ok, why = requirement(expr, driver, device=p.devices != "none")
        if ok is False:
            first = expr.split(" ")[0]
            detail = f"'{first}' is unsatisfied" if why == "unsatisfied" else why
            return Verdict(REFUSED, f"{name}='{expr}': {detail} on driver {driver.version or '?'} (CUDA "
                           f"{driver.cuda or '?'}): nvidia-container-cli refuses to start the container", name)
        if ok is None and unknown is None:
            unknown = Verdict(UNKNOWN, f"{name}='{expr}' {why}", name)
    if p.devices == "none":
        return Verdict(NO_DEVICES, "NVIDIA_VISIBLE_DEVICES is 'none': the driver libraries but no GPU device",
                       "NVIDIA_VISIBLE_DEVICES")
    if not p.libcuda:
        caps = settings.get("NVIDIA_DRIVER_CAPABILITIES")
        shown = f"'{caps}'" if caps else "not set (the hook then gives utility only)"
        return Verdict(NO_LIBCUDA, f"NVIDIA_DRIVER_CAPABILITIES is {shown}: the job gets the GPUs but no libcuda "
                       "(CUDA error 35)", "NVIDIA_DRIVER_CAPABILITIES")
    if unknown is not None:
        return unknown
    return Verdict(OK, "GPUs and libcuda" + (f"; {', '.join(n for n, _ in p.requirements)} satisfied"
                                             if p.requirements else ""))


# What a GPU node makes of each outcome (fingerprint, inspect): a container the hook refuses fails every job that
# starts the image there, an error that stops the node (the hook's rule, as the CUDA driver floor). Without libcuda
# the image still starts, and a job can ask for compute itself (its NVIDIA_DRIVER_CAPABILITIES reaches the hook), so
# a warning: failing every GPU node's boot over one image's default would take the whole queue down with it.
NODE_LEVELS = {REFUSED: "error", NO_LIBCUDA: "warning", NO_GPU: "warning", NO_DEVICES: "warning", UNKNOWN: "warning",
               OK: ""}
_WORST_FIRST = (REFUSED, NO_LIBCUDA, NO_GPU, NO_DEVICES, UNKNOWN, OK)


def on_gpus(settings: Dict[str, str], gpus: Sequence[Driver]) -> Verdict:
    """The verdict on a node with these GPUs (one ``Driver`` per distinct GPU: the node's driver with that GPU's
    brand and arch; nvidia-container-cli checks each visible GPU): the worst of them."""
    found = [verdict(settings, gpu) for gpu in gpus] or [verdict(settings, Driver(None, None))]
    return min(found, key=lambda v: _WORST_FIRST.index(v.outcome))


def node_hint(found: Verdict, driver: Driver) -> str:
    """What to do about a verdict on a GPU node, one phrase."""
    if found.outcome == REFUSED and found.variable.startswith("NVIDIA_REQUIRE_"):
        return (f"use an image built for CUDA {driver.cuda} or older" if driver.cuda else "use an image built for "
                "this driver's CUDA") + ", or an AMI whose NVIDIA driver meets the requirement"
    if found.outcome == REFUSED:
        return "fix the image's NVIDIA_DRIVER_CAPABILITIES (" + ", ".join(CAPABILITIES) + " or all)"
    if found.outcome == NO_LIBCUDA:
        return ("use an image that sets NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all), as NVIDIA's CUDA images "
                "do, or set it in the job's environment (pyxis passes it to the hook)")
    if found.outcome in (NO_GPU, NO_DEVICES):
        return "fine for a CPU image; for GPU work the image must set NVIDIA_VISIBLE_DEVICES=all"
    if found.outcome == UNKNOWN:
        return "nvidia-container-cli checks it when a job starts the image"
    return ""
