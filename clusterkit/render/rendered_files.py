"""Write or check each spec's rendered config, ``<spec dir>/rendered/<name>.yaml`` (for the checkout's specs
``cluster_configs/rendered/<name>.yaml``, committed and reviewed in pull requests)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clusterkit.artifacts.bundle import node_artifacts
from clusterkit.atomic import write_text
from clusterkit.effective.expand import expand
from clusterkit.paths import PLATFORM_SCHEMA, SPEC_REFERENCE, SPEC_SCHEMA
from clusterkit.pipeline.loader import Loaded, load_many
from clusterkit.render.pcluster_config import placeholder_refs, render_config
from clusterkit.render.spec_schema import platform_schema_text, schema_text
from clusterkit.spec import files
from clusterkit.spec.errors import Problem, SpecError

GENERATED = files.GENERATED


class NoAliasDumper(yaml.SafeDumper):
    """Reviewers read every value in place: no &id001 anchors for repeated lists."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def rendered_text(loaded: Loaded) -> str:
    effective = expand(loaded)
    config = render_config(effective, placeholder_refs(effective), node_artifacts(loaded))
    command = "make render" if files.in_checkout(loaded.source.path) else "clusterkit render"
    header = (f"{GENERATED}{command}` from {loaded.source.path.name} and its image lock. Do not edit.\n"
              "# ${...} values are filled in by the CDK stacks at deploy time.\n")
    return header + yaml.dump(config, Dumper=NoAliasDumper, sort_keys=False, default_flow_style=False, width=120)


def rendered_path(loaded: Loaded) -> Path:
    """Next to the spec, in ``rendered/`` (the loader made sure the file is named after the cluster)."""
    return files.rendered_path(loaded.source.path)


_REFERENCE_HEAD = ("# Spec reference\n\n"
                   "Generated from `clusterkit/spec/model.py` by `make render` (`python -m clusterkit reference`\n"
                   "prints the same table); do not edit: a test fails when this file is stale. The rules\n"
                   "`validate` applies beyond these types and defaults: [The cluster spec](spec.md).\n\n")


def spec_reference_text() -> str:
    """``docs/spec-reference.md``: the spec reference generated from the spec dataclasses (no README edit)."""
    from clusterkit.render.spec_reference import spec_reference

    return _REFERENCE_HEAD + spec_reference()


def render_state(loaded: Loaded) -> str:
    """"" when the spec's rendered config holds what ``render`` would write now, else why not and the command
    that writes it (a summary must not name a stale file as the cluster's config)."""
    path = rendered_path(loaded)
    command = files.render_command(loaded.source.path)
    try:
        current = path.read_text(encoding="utf-8") == rendered_text(loaded)
    except FileNotFoundError:
        return f"not written: run `{command}`"
    except (OSError, UnicodeDecodeError):
        current = False
    return "" if current else f"stale: the spec changed since; run `{command}`"


@dataclass(frozen=True)
class Output:
    """One file ``render`` writes (or checks): where, as shown to the user, and whether its text changes."""

    path: Path
    shown: str
    changed: bool
    command: str  # the command that rewrites it (for the stale hint)


def _refuse_foreign(path: Path, spec: Path) -> None:
    """A file render did not write is someone's own: never overwritten (one line naming both files)."""
    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline()
    except (OSError, UnicodeDecodeError):
        first = ""
    if not first.startswith(GENERATED):
        raise SpecError([Problem(files.display(path), 0, 0, "", f"exists and was not written by clusterkit render, "
                                 f"so the render of {files.display(spec)} does not overwrite it",
                                 "move that file away, or keep the spec in another directory")])


def render_files(names: list[str], *, check: bool) -> list[Output]:
    """Every file render owns for ``names`` (all the checkout's specs, its schema and the spec reference when
    none is named), written unless ``check``; raise on spec errors, or on a target render did not write."""
    loaded, problems = load_many(names)
    errors = [p for p in problems if p.level == "error"]
    if errors:
        raise SpecError(errors)
    planned: list[tuple[Path, str, str]] = []
    for item in loaded:
        path = rendered_path(item)
        if path.exists():
            _refuse_foreign(path, item.source.path)
        planned.append((path, rendered_text(item), files.render_command(item.source.path)))
    if not names:
        planned += [(SPEC_SCHEMA, schema_text(), "make render"),
                    (PLATFORM_SCHEMA, platform_schema_text(), "make render"),
                    (SPEC_REFERENCE, spec_reference_text(), "make render")]
    outputs: list[Output] = []
    for path, text, command in planned:
        changed = not path.is_file() or path.read_text(encoding="utf-8") != text
        if changed and not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, text)  # atomic, and an OSError names the rendered file (clusterkit.cli.boundary)
        outputs.append(Output(path, files.display(path), changed, command))
    return outputs


def render_all(names: list[str], *, check: bool) -> list[str]:
    """The rendered files that changed (written unless ``check``), as shown to the user."""
    return [output.shown for output in render_files(names, check=check) if output.changed]
