"""The package imports lazily: what that must and must not change (fresh interpreters)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return proc.stdout.strip()


def test_importing_the_profiles_does_not_load_the_engine() -> None:
    # Hydra imports prefixsim.profiles to find the bundled model and hardware profiles, on
    # every `python -m sweep`, --help included: that must not load numba and the kernels.
    out = run("import sys, prefixsim.profiles; print('numba' in sys.modules)")
    assert out == "False"


def test_the_package_attribute_replay_is_the_function_whatever_was_imported_first() -> None:
    # `prefixsim.replay` is a submodule and a function; importing the submodule first must not
    # leave the module where the function was (it did once the package imported lazily).
    out = run(
        "import prefixsim.replay, prefixsim\n"
        "print(callable(prefixsim.replay), prefixsim.replay.__name__)\n"
        "from prefixsim import replay\n"
        "print(replay is prefixsim.replay)"
    )
    assert out.splitlines() == ["True replay", "True"]


def test_the_sweep_imports_what_its_first_replay_does_not_need_later() -> None:
    # Everything imported before the first replay holds it up (docs/performance.md): the
    # cluster engine (cluster points only) and pyarrow.compute (the final merge, a segment's
    # per-request rows) are imported where they are used.
    out = run(
        "import sys, sweep.app\n"
        "print('prefixsim.cluster' in sys.modules, 'pyarrow.compute' in sys.modules)"
    )
    assert out == "False False"


# --- no import circles in the engine ----------------------------------------------------------

SRC = Path(__file__).resolve().parent.parent / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(
        node.test
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules ``path`` imports, anywhere in it (functions too: a circle through a lazy
    import is still a circle), but not under ``if TYPE_CHECKING:``; a package's submodule
    counts as itself, an imported module's parent packages as imported too (Python runs them
    first), except the importer's own (they are running already when it runs)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            base_name = ".".join(base + ([node.module] if node.module else []))
            if node.level == 0:
                base_name = node.module or ""
            for alias in node.names:
                sub = f"{base_name}.{alias.name}"
                found.add(sub if sub in modules else base_name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    closed = set(found)
    for target in found:
        parts = target.split(".")
        closed.update({".".join(parts[:i]) for i in range(1, len(parts))} - own)
    return {m for m in closed if m in modules and m != name}


def import_graph(root: str) -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in (SRC / root).rglob("*.py")}
    return {name: _imports(path, set(paths)) for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_the_engine_has_no_import_circle() -> None:
    assert circles(import_graph("prefixsim")) == []


def test_the_circle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
