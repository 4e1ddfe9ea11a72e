"""``make help`` lists every target a user runs: each .PHONY target of the Makefile and each `make X` the
README names, read from the files themselves, so a new target cannot be added without its help line."""
from __future__ import annotations

import re
import subprocess

from clusterkit.paths import ROOT

MAKEFILE = ROOT / "Makefile"
README = ROOT / "README.md"


def phony_targets() -> set[str]:
    """The Makefile's ``.PHONY:`` targets: the ones a user types (the rest are stamp files)."""
    text = MAKEFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    return {t for line in text.splitlines() if line.startswith(".PHONY:") for t in line.split(":", 1)[1].split()}


def readme_targets() -> set[str]:
    """Every ```make X`` in the README (inline code only: prose like "make sure" is not a target)."""
    return set(re.findall(r"`make ([a-z][a-z0-9_-]*)", README.read_text(encoding="utf-8")))


def help_targets() -> set[str]:
    done = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "help"], capture_output=True, text=True,
                          check=True, timeout=60)
    return {m.group(1) for line in done.stdout.splitlines() if (m := re.match(r"make ([a-z][a-z0-9_-]*)", line))}


def test_the_readme_names_only_real_targets() -> None:
    assert readme_targets() - phony_targets() == set()


def test_help_lists_every_target_a_user_runs() -> None:
    listed = help_targets()
    assert (phony_targets() | readme_targets()) - listed == set()
    assert listed - phony_targets() == set(), "make help names a target the Makefile does not have"
