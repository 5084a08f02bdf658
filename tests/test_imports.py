"""Import hygiene (as Harlequin does it): the domain never imports the UI, and the CLI starts without it."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_ops_never_imports_textual_widgets_or_console() -> None:
    bad = {}
    for path in (ROOT / "ops").rglob("*.py"):
        hit = _imports(path) & {"textual", "widgets", "console", "rich"}
        if hit:
            bad[str(path.relative_to(ROOT))] = sorted(hit)
    assert not bad, bad


def test_widgets_never_import_console() -> None:
    bad = {str(p.relative_to(ROOT)): "console" for p in (ROOT / "widgets").rglob("*.py") if "console" in _imports(p)}
    assert not bad, bad


def test_ops_loads_without_textual_in_a_fresh_interpreter() -> None:
    code = ("import sys; import ops.snapshot, ops.guard, ops.config, ops.rig; "
            "assert 'textual' not in sys.modules, 'textual imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_no_shell_true_anywhere() -> None:
    for pkg in ("ops", "console", "widgets"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.keyword) and node.arg == "shell":
                    assert not (isinstance(node.value, ast.Constant) and node.value.value is True), path
