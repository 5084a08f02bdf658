"""The project uses Textual's public API only: nothing it does may break silently on a Textual upgrade
within the declared range (pyproject: textual>=8,<9).

The scan reads every Python file of the project (console, widgets, ops, sim, bench, tests) and fails on:
- an import of a private Textual module or name (`textual._x`, `from textual.x import _Name`);
- an attribute access `obj._name` where `_name` is one of Textual's own private names (collected from
  the installed package: its private methods, class attributes and `self._x` assignments). Without type
  inference that also catches a project attribute that merely shares such a name; on a Textual subclass
  that is itself a hazard (it would shadow Textual's), elsewhere rename it or list it below with why.
  Only files that import Textual are scanned for attributes: from the others no Textual object is reached.
Attribute chains that start at a non-Textual module (`asyncio.events.Handle._run`) are not Textual's.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import textual

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("console", "widgets", "ops", "sim", "bench", "tests")
# (file relative to ROOT, attribute): why it is not Textual's.
NOT_TEXTUAL: dict[tuple[str, str], str] = {
    ("bench/loop_cpu.py", "_callback"): "an asyncio.Handle's callback (the profiler keys CPU by it)",
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@lru_cache(maxsize=1)
def textual_private_names() -> frozenset[str]:
    names: set[str] = set()
    for path in Path(textual.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return frozenset(n for n in names if _is_private(n))


def project_files() -> list[Path]:
    files = []
    for top in SCANNED:
        files += [p for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts]
    return sorted(files)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def violations(path: Path, private: frozenset[str]) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), rel)
    other_modules: set[str] = set()   # names bound to a non-Textual module: `import asyncio`
    uses_textual = False
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "textual" or a.name.startswith("textual."):
                    uses_textual = True
                    if any(_is_private(part) for part in a.name.split(".")):
                        found.append(f"{rel}:{node.lineno}: import {a.name}")
                else:
                    other_modules.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "textual" or node.module.startswith("textual."):
                uses_textual = True
                if any(_is_private(part) for part in node.module.split(".")):
                    found.append(f"{rel}:{node.lineno}: from {node.module} import …")
                found += [f"{rel}:{node.lineno}: from {node.module} import {a.name}"
                          for a in node.names if _is_private(a.name)]
    if not uses_textual:   # no Textual object can be reached from it (ops and sim never import Textual)
        return found
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr in private):
            continue
        if _root_name(node) in other_modules or (rel, node.attr) in NOT_TEXTUAL:
            continue
        found.append(f"{rel}:{node.lineno}: .{node.attr} (a private name of Textual)")
    return found


def test_textual_private_names_were_collected() -> None:
    # The scan is only as good as this set: it must hold the internals the project once reached into.
    names = textual_private_names()
    for known in ("_compositor", "_dirty_widgets", "_styles_cache", "_bindings", "_render_cache",
                  "_RenderCache", "_dirty_regions"):
        assert known in names, known


def test_no_access_to_textual_private_names() -> None:
    private = textual_private_names()
    files = project_files()
    assert len(files) > 50, "the scan found too few files: wrong root?"
    found = [v for f in files for v in violations(f, private)]
    assert not found, "Textual internals used (public API only):\n" + "\n".join(found)


def test_the_scan_catches_what_it_is_for(tmp_path: Path) -> None:
    sample = ROOT / "tests" / "tui" / "_scan_sample.py"
    src = ("from textual._xterm_parser import XTermParser\nimport textual._loop\n"
           "from textual.widget import _RenderCache\n"
           "def f(screen, widget):\n    screen._compositor\n    widget._styles_cache.clear()\n")
    try:
        sample.write_text(src)
        found = violations(sample, textual_private_names())
    finally:
        sample.unlink()
    assert len(found) == 5, found
