"""Import hygiene (as Harlequin does it): the domain never imports the UI, and the CLI starts without it."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
    code = ("import sys; import ops.probes.prober, ops.actions.guard, ops.config, ops.rig; "
            "assert 'textual' not in sys.modules, 'textual imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_no_shell_true_anywhere() -> None:
    for pkg in ("ops", "console", "widgets"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.keyword) and node.arg == "shell":
                    assert not (isinstance(node.value, ast.Constant) and node.value.value is True), path


PACKAGES = ("ops", "console", "widgets", "sim")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    """Every import, function-level ones included (a lazy import is still a dependency), resolved to the
    project modules it names."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            for t in targets:
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t and t != mod and not mod.startswith(t + "."):   # a package's own __init__ is not a cycle
                    graph[mod].add(t)
    return graph


def test_no_import_cycle_between_modules() -> None:
    graph = _import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_real_operations_never_depend_on_their_simulation() -> None:
    bad = {m: sorted(d for d in deps if d.split(".")[0] == "sim")
           for m, deps in _import_graph().items() if m.split(".")[0] == "ops"}
    assert not {m: d for m, d in bad.items() if d}, bad
