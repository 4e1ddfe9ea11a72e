"""``nccl-check``: which network NCCL used, read from its ``NCCL_DEBUG=INFO`` output.

On EFA instances NCCL reaches the fabric only through the aws-ofi-nccl plugin (``NET/OFI``, network
"AWS Libfabric" or "Libfabric"). When the plugin is missing, misnamed or fails to start, NCCL quietly
falls back to its internal transports: IB verbs (none on EFA) and then TCP sockets (``NET/Socket``),
and the job still runs, at a fraction of the bandwidth. This module reads the lines NCCL 2.x prints:

  ip-10-1-2-3:1234:1234 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)
  ip-10-1-2-3:1234:1234 [0] NCCL INFO Using network AWS Libfabric          (or: Libfabric, Socket, IB)
  ip-10-1-2-3:1234:1234 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA
  ip-10-1-2-3:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>
  ip-10-1-2-3:1234:1234 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so

per host, whatever a launcher put in front of them (``[1,3]<stdout>:``, ``0: ``, timestamps). A host's
transport comes from its strongest evidence: channel lines (``via NET/<name>``) and ``Using network
<name>`` first, then ``NET/OFI Selected provider`` / ``NET/IB : Using`` / ``NET/Socket : Using``. Old NCCL
versions print ``NET/Socket : Using`` for the bootstrap even when the plugin carries the data, so that
line alone never outweighs OFI evidence.

Exit codes (``check``): 0 the transport is the expected one on every host (``--expect ofi``: NET/OFI with
the efa provider), 1 it is not (one line naming the hosts and the evidence, plus what to check), 2 no
transport line at all (was NCCL_DEBUG=INFO set?) or a usage error.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

from clusterkit_node.contract.console import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, error, log

EXPECTATIONS = ("ofi", "socket", "any")
TRANSPORTS = ("ofi", "socket", "ib", "unknown")

HINT_OFI = ("check: FI_PROVIDER=efa; the image has aws-ofi-nccl (/opt/amazon/ofi-nccl or /opt/aws-ofi-nccl) and "
            "its lib directory is on LD_LIBRARY_PATH; NCCL_NET_PLUGIN names it (unset: NCCL loads "
            "libnccl-net.so; NCCL_NET_PLUGIN=x: x or libnccl-net-x.so); the EFA security group allows all "
            "traffic to and from itself")

# host:pid:tid [dev] NCCL INFO message; anything before it (launcher prefixes) is ignored.
_PREFIXED = re.compile(r"(?P<host>[A-Za-z0-9][\w.\-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                       r"NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_BARE = re.compile(r"NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")

_CHANNEL = re.compile(r"^(?:Channel|Ring) \d+(?:/\d+)? : (?P<src>\d+)(?:\[[0-9a-fA-F]+\])? -> (?P<dst>\d+)"
                      r"(?:\[[0-9a-fA-F]+\])?(?: \[(?:send|receive)\])? via NET/(?P<net>[^/]+)/")
_USING_NETWORK = re.compile(r"^Using network (?P<net>.+?)\s*$")
_OFI_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is (?P<provider>[^,(\s]+)")
_OFI_VERSION = re.compile(r"^NET/OFI (?:Initializing|Using) aws-ofi-nccl (?P<version>\S+)")
_OFI_ANY = re.compile(r"^NET/OFI ")
_SOCKET_USING = re.compile(r"^NET/Socket ?: ?Using ")
_IB_USING = re.compile(r"^NET/IB ?: ?Using ")
_RANK_OF_COMM = re.compile(r"\brank (?P<rank>\d+) nranks \d+")
_TEST_RANK = re.compile(r"#\s+Rank\s+(?P<rank>\d+)\b.*\bon\s+(?P<host>\S+)\s+device")

# NET/Plugin lines that mean no external network plugin is in use on that rank
_PLUGIN_FAILURES = (
    re.compile(r"^NET/Plugin ?: ?(?P<what>No plugin found \(\S+?\))"),
    re.compile(r"^NET/Plugin ?: ?(?P<what>Plugin load (?:\(\S+\) )?returned \d+ : .+?)(?: : when loading \S+)?$"),
    re.compile(r"^NET/Plugin ?: ?(?P<what>Could not find: ?.+?)\.?$"),
    re.compile(r"^NET/Plugin ?: ?dlerror=(?P<what>.+?)(?: No plugin found.*)?$"),
    re.compile(r"^NET/Plugin ?: ?(?P<what>Failed to find ncclNetPlugin symbol.*)$"),
    re.compile(r"^NET/Plugin ?: ?(?P<what>lib\S+\.so: .+)$"),
)
_PLUGIN_LOADED = re.compile(r"^NET/Plugin ?: ?Loaded net plugin (?P<name>.+?)\s*$")


def network_transport(name: str) -> str:
    """NCCL's network name (``Using network X``, ``via NET/X/``) as ofi|socket|ib|unknown."""
    low = name.strip().lower()
    if "libfabric" in low or low in ("ofi", "aws-ofi"):
        return "ofi"
    if low == "socket":
        return "socket"
    if low.startswith("ib"):
        return "ib"
    return "unknown"


@dataclass
class HostEvidence:
    strong: Dict[str, List[str]] = field(default_factory=dict)  # transport -> lines (channel, Using network)
    weak: Dict[str, List[str]] = field(default_factory=dict)    # transport -> lines (provider, NET/x : Using)
    providers: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    plugin_loaded: bool = False

    def transports(self) -> List[str]:
        if self.strong:
            return sorted(self.strong)
        if "ofi" in self.weak or "ib" in self.weak:
            return sorted(t for t in self.weak if t != "socket")
        return sorted(self.weak)

    def evidence(self, transport: str) -> List[str]:
        return self.strong.get(transport) or self.weak.get(transport) or []


@dataclass
class NcclTransport:
    """What one NCCL_DEBUG=INFO log says about the network NCCL used."""
    transport: str = "unknown"                                   # ofi | socket | ib | unknown
    provider: Optional[str] = None                               # libfabric provider, e.g. "efa"
    plugin_version: Optional[str] = None                         # aws-ofi-nccl version, when logged
    hosts: Dict[str, str] = field(default_factory=dict)          # host -> its transport
    ranks: List[int] = field(default_factory=list)
    evidence: List[str] = field(default_factory=list)            # a few lines that decided it
    problems: List[str] = field(default_factory=list)            # "plugin not loaded: ..." etc.
    info_lines: int = 0                                          # NCCL INFO lines read


def _add(bucket: Dict[str, List[str]], transport: str, line: str) -> None:
    lines = bucket.setdefault(transport, [])
    if len(lines) < 3 and line not in lines:
        lines.append(line)


def _note(problems: List[str], problem: str) -> None:
    if problem not in problems:
        problems.append(problem)


def parse(text: str) -> Tuple[NcclTransport, Dict[str, HostEvidence]]:
    result = NcclTransport()
    per_host: Dict[str, HostEvidence] = {}
    ranks = set()
    providers: List[str] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        test_rank = _TEST_RANK.search(line)
        if test_rank:
            ranks.add(int(test_rank.group("rank")))
            continue
        m = _PREFIXED.search(line) or _BARE.search(line)
        if not m:
            continue
        host = m.group("host") if "host" in m.groupdict() and m.group("host") else "?"
        level, msg = m.group("level"), m.group("msg").strip()
        ev = per_host.setdefault(host, HostEvidence())
        shown = m.group(0).strip()
        if level == "WARN":
            if msg.startswith("NET/OFI") or "NET/OFI" in msg:
                _note(ev.problems, f"aws-ofi-nccl: {msg}")
            continue
        result.info_lines += 1
        comm = _RANK_OF_COMM.search(msg)
        if comm:
            ranks.add(int(comm.group("rank")))
        ch = _CHANNEL.match(msg)
        if ch:
            ranks.add(int(ch.group("src")))
            _add(ev.strong, network_transport(ch.group("net")), shown)
            continue
        un = _USING_NETWORK.match(msg)
        if un:
            _add(ev.strong, network_transport(un.group("net")), shown)
            continue
        prov = _OFI_PROVIDER.match(msg)
        if prov:
            provider = prov.group("provider")
            if provider not in ev.providers:
                ev.providers.append(provider)
            if provider not in providers:
                providers.append(provider)
            _add(ev.weak, "ofi", shown)
            continue
        ver = _OFI_VERSION.match(msg)
        if ver:
            result.plugin_version = result.plugin_version or ver.group("version")
            ev.plugin_loaded = True
            continue
        if _OFI_ANY.match(msg):
            ev.plugin_loaded = True
            continue
        if _SOCKET_USING.match(msg):
            _add(ev.weak, "socket", shown)
            continue
        if _IB_USING.match(msg):
            _add(ev.weak, "ib", shown)
            continue
        if _PLUGIN_LOADED.match(msg):
            ev.plugin_loaded = True
            continue
        for pattern in _PLUGIN_FAILURES:
            fail = pattern.match(msg)
            if fail:
                _note(ev.problems, f"plugin not loaded: {fail.group('what').strip()}")
                break
    result.ranks = sorted(ranks)
    result.provider = ",".join(providers) if providers else None
    for host in sorted(per_host):
        ev = per_host[host]
        seen = ev.transports()
        if seen:
            # one socket channel is enough to call the host a socket host
            result.hosts[host] = "socket" if "socket" in seen else seen[0] if len(seen) == 1 else "unknown"
        elif ev.problems:
            result.hosts[host] = "unknown"
        for problem in ev.problems:
            _note(result.problems, f"{host}: {problem}" if host != "?" else problem)
        for provider in ev.providers:
            if not provider.startswith("efa"):
                _note(result.problems, f"{host}: aws-ofi-nccl selected provider {provider}, not efa (TCP, not EFA)")
    per_host = {h: ev for h, ev in per_host.items() if h in result.hosts}
    kinds = set(result.hosts.values())
    if "socket" in kinds:
        result.transport = "socket"
    elif len(kinds) == 1:
        result.transport = kinds.pop()
    for host, transport in result.hosts.items():
        for line in per_host[host].evidence(result.transport if result.transport != "unknown" else transport):
            if len(result.evidence) < 6:
                result.evidence.append(line)
    return result, per_host


_NAMED_PLUGIN = re.compile(r"libnccl-net-(?P<name>[\w.\-]+?)\.so")


def naming_hint(problem: str) -> str:
    """NCCL_NET_PLUGIN=x makes NCCL look for x and libnccl-net-x.so only: a plugin installed under another
    name (libnccl-net.so, libnccl-net-ofi.so, libnccl-net-aws.so) is never loaded."""
    named = _NAMED_PLUGIN.search(problem)
    if not named:
        return ""
    name = named.group("name")
    return (f"NCCL_NET_PLUGIN={name} makes NCCL look for {name} and libnccl-net-{name}.so only: set it to the "
            "file the image has (ls /opt/amazon/ofi-nccl/lib*/libnccl-net*.so) or unset it; ")


def _hosts_line(hosts: List[str]) -> str:
    shown = ", ".join(hosts[:8])
    return shown + (f" and {len(hosts) - 8} more" if len(hosts) > 8 else "")


def verdict(result: NcclTransport, per_host: Dict[str, HostEvidence], expect: str) -> Tuple[int, str]:
    """(exit code, the one line that says why)."""
    if not result.hosts:
        return EXIT_USAGE, ("no NCCL transport lines in the log (NCCL INFO lines read: "
                            f"{result.info_lines}): was NCCL_DEBUG=INFO set, and did NCCL initialize?")
    summary = (f"NCCL transport {result.transport} on {len(result.hosts)} host(s)"
               + (f", provider {result.provider}" if result.provider else "")
               + (f", aws-ofi-nccl {result.plugin_version}" if result.plugin_version else ""))
    if expect == "any":
        return EXIT_OK, summary
    if expect == "socket":
        others = sorted(h for h, t in result.hosts.items() if t != "socket")
        if not others:
            return EXIT_OK, summary
        ev = per_host[others[0]]
        transport = result.hosts[others[0]]
        why = (ev.evidence(transport)[:1] or ev.problems[:1] or ["no transport line"])[0]
        return EXIT_FAILED, f"expected TCP sockets, but NCCL used {transport} on {_hosts_line(others)}: {why}"
    socket_hosts = sorted(h for h, t in result.hosts.items() if t == "socket")
    if socket_hosts:
        first = per_host[socket_hosts[0]]
        why = first.evidence("socket")[0]
        plugin = next((p for p in first.problems if p.startswith("plugin not loaded")), "")
        return EXIT_FAILED, (f"NCCL fell back to TCP sockets (NET/Socket), not EFA, on {_hosts_line(socket_hosts)}: "
                             f"{why}" + (f" [{plugin}]" if plugin else "") + f" ({naming_hint(plugin)}{HINT_OFI})")
    not_efa = sorted(h for h, ev in per_host.items()
                     if result.hosts[h] == "ofi" and any(not p.startswith("efa") for p in ev.providers))
    if not_efa:
        ev = per_host[not_efa[0]]
        provider = next(p for p in ev.providers if not p.startswith("efa"))
        return EXIT_FAILED, (f"aws-ofi-nccl runs over libfabric provider {provider} (TCP), not efa, on "
                             f"{_hosts_line(not_efa)}: {ev.evidence('ofi')[0]} ({HINT_OFI})")
    other = sorted(h for h, t in result.hosts.items() if t != "ofi")
    if other:
        ev = per_host[other[0]]
        transport = result.hosts[other[0]]
        why = (ev.evidence(transport)[:1] or ev.problems[:1] or ["no transport line"])[0]
        return EXIT_FAILED, (f"NCCL did not use EFA (NET/OFI) on {_hosts_line(other)} ({transport}): {why} "
                             f"({HINT_OFI})")
    return EXIT_OK, summary


def check_text(text: str, expect: str = "ofi") -> Tuple[int, str, NcclTransport]:
    if expect not in EXPECTATIONS:
        raise UsageError([f"--expect must be one of {', '.join(EXPECTATIONS)}, not {expect!r}"])
    result, per_host = parse(text)
    code, line = verdict(result, per_host, expect)
    return code, line, result


def _read(paths: List[str]) -> str:
    if not paths:
        return sys.stdin.read()
    texts = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        except OSError as exc:
            raise UsageError([f"cannot read {path}: {exc.strerror or exc}"]) from None
    return "\n".join(texts)


def cmd_nccl_check(args: argparse.Namespace) -> int:
    paths: List[str] = list(args.logfile or [])
    code, line, result = check_text(_read(paths), args.expect)
    if args.format == "json":
        payload = asdict(result)
        payload.update({"expect": args.expect, "exit_code": code, "message": line})
        print(json.dumps(payload, indent=2, sort_keys=True), flush=True)
        if code != EXIT_OK:
            error(line)
        return code
    if code == EXIT_OK:
        log(line)
    else:
        error(line)
    return code


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    n = sub.add_parser("nccl-check", help="read NCCL_DEBUG=INFO output: exit 1 when NCCL fell back to TCP "
                                          "sockets instead of EFA (aws-ofi-nccl), 2 when the log has no "
                                          "transport lines")
    n.add_argument("logfile", nargs="*", metavar="LOGFILE", help="NCCL_DEBUG=INFO output (default: stdin)")
    n.add_argument("--expect", choices=EXPECTATIONS, default="ofi",
                   help="the transport every host must use (default ofi: NET/OFI over the efa provider; "
                        "socket for single-node or non-EFA runs; any: only report)")
    n.add_argument("--format", choices=("text", "json"), default="text")
