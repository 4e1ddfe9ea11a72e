"""Where a spec file lives, where its outputs go, and the command a hint names to rewrite them.

A spec may be anywhere: its outputs always go next to it, mirroring the checkout's ``cluster_configs/``
layout (``/x/foo.yaml`` renders to ``/x/rendered/foo.yaml`` and locks to ``/x/foo.images.lock``), so a
command run on a spec outside the checkout never writes into the checkout. A hint names the command that
acts on the same file: ``make lock CLUSTER=demo`` for the checkout's specs (what the Makefile does),
``clusterkit lock /x/foo.yaml`` for any other. Stdlib and ``clusterkit.paths`` only: the image lock reader
needs the hints too.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from clusterkit.paths import CONFIG_DIR
from clusterkit.spec.errors import Problem, SpecError

SPEC_SUFFIXES = (".yaml", ".yml")
LOCK_SUFFIX = ".images.lock"
RENDERED_DIR_NAME = "rendered"
PLATFORMS_DIR_NAME = "platforms"


def display(path: Path) -> str:
    """``path`` relative to the current directory when it is inside it, else as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def checkout_specs() -> list[Path]:
    """The checkout's specs (what a command with no name acts on)."""
    return sorted(CONFIG_DIR.glob("*.yaml"))


def resolve(name_or_path: str) -> Path:
    """A bare name means ``cluster_configs/<name>.yaml``; anything with a slash or .yaml is a path."""
    if "/" in name_or_path or name_or_path.endswith(SPEC_SUFFIXES) or Path(name_or_path).is_dir():
        return Path(name_or_path)
    return CONFIG_DIR / f"{name_or_path}.yaml"


def spec_paths(names: list[str]) -> list[Path]:
    """The spec files ``names`` mean: none given, the checkout's; a directory, every ``*.yaml`` spec in it
    (not its ``rendered/`` outputs); else each name or path. A directory without a spec is a one-line error."""
    if not names:
        return checkout_specs()
    found: list[Path] = []
    for name in names:
        path = resolve(name)
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file())
            if not inside:
                raise SpecError([Problem(display(path), 0, 0, "", "a directory without a *.yaml spec",
                                         "give a spec file, a directory of specs, or a cluster name")])
            found += inside
        else:
            found.append(path)
    return found


def in_checkout(spec_path: Path) -> bool:
    """Whether ``spec_path`` is one of the checkout's specs (``cluster_configs/<name>.yaml``)."""
    try:
        return spec_path.parent.resolve() == CONFIG_DIR.resolve()
    except OSError:
        return False


def lock_path(spec_path: Path) -> Path:
    """``<dir>/<stem>.images.lock`` next to the spec."""
    return spec_path.with_name(spec_path.name.rsplit(".", 1)[0] + LOCK_SUFFIX)


def rendered_path(spec_path: Path) -> Path:
    """``<dir>/rendered/<stem>.yaml`` next to the spec (the stem is the cluster name: the name rule)."""
    return spec_path.parent / RENDERED_DIR_NAME / f"{spec_path.name.rsplit('.', 1)[0]}.yaml"


def platforms_dir(spec_dir: Path) -> Path:
    """``<dir>/platforms``: where the platforms of the specs in ``spec_dir`` live."""
    return spec_dir / PLATFORMS_DIR_NAME


def platform_path(spec_path: Path, name: str) -> Path:
    """The platform file a spec's ``platform: <name>`` means: ``platforms/<name>.yaml`` next to the spec."""
    return platforms_dir(spec_path.parent) / f"{name}.yaml"


def spec_of_lock(path: Path) -> Path:
    """The spec a lock file belongs to (``x.images.lock`` -> ``x.yaml``)."""
    stem = path.name[: -len(LOCK_SUFFIX)] if path.name.endswith(LOCK_SUFFIX) else path.stem
    return path.with_name(f"{stem}.yaml")


def _cli(command: str, spec_path: Path) -> str:
    return f"clusterkit {command} {shlex.quote(display(spec_path))}"


def lock_command(spec_path: Path) -> str:
    """The command that rewrites the spec's image lock."""
    if in_checkout(spec_path):
        return f"make lock CLUSTER={spec_path.name.rsplit('.', 1)[0]}"
    return _cli("lock", spec_path)


def render_command(spec_path: Path) -> str:
    """The command that rewrites the spec's rendered config."""
    return "make render" if in_checkout(spec_path) else _cli("render", spec_path)


def validate_command(spec_path: Path) -> str:
    """The command that lists the spec's problems."""
    if in_checkout(spec_path):
        return f"clusterkit validate {spec_path.name.rsplit('.', 1)[0]}"
    return _cli("validate", spec_path)
