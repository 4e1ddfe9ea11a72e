"""The cluster's network: one bridge in a network namespace the test creates, a veth pair per node.

Why a namespace of its own: tests never touch the machine's network. The fabric holder (``unshare --net``)
owns the bridge ``ckbr0``; each node's holder has its own network namespace, and ``attach`` creates a veth
pair inside the fabric namespace, moves one end into the node's namespace as ``eth0`` with the node's
address, and enslaves the other to the bridge. The fabric namespace also has an address on the bridge
(``REGISTRY_ADDR``): the loopback registry of the tests listens there (a socket made while the test's
thread is in the fabric namespace, ``inside``), so every node reaches it as a real cluster reaches a
registry, through its own interface.

What this stands in for: the VPC subnet (one L2 segment, no security groups, no EFA: TCP over veth).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

SUBNET = "10.77.0"
PREFIX = 24
REGISTRY_ADDR = f"{SUBNET}.254"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def inside(pid: int) -> Iterator[None]:
    """Run the calling THREAD in ``pid``'s network namespace for the block (sockets made there stay there)."""
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _setns(there)
        try:
            yield
        finally:
            _setns(here)
    finally:
        os.close(here)
        os.close(there)


def _ip(pid: int, *args: str) -> None:
    subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "ip", *args], check=True, capture_output=True,
                   text=True)


@dataclass
class Fabric:
    holder: subprocess.Popen | None = None
    attached: dict[str, str] = field(default_factory=dict)  # node name -> address

    def start(self) -> "Fabric":
        self.holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"], start_new_session=True)
        pid = self.holder.pid
        _wait_for_ns(pid)
        _ip(pid, "link", "set", "lo", "up")
        _ip(pid, "link", "add", "ckbr0", "type", "bridge")
        _ip(pid, "addr", "add", f"{REGISTRY_ADDR}/{PREFIX}", "dev", "ckbr0")
        _ip(pid, "link", "set", "ckbr0", "up")
        return self

    @property
    def pid(self) -> int:
        assert self.holder is not None
        return self.holder.pid

    def attach(self, name: str, node_pid: int, host: int) -> str:
        """Give the node holding network namespace ``node_pid`` the address SUBNET.<host> on the bridge."""
        address = f"{SUBNET}.{host}"
        port = f"ck{len(self.attached)}"
        _ip(self.pid, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", str(node_pid))
        _ip(self.pid, "link", "set", port, "master", "ckbr0", "up")
        _ip(node_pid, "link", "set", "lo", "up")
        _ip(node_pid, "addr", "add", f"{address}/{PREFIX}", "dev", "eth0")
        _ip(node_pid, "link", "set", "eth0", "up")
        self.attached[name] = address
        return address

    def stop(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            os.killpg(self.holder.pid, signal.SIGKILL)
            self.holder.wait(timeout=10)
        self.holder = None


def _wait_for_ns(pid: int) -> None:
    """``unshare`` has made its namespace once the holder's net namespace differs from ours."""
    mine = os.readlink("/proc/self/ns/net")
    for _ in range(200):
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != mine:
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"process {pid} never entered a network namespace of its own")
