"""The loopback registry of the image tests (tests/images/images_fakes.py), reachable from the cluster.

One ``FakeRegistry`` answers on two sockets: one on the fabric (``fabric.REGISTRY_ADDR``, made while the
test's thread is in the fabric's network namespace), which the head node's real enroot pulls from, and one
on the test process's own loopback, which ``clusterkit lock``'s registry client reaches through its
``base_urls`` mapping (it speaks plain http only to loopback). The image's name in the spec is the fabric
address, as a spec names a registry its nodes reach.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from fabric import REGISTRY_ADDR, Fabric, inside
from images_fakes import FakeRegistry, _make_handler, _QuietServer


@contextmanager
def serve_on(fabric: Fabric) -> Iterator[tuple[FakeRegistry, str]]:
    """(registry whose ``host`` is its fabric address, the loopback base URL for the lock's client)."""
    registry = FakeRegistry()
    handler = _make_handler(registry)
    local = _QuietServer(("127.0.0.1", 0), handler)
    with inside(fabric.pid):
        remote = _QuietServer((REGISTRY_ADDR, 0), handler)
    registry.host = f"{REGISTRY_ADDR}:{remote.server_address[1]}"
    servers = (local, remote)
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
               for s in servers]
    for server, thread in zip(servers, threads):
        server.daemon_threads = True
        thread.start()
    try:
        yield registry, f"http://127.0.0.1:{local.server_address[1]}"
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(timeout=5)
