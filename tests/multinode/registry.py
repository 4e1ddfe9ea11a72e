"""The loopback registry of the image tests (tests/images/images_fakes.py), reachable from the cluster.

One ``FakeRegistry`` answers on a socket in each fabric given (``fabric.REGISTRY_ADDR``, made while the test's
thread is in that fabric's network namespace), which the head nodes' real enroot pull from, and on one on the
test process's own loopback, which ``clusterkit lock``'s registry client reaches through its ``base_urls``
mapping (it speaks plain http only to loopback). The image's name in the spec is the fabric address, as a spec
names a registry its nodes reach. Several fabrics (several clusters on one platform, each its own network
here) get the same address and port in each, so every cluster's spec names one registry and its ``log``
counts every cluster's requests together.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from fabric import REGISTRY_ADDR, Fabric, inside
from images_fakes import FakeRegistry, _make_handler, _QuietServer


@contextmanager
def serve_on(*fabrics: Fabric) -> Iterator[tuple[FakeRegistry, str]]:
    """(registry whose ``host`` is its fabric address, the loopback base URL for the lock's client)."""
    registry = FakeRegistry()
    handler = _make_handler(registry)
    servers = [_QuietServer(("127.0.0.1", 0), handler)]
    port = 0
    for fabric in fabrics:
        with inside(fabric.pid):  # the first fabric picks the port; the others bind the same one
            servers.append(_QuietServer((REGISTRY_ADDR, port), handler))
        port = servers[-1].server_address[1]
    registry.host = f"{REGISTRY_ADDR}:{port}"
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
               for s in servers]
    for server, thread in zip(servers, threads):
        server.daemon_threads = True
        thread.start()
    try:
        yield registry, f"http://127.0.0.1:{servers[0].server_address[1]}"
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(timeout=5)
