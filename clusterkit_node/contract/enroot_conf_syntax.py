"""enroot.conf's syntax as enroot's config loader (bash) reads it: ``KEY value`` lines, ``#`` comments, and
``$VAR``, ``${VAR}`` and ``${VAR:-default}`` in values.

Its own module, with nothing but ``re`` and ``typing``, because the Slurm prolog (``user-dirs --prolog``, every
job on every node) reads enroot.conf too and must not pay for the image sync's modules (store/sync_config.py,
which resolves enroot's settings for a sync, uses these).
"""
from __future__ import annotations

import re
from typing import Dict

_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand_shell_vars(value: str, env: Dict[str, str]) -> str:
    """Expand $VAR, ${VAR} and ${VAR:-default} the way enroot's config loader (bash) would."""
    def repl(m: "re.Match[str]") -> str:
        name = m.group(1) or m.group(3)
        got = env.get(name, "")
        if m.group(1) and m.group(2) is not None and not got:
            return expand_shell_vars(m.group(2), env)
        return got
    return _VAR_RE.sub(repl, value)


def parse_enroot_conf(text: str) -> Dict[str, str]:
    """KEY value pairs of enroot.conf's text (comments and blank lines skipped), values unexpanded."""
    values: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)  # "KEY<spaces or tabs>VALUE"
        value = parts[1].strip() if len(parts) > 1 else ""
        values[parts[0]] = value.strip('"').strip("'")
    return values
