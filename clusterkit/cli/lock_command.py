"""``clusterkit lock``: write ``cluster_configs/<name>.images.lock`` from a spec, online or offline.

Offline mode exists because a lock must be writable where no registry is reachable (CI, air-gapped
review machines): it records only images the spec already pins by digest and marks their size unknown
(``compressed_size: null``) so the node-side disk preflight falls back to its conservative default.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusterkit.images import resolve as images
from clusterkit.images.lock_file import ImageLock, write_lock
from clusterkit.images.registry import DEFAULT_TIMEOUT_S, WAIT_NOTICE_S
from clusterkit.pipeline.loader import all_spec_paths, image_specs, load, lock_path, platform, resolve


def add_parser(sub: Any) -> None:
    p = sub.add_parser("lock", help="resolve image digests into cluster_configs/<name>.images.lock")
    p.add_argument("names", nargs="*", metavar="NAME|PATH")
    p.add_argument("--offline", action="store_true",
                   help="no registry calls: lock only images the spec pins by digest (sizes unknown)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="json: what was locked, on stdout")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"give up on a registry request after this long (default {DEFAULT_TIMEOUT_S:g}); a request "
                        f"unanswered after {WAIT_NOTICE_S:g} s says so on stderr")
    p.set_defaults(run=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value <= 3600:  # math.isfinite too: nan fails both comparisons
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 3600, got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    from clusterkit.cli.machine_output import lock_json

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    written = lock_all(args.names, offline=args.offline, progress=progress, timeout=args.timeout)
    if args.format == "json":
        sys.stdout.write(lock_json(written))
    else:
        for path, _ in written:
            print(f"wrote {path}")
    return 0


def lock_all(names: list[str], *, offline: bool, progress: Callable[[str], None] | None = None,
             timeout: float = DEFAULT_TIMEOUT_S) -> list[tuple[Path, ImageLock]]:
    """Lock every named cluster (all specs when none is named); what was written, in order.

    ``progress`` gets one line per image as the registry answers (a lock of many images takes a while), and one
    for a request the registry leaves unanswered for a few seconds."""
    written: list[tuple[Path, ImageLock]] = []
    for name in names or [p.stem for p in all_spec_paths()]:
        spec = load(name, check_lock=False).spec
        specs, plat = image_specs(spec), platform(spec)
        if offline:
            lock = images.offline_lock(spec.name, specs, plat)
        else:
            lock = images.resolve_lock(spec.name, specs, plat, progress=progress, timeout=timeout)
        path = lock_path(resolve(name))
        write_lock(path, lock)
        written.append((path, lock))
    return written
