"""Find spec files by name or path, and load them fully checked: types, rules and the image lock.

``load`` is the one door into a spec for the CLI, the render check and app.py, so every consumer sees
the same validation and the same error lines.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import advice, images, rules
from .effective import expand_spec, image_platform
from .errors import ClusterKitError, Problem, SpecError
from .lock_file import LOCK_SUFFIX, ImageLock, LockError, read_lock
from .paths import CONFIG_DIR
from .spec import ClusterSpec, LoadedSpec, parse_spec

DEFAULT_CLUSTER = "demo"


@dataclass(frozen=True)
class Loaded:
    """A spec that has no errors, with its warnings (sizing advice and the like)."""

    spec: ClusterSpec
    source: LoadedSpec
    warnings: list[Problem] = field(default_factory=list)

    @property
    def lock_path(self) -> Path:
        return lock_path(self.source.path)


def display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def resolve(name_or_path: str) -> Path:
    """A bare name means ``cluster_configs/<name>.yaml``; anything with a slash or .yaml is a path."""
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        return Path(name_or_path)
    return CONFIG_DIR / f"{name_or_path}.yaml"


def all_spec_paths() -> list[Path]:
    return sorted(CONFIG_DIR.glob("*.yaml"))


def lock_path(spec_path: Path) -> Path:
    return spec_path.with_name(spec_path.name.rsplit(".", 1)[0] + LOCK_SUFFIX)


def platform(spec: ClusterSpec) -> str:
    """The image platform of the compute fleet (``EffectiveSpec.containers.platform``)."""
    return image_platform(spec)


def image_specs(spec: ClusterSpec) -> list[images.ImageSpec]:
    return [images.ImageSpec(name=i.name, uri=i.uri, expect=i.expect.as_dict()) for i in spec.containers.images]


def _lock_problems(spec: ClusterSpec, source: LoadedSpec) -> list[Problem]:
    if not spec.containers.images:
        return []
    path = lock_path(source.path)
    try:
        lock = read_lock(path) if path.exists() else None
    except LockError as exc:  # positioned in the lock file, with the `make lock` hint
        return exc.problems
    found = images.staleness(lock, spec.name, image_specs(spec), platform(spec))
    return [source.marks.problem("containers.images", text) for text in found]


def lock_or_none(spec_path: Path) -> ImageLock | None:
    """The committed lock of a spec, or None when it is missing or unreadable (the lock check reports why)."""
    path = lock_path(spec_path)
    try:
        return read_lock(path) if path.exists() else None
    except LockError:
        return None


def load(name_or_path: str, *, check_lock: bool = True) -> Loaded:
    """Load one spec; raise ``SpecError`` with every error found (warnings ride along on success)."""
    path = resolve(name_or_path)
    shown = display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        known = ", ".join(p.stem for p in all_spec_paths()) or "none"
        raise SpecError([Problem(shown, 0, 0, "", "no such spec file", f"known clusters: {known}")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError([Problem(shown, 0, 0, "", f"not UTF-8 text (byte {exc.start}: {exc.reason})",
                                 "a spec is plain UTF-8 YAML")]) from None
    except OSError as exc:
        raise SpecError([Problem(shown, 0, 0, "", f"cannot read: {exc.strerror}")]) from None
    spec, marks, problems = parse_spec(text, shown)
    if spec is None:
        raise SpecError(problems or [Problem(shown, 1, 1, "", "not a cluster spec")])
    source = LoadedSpec(spec=spec, path=path, marks=marks)
    problems += rules.check(spec, marks)
    if path.stem != spec.name and path.parent.resolve() == CONFIG_DIR.resolve():
        problems.append(marks.problem("name", f"'{spec.name}' differs from the file name '{path.stem}'",
                                      f"rename the file to {spec.name}.yaml or set name: {path.stem}"))
    if check_lock:
        problems += _lock_problems(spec, source)
    errors = [p for p in problems if p.level == "error"]
    if errors:
        raise SpecError(problems)
    warnings = [p for p in problems if p.level == "warning"] + advice.advise(expand_spec(spec), marks,
                                                                           lock_or_none(path))
    return Loaded(spec=spec, source=source, warnings=warnings)


def load_many(names: list[str], *, check_lock: bool = True) -> tuple[list[Loaded], list[Problem]]:
    """Load several specs, collecting every problem of every file instead of stopping at the first."""
    loaded: list[Loaded] = []
    problems: list[Problem] = []
    for name in names or [p.stem for p in all_spec_paths()]:
        try:
            item = load(name, check_lock=check_lock)
        except SpecError as exc:
            problems += exc.problems
        else:
            loaded.append(item)
            problems += item.warnings
    return loaded, problems


__all__ = ["ClusterKitError", "Loaded", "all_spec_paths", "load", "load_many", "lock_path", "resolve"]
