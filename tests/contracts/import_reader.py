"""Which modules a Python file imports, read with ast (every import at any depth, lazy and TYPE_CHECKING
ones included): the one reader the layer and import-graph contracts share."""
from __future__ import annotations

import ast
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """``clusterkit/rules/check.py`` -> ``clusterkit.rules.check``; a package's ``__init__`` is the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, tree: ast.AST | None = None) -> set[str]:
    """Absolute names of everything ``path`` (module ``name``) imports; ``from . import x`` gives ``pkg`` and
    ``pkg.x``, so both a module and a name in it are covered."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree or ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out
