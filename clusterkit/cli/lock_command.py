"""``clusterkit lock``: write ``<spec dir>/<name>.images.lock`` next to each spec, online or offline.

Offline mode exists because a lock must be writable where no registry is reachable (CI, air-gapped
review machines): it records only images the spec already pins by digest and marks their size unknown
(``compressed_size: null``) so the node-side disk preflight falls back to its conservative default.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.images.registry import DEFAULT_TIMEOUT_S, WAIT_NOTICE_S

if TYPE_CHECKING:
    from clusterkit.images.lock_file import ImageLock


def add_parser(sub: Any) -> None:
    p = sub.add_parser("lock")
    p.add_argument("names", nargs="*", metavar="NAME|PATH|DIR")
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
    from clusterkit.spec.files import display

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    changed: list[Path] = []
    written = lock_all(args.names, offline=args.offline, progress=progress, changed=changed, timeout=args.timeout)
    if args.format == "json":
        sys.stdout.write(lock_json(written))
    else:
        for path, _ in written:
            print(f"{'wrote' if path in changed else 'unchanged'} {display(path)}")
    return 0


def lock_all(names: list[str], *, offline: bool, progress: Callable[[str], None] | None = None,
             changed: list[Path] | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> list[tuple[Path, ImageLock]]:
    """Lock every named cluster (names, paths or directories; all the checkout's specs when none is named);
    each lock next to its spec, in order. A lock whose text would not change is left as it is (its path is
    appended to ``changed`` only when it was written).

    ``progress`` gets one line per image as the registry answers (a lock of many images takes a while), and one
    for a request the registry leaves unanswered for a few seconds."""
    from clusterkit.images import resolve as images
    from clusterkit.images.lock_file import lock_text, write_lock
    from clusterkit.pipeline.loader import image_specs, load, lock_path, platform
    from clusterkit.spec.files import lock_command, spec_paths

    written: list[tuple[Path, ImageLock]] = []
    for spec_path in spec_paths(names):
        loaded = load(str(spec_path), check_lock=False)
        spec = loaded.spec
        specs, plat = image_specs(spec), platform(spec)
        if offline:
            lock = images.offline_lock(spec.name, specs, plat, online=lock_command(loaded.source.path))
        else:
            lock = images.resolve_lock(spec.name, specs, plat, progress=progress, timeout=timeout)
        path = lock_path(loaded.source.path)
        if not _holds(path, lock_text(lock)):
            write_lock(path, lock)
            if changed is not None:
                changed.append(path)
        written.append((path, lock))
    return written


def _holds(path: Path, text: str) -> bool:
    """Whether ``path`` already holds exactly ``text`` (an unreadable file does not)."""
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False
