"""The documented layering is true: no import cycles in ``epic/`` and no import up the layers.

The layer map is the one docs/architecture.md shows (its ``layers`` block, parsed here), so the
doc and this test cannot drift apart. Every import counts, function-local ones included; only
imports under ``if TYPE_CHECKING:`` (never executed) are left out. ``from pkg import name``
counts as importing ``pkg.name`` when that is a module, else ``pkg``; a package's ``__init__`` is
its own module (importing ``epic.windows.spec`` does not count as importing ``epic.windows``).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EPIC = ROOT / "epic"


def layer_map() -> list[tuple[str, list[str]]]:
    """[(layer, [module patterns])], top layer first, from docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    out = []
    for line in block.group(1).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, mods = line.split(":", 1)
        out.append((name.strip(), mods.split()))
    return out


def modules() -> dict[str, Path]:
    out = {}
    for p in EPIC.rglob("*.py"):
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _type_checking(node) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        skip = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking(node):
                for sub in ast.walk(node):
                    skip.add(id(sub))
        deps = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        deps.add(a.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    if node.level > 1:
                        base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                deps.update(subs)
                if len(subs) < len(node.names) and target in mods:
                    deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def layer_of(module: str, layers) -> int:
    """Index of the module's layer (0 = top); the most specific (longest) pattern wins."""
    best, best_len = None, -1
    for i, (_, pats) in enumerate(layers):
        for p in pats:
            if fnmatch.fnmatchcase(module, p) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def test_every_module_has_a_layer():
    """Each module of epic/ is in the documented layer map."""
    layers = layer_map()
    missing = sorted(m for m in modules() if layer_of(m, layers) is None)
    assert not missing, f"add these to the ```layers block of docs/architecture.md: {missing}"


def test_no_upward_imports():
    """A module imports only its own layer or lower ones (function-local imports included)."""
    layers = layer_map()
    mods = modules()
    bad = []
    for m, deps in imports(mods).items():
        for d in deps:
            if layer_of(d, layers) < layer_of(m, layers):
                bad.append(f"{m} ({layers[layer_of(m, layers)][0]}) imports {d} "
                           f"({layers[layer_of(d, layers)][0]})")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    """The module import graph of epic/ has no cycle."""
    graph = imports(modules())
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycles.append(" -> ".join(path[path.index(d):] + [d]))
            elif not state.get(d):
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if not state.get(m):
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_layer_test_catches_violations(tmp_path, monkeypatch):
    """The checks above can fail: a lower module importing a higher one is reported."""
    layers = [("top", ["epic.cli"]), ("low", ["epic.errors"])]
    assert layer_of("epic.cli", layers) < layer_of("epic.errors", layers)
    graph = {"epic.errors": {"epic.cli"}, "epic.cli": {"epic.errors"}}
    up = [(m, d) for m, ds in graph.items() for d in ds
          if layer_of(d, layers) < layer_of(m, layers)]
    assert up == [("epic.errors", "epic.cli")]


def test_no_private_names_across_modules():
    """No module of epic/ imports a private (``_name``) name from another epic module."""
    mods = modules()
    bad = []
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = pkg.split(".")
                if node.level > 1:
                    base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("epic"):
                continue
            for a in node.names:
                if a.name.startswith("_") and f"{target}.{a.name}" not in mods:
                    bad.append(f"{name}: from {target} import {a.name}")
    assert not bad, "private names imported across modules:\n" + "\n".join(sorted(bad))
