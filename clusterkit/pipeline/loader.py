"""Find spec files by name or path, and load them fully checked: types, rules and the image lock.

``load`` is the one door into a spec for the CLI, the render check and app.py, so every consumer sees
the same validation and the same error lines.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.effective.expand import expand_spec, image_platform
from clusterkit.images import resolve as images
from clusterkit.images.lock_file import ImageLock, LockError, read_lock
from clusterkit.paths import CONFIG_DIR
from clusterkit.pipeline.platform import (
    PLATFORM_FIELDS,
    at_platform_file,
    merged,
    name_conflicts,
    platform_of,
    trust_conflicts,
)
from clusterkit.rules import advice, gpu_images
from clusterkit.rules import check as rules
from clusterkit.spec.errors import Acknowledged, ClusterKitError, Problem, SpecError
from clusterkit.spec.files import (
    PLATFORMS_DIR_NAME,
    checkout_specs,
    display,
    lock_command,
    lock_path,
    not_a_spec,
    resolve,
    spec_paths,
    synth_platform_command,
)
from clusterkit.spec.model import ClusterSpec, LoadedSpec, parse_spec
from clusterkit.spec.yaml_reader import Marks

DEFAULT_CLUSTER = "demo"


@dataclass(frozen=True)
class Loaded:
    """A spec that has no errors, with its warnings (sizing advice and the like): those the spec does not
    acknowledge in ``warnings``, the ones it does in ``acknowledged``."""

    spec: ClusterSpec
    source: LoadedSpec
    warnings: list[Problem] = field(default_factory=list)
    acknowledged: list[Acknowledged] = field(default_factory=list)

    @property
    def lock_path(self) -> Path:
        return lock_path(self.source.path)


def all_spec_paths() -> list[Path]:
    return checkout_specs()


def platform(spec: ClusterSpec) -> str:
    """The image platform of the compute fleet (``EffectiveSpec.containers.platform``)."""
    return image_platform(spec)


def image_specs(spec: ClusterSpec) -> list[images.ImageSpec]:
    return [images.ImageSpec(name=i.name, uri=i.uri, expect=i.expect.as_dict()) for i in spec.containers.images]


_IMAGE_ENTRY = re.compile(r"containers\.images\[(\d+)\]")
_IMAGE_NAME = re.compile(r"containers\.images(\[\d+\]\.name)?")
_INSTANCE_TYPE = re.compile(r"queues\[\d+\]\.compute_resources\[\d+\]\.instance_type")


def unsettled(spec: ClusterSpec, errors: list[Problem]) -> images.Unsettled:
    """What the spec's errors leave unsettled for the lock comparison (their own lines say what to fix)."""
    paths = [p.path for p in errors]
    entries = {int(m.group(1)) for m in map(_IMAGE_ENTRY.match, paths) if m}
    declared = spec.containers.images
    return images.Unsettled(
        name="name" in paths,
        platform=any(_INSTANCE_TYPE.fullmatch(p) for p in paths),
        images=frozenset(declared[i].name for i in entries if i < len(declared)),
        image_names=any(_IMAGE_NAME.fullmatch(p) for p in paths))


def _lock_problems(spec: ClusterSpec, source: LoadedSpec, errors: list[Problem]) -> list[Problem]:
    if not spec.containers.images:
        return []
    path = lock_path(source.path)
    try:
        lock = read_lock(path) if path.exists() else None
    except LockError as exc:  # positioned in the lock file, with the `make lock` hint
        return exc.problems
    declared = image_specs(spec)
    fix = lock_command(source.path, offline=images.relocks_offline(lock, declared))
    found = images.drift(lock, spec.name, declared, platform(spec), fix_command=fix,
                         unsettled=unsettled(spec, errors))
    index = {image.name: i for i, image in reversed(list(enumerate(declared)))}  # a name's first entry
    return [source.marks.problem("containers.images" if name is None else f"containers.images[{index[name]}]", text)
            for name, text in found]


def lock_or_none(spec_path: Path) -> ImageLock | None:
    """The committed lock of a spec, or None when it is missing or unreadable (the lock check reports why)."""
    path = lock_path(spec_path)
    try:
        return read_lock(path) if path.exists() else None
    except LockError:
        return None


def acknowledge(spec: ClusterSpec, marks: Marks, warnings: list[Problem]) -> tuple[list[Problem], list[Acknowledged]]:
    """Split ``warnings`` by the spec's ``acknowledge`` entries (checked by the rules): the rest, plus one
    ``acknowledgement-unused`` warning per entry no warning matched, and the acknowledged ones with their reason."""
    reasons = {ack.id: ack.reason for ack in spec.acknowledge}
    rest = [w for w in warnings if w.id not in reasons]
    accepted = [Acknowledged(w, reasons[w.id]) for w in warnings if w.id in reasons]
    used = {a.problem.id for a in accepted}
    for i, ack in enumerate(spec.acknowledge):
        if ack.id not in used:
            rest.append(marks.problem(f"acknowledge[{i}].id", f"{ack.id} is acknowledged, but this spec raises no "
                                      "such warning", "remove the entry: what it accepted is gone", level="warning",
                                      id="acknowledgement-unused"))
    return rest, accepted


def load(name_or_path: str, *, check_lock: bool = True) -> Loaded:
    """Load one spec; raise ``SpecError`` with every error found (warnings ride along on success, less the
    ones the spec acknowledges)."""
    path = resolve(name_or_path)
    shown = display(path)
    if path.is_symlink() and not path.exists():  # else "no such spec file" would name a file that is listed
        link = display(Path(os.path.abspath(path)).parent) + "/" + path.name  # the link's name, not its target's
        raise SpecError([Problem(link.removeprefix("./"), 0, 0, "", f"broken symbolic link to {os.readlink(path)}: "
                                 "nothing is there", "point the link at a spec, or remove it")])
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        known = ", ".join(p.stem for p in all_spec_paths()) or "none"
        raise SpecError([Problem(shown, 0, 0, "", "no such spec file", f"known clusters: {known}")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(shown, 0, 0, "", "a directory, not a spec file",
                                 "this command takes one spec: give its name or its .yaml path")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError([Problem(shown, 0, 0, "", f"not UTF-8 text (byte {exc.start}: {exc.reason})",
                                 "a spec is plain UTF-8 YAML")]) from None
    except OSError as exc:
        raise SpecError([Problem(shown, 0, 0, "", f"cannot read: {exc.strerror}")]) from None
    if path.parent.name == PLATFORMS_DIR_NAME and path.suffix in (".yaml", ".yml"):
        raise SpecError([Problem(shown, 0, 0, "", "a platform file, not a cluster spec",
                                 f"check it through a cluster that names it (clusterkit validate <cluster>), or "
                                 f"synthesize it: {synth_platform_command(path)}")])
    mistaken = not_a_spec(path, text)
    if mistaken is not None:
        raise SpecError([mistaken])
    spec, marks, problems = parse_spec(text, shown)
    if spec is None:
        raise SpecError(problems or [Problem(shown, 1, 1, "", "not a cluster spec")])
    on, problems_of_platform = platform_of(spec, marks, path)
    if spec.platform is not None:  # checked as it runs; network and storage problems come from the platform file
        spec = merged(spec, on.spec) if on is not None else spec
        problems += [p for p in rules.check(spec, marks) if p.path.split(".")[0] not in PLATFORM_FIELDS]
        problems += problems_of_platform
    else:
        problems += rules.check(spec, marks)
    source = LoadedSpec(spec=spec, path=path, marks=marks)
    if path.stem != spec.name and not any(p.path == "name" for p in problems):
        # Everywhere, not only in cluster_configs/: outputs are named after the file, stacks after the name.
        problems.append(marks.problem("name", f"'{spec.name}' differs from the file name '{path.stem}'",
                                      f"rename the file to {spec.name}{path.suffix} or set name: {path.stem}"))
    problems += trust_conflicts(spec, marks, path, on)
    if check_lock:
        stale = _lock_problems(spec, source, [p for p in problems if p.level == "error"])
        problems += stale
        problems += name_conflicts(spec, marks, path, lock_or_none(path), on)
        if not stale:  # a lock that matches the spec: what the NVIDIA hook does with its images
            problems += gpu_images.hook_problems(spec, marks, lock_or_none(path))
    errors = [p for p in problems if p.level == "error"]
    if errors:  # acknowledged warnings stay quiet; whether an entry is unused is judged once advice has run
        acknowledged = {ack.id for ack in spec.acknowledge}
        raise SpecError([p for p in problems if p.level == "error" or not p.id or p.id not in acknowledged])
    advised = advice.advise(expand_spec(spec), marks, lock_or_none(path), relock=lock_command(path))
    warnings = [p for p in problems if p.level == "warning"] + at_platform_file(advised, on, spec.name)
    warnings, accepted = acknowledge(spec, marks, warnings)
    return Loaded(spec=spec, source=source, warnings=warnings, acknowledged=accepted)


def load_many(names: list[str], *, check_lock: bool = True) -> tuple[list[Loaded], list[Problem]]:
    """Load several specs (names, paths or directories of specs: ``spec_paths``), collecting every problem of
    every file instead of stopping at the first (the warnings a spec acknowledges are not among them: they
    stay on its ``Loaded``)."""
    loaded: list[Loaded] = []
    problems: list[Problem] = []
    for path in spec_paths(names):
        try:
            item = load(str(path), check_lock=check_lock)
        except SpecError as exc:
            problems += exc.problems
        else:
            loaded.append(item)
            problems += item.warnings
    return loaded, list(dict.fromkeys(problems))  # a platform's problems once, however many of its clusters


__all__ = ["CONFIG_DIR", "ClusterKitError", "Loaded", "all_spec_paths", "display", "load", "load_many", "lock_path",
           "resolve"]
