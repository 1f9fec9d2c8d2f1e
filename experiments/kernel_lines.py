"""Code lines of the kernels, per file and per category, at git revisions side by side.

Issue 20's "the kernels' lines go down, not up", measured: for each revision (read with ``git
show REV:path``, no checkout) every ``.py`` file under ``src/prefixsim/{policies, engine, tiers,
cluster}`` is parsed, its *code lines* counted (lines holding a token other than a comment or
white space, minus the lines of bare string statements: docstrings, attribute docstrings), and
each code line given the category of the innermost function or class around it that has one,
else ``rest``:

``kernel``
    the policies' compiled code: a function decorated with ``njit`` / ``jit`` (bare, called, or
    as ``numba.``'s attribute) outside the driver files; a function named as a step of a
    ``Steps(...)`` call (:data:`STEP_FIELDS`, positionally or by keyword; numba compiles it,
    ``prefixsim.engine.build.inlined``); a fast kernel's template (``fast_kernel=`` of a
    ``register`` / ``PolicySpec`` call), its nested kernel included; a default step (a name in
    the dict a ``functions`` method returns); and, to a fixed point, a plain function that
    compiled code calls by name (resolved through the file's imports).
``driver``
    the compositions' compiled code: the same rules, in :data:`DRIVER_FILES` (or named in
    :data:`DRIVER_FUNCTIONS`), plus a template compiled by ``compiled(...)`` /
    ``one_policy_driver(...)`` (their first argument), the hit rules' functions (the arguments
    of a ``Rule(...)`` call) and :data:`GENERATORS` (a function whose strings are compiled code).
``compiled_other``
    compiled code that is neither a policy nor a composition's replay: the load model, the
    routers' assignment (:data:`OTHER_FILES`).
``reference``
    the plain-Python references: a class deriving (by name, transitively, over every file
    read) from ``ReferencePolicy`` or ``ReferenceRouter``, the classes in
    :data:`REFERENCE_HELPERS`, and every function and class of :data:`REFERENCE_FILES`.
``rest``
    everything else: parameters and their checks, state declarations and ``make_state``,
    registration, the Python entry points, imports.

A function whose body is only ``raise NotImplementedError(...)`` (after its docstring) is a
generic name the build binds to a step or a rule (``prefixsim.engine.steps.hit``): never
compiled itself, it is ``rest``, and the call closure does not follow it.

    python experiments/kernel_lines.py [REV ...] [--files] [--list] [--exclude PATH ...]

Default revisions: ``115ee6c`` (the last commit before issue 20) and ``HEAD``. ``--files``
prints the per-file table; ``--list`` prints each classified function or class with its
category and the rule that gave it (to check the categorisation).
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import tokenize
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import PurePosixPath

ROOT = "src/prefixsim"
DIRS = ("policies", "engine", "tiers", "cluster")
CATEGORIES = ("kernel", "driver", "compiled_other", "reference", "rest")

STEP_FIELDS = (
    "state",
    "make_state",
    "is_resident",
    "hit",
    "admit",
    "remove",
    "begin",
    "end",
    "refuse",
    "request",
    "files",
)
"""``prefixsim.engine.steps.Steps``'s fields in order (a positional argument's meaning)."""
COMPILED_STEPS = frozenset({"is_resident", "hit", "admit", "remove", "begin", "end", "request"})

DRIVER_FILES = frozenset(
    {"engine/single.py", "engine/tiers.py", "engine/rules.py", "cluster/driver.py"}
)
"""The compositions' drivers (issue 20); before it, the hierarchy kernel's driver is named in
:data:`DRIVER_FUNCTIONS` (its policy steps, ``_hit`` / ``_admit`` ..., are kernels), and the
cluster's fused kernels (``cluster/kernel.py``) count as kernels, as the single cache's fused
kernels of that time do (each is a whole replay with its policy written in)."""
DRIVER_FUNCTIONS = {"tiers/kernel.py": frozenset({"_replay", "tiers_kernel"})}
GENERATORS = {"engine/tiers.py": frozenset({"_dispatch"})}
"""Python functions whose strings are the compiled code (the hierarchy's per-tier dispatch)."""
OTHER_FILES = frozenset({"cluster/load.py", "cluster/routers.py"})
REFERENCE_BASES = frozenset({"ReferencePolicy", "ReferenceRouter"})
REFERENCE_HELPERS = {
    "policies/lru_leaf.py": frozenset({"ChainTree"}),  # the leaf policies' references' mixin
    "policies/sieve.py": frozenset({"_Node"}),
    "policies/radix.py": frozenset({"_Node", "_common"}),
}
REFERENCE_FILES = frozenset({"tiers/reference.py", "cluster/reference.py"})
TEMPLATE_CALLS = frozenset({"compiled", "one_policy_driver"})
JIT_NAMES = frozenset({"njit", "jit"})


def git_show(rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def files_at(rev: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "--", *(f"{ROOT}/{d}" for d in DIRS)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sorted(p for p in out.split() if p.endswith(".py"))


def code_lines(source: str, tree: ast.Module) -> set[int]:
    """Lines holding a token other than comments and white space, minus bare strings'."""
    lines: set[int] = set()
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENCODING,
        tokenize.ENDMARKER,
    }
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            lines.difference_update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return _name(target) in JIT_NAMES


def _is_placeholder(fn: ast.FunctionDef) -> bool:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    return _name(exc.func if isinstance(exc, ast.Call) else exc) == "NotImplementedError"


@dataclass
class Unit:
    """A classified function or class."""

    path: str  # relative to src/prefixsim
    name: str
    node: ast.AST
    category: str = ""
    why: str = ""


@dataclass
class Module:
    path: str
    source: str
    tree: ast.Module
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module level
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """local name -> (module path relative to src/prefixsim, the name in it or None)."""


def _resolve(path: str, level: int, module: str | None) -> str:
    base = PurePosixPath(path).parent
    for _ in range(level - 1):
        base = base.parent
    parts = [p for p in (module or "").split(".") if p]
    return str(PurePosixPath(base, *parts)) if parts else str(base)


def load(rev: str) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for full in files_at(rev):
        path = full[len(ROOT) + 1 :]
        source = git_show(rev, full)
        tree = ast.parse(source)
        mod = Module(path, source, tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                mod.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.level:
                target = _resolve(path, node.level, node.module)
                for alias in node.names:
                    local = alias.asname or alias.name
                    mod.imports[local] = (target, alias.name)
        modules[path] = mod
    # ``from ..engine import heaps``: a module, not a name in engine/__init__
    for mod in modules.values():
        for local, (target, name) in list(mod.imports.items()):
            if name is not None and f"{target}/{name}.py" in modules:
                mod.imports[local] = (f"{target}/{name}.py", None)
            elif f"{target}.py" in modules:
                mod.imports[local] = (f"{target}.py", name)
            elif f"{target}/__init__.py" in modules:
                mod.imports[local] = (f"{target}/__init__.py", name)
    return modules


def _compiled_kind(path: str, name: str) -> str:
    if path in DRIVER_FILES or name in DRIVER_FUNCTIONS.get(path, ()):
        return "driver"
    if path in OTHER_FILES:
        return "compiled_other"
    return "kernel"


def classify(modules: dict[str, Module]) -> dict[tuple[str, str], Unit]:
    units: dict[tuple[str, str], Unit] = {}

    def mark(path: str, name: str, category: str, why: str) -> bool:
        mod = modules.get(path)
        if mod is None or name not in mod.functions or (path, name) in units:
            return False
        fn = mod.functions[name]
        if _is_placeholder(fn):
            return False
        units[(path, name)] = Unit(path, name, fn, category, why)
        return True

    def lookup(mod: Module, name: str) -> tuple[str, str] | None:
        if name in mod.functions:
            return mod.path, name
        if name in mod.imports:
            target, orig = mod.imports[name]
            if orig is not None:
                return target, orig
        return None

    # 1. decorators, registrations, templates
    for mod in modules.values():
        p = mod.path
        for name, fn in mod.functions.items():
            if any(_is_jit(d) for d in fn.decorator_list):
                mark(p, name, _compiled_kind(p, name), "@njit/@jit")
            if name in GENERATORS.get(p, ()):
                mark(p, name, "driver", "GENERATORS (its strings are compiled)")
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.FunctionDef) and node.name == "functions":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Dict):
                        for value in sub.values:
                            for leaf in ast.walk(value):
                                if isinstance(leaf, ast.Name) and leaf.id in mod.functions:
                                    mark(p, leaf.id, _compiled_kind(p, leaf.id), "default step")
            if not isinstance(node, ast.Call):
                continue
            callee = _name(node.func)
            named: list[tuple[ast.expr, str, str]] = []
            if callee == "Steps":
                for i, arg in enumerate(node.args):
                    if i < len(STEP_FIELDS) and STEP_FIELDS[i] in COMPILED_STEPS:
                        named.append((arg, _compiled_kind(p, ""), f"Steps {STEP_FIELDS[i]}"))
                for kw in node.keywords:
                    if kw.arg in COMPILED_STEPS:
                        named.append((kw.value, _compiled_kind(p, ""), f"Steps {kw.arg}"))
            elif callee == "Rule":
                named += [(arg, "driver", "Rule (a hit rule's function)") for arg in node.args]
            elif callee in TEMPLATE_CALLS and node.args:
                named.append((node.args[0], "driver", f"template of {callee}()"))
            for kw in node.keywords:
                if kw.arg == "fast_kernel":
                    named.append((kw.value, "kernel", "fast_kernel template"))
            for expr, category, why in named:
                if isinstance(expr, ast.Name):
                    found = lookup(mod, expr.id)
                    if found:
                        mark(*found, category, why)
    # 2. what compiled code calls, to a fixed point
    changed = True
    while changed:
        changed = False
        for unit in list(units.values()):
            path = unit.path
            if unit.name in GENERATORS.get(path, ()):
                continue  # Python that writes compiled code: what it calls runs in Python
            mod = modules[path]
            for sub in ast.walk(unit.node):
                if not isinstance(sub, ast.Call):
                    continue
                found = None
                if isinstance(sub.func, ast.Name):
                    found = lookup(mod, sub.func.id)
                elif isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
                    target = mod.imports.get(sub.func.value.id)
                    if target and target[1] is None:
                        found = (target[0], sub.func.attr)
                if found and found[0] in modules:
                    kind = unit.category if found[0] == path else _compiled_kind(*found)
                    changed |= mark(*found, kind, f"called by {path}:{unit.name}")
    # 3. references
    ref_names = set(REFERENCE_BASES)
    classes = [
        (mod.path, node)
        for mod in modules.values()
        for node in mod.tree.body
        if isinstance(node, ast.ClassDef)
    ]
    grown = True
    while grown:
        grown = False
        for _path, cls in classes:
            if cls.name not in ref_names and any(_name(b) in ref_names for b in cls.bases):
                ref_names.add(cls.name)
                grown = True
    for path, cls in classes:
        helpers = REFERENCE_HELPERS.get(path, frozenset())
        if (
            path in REFERENCE_FILES
            or cls.name in helpers
            or cls.name in ref_names - REFERENCE_BASES
        ):
            why = "a reference" if cls.name in ref_names else "REFERENCE_HELPERS/FILES"
            units.setdefault((path, cls.name), Unit(path, cls.name, cls, "reference", why))
    for mod in modules.values():
        for name, fn in mod.functions.items():
            if mod.path in REFERENCE_FILES or name in REFERENCE_HELPERS.get(mod.path, ()):
                units.setdefault(
                    (mod.path, name), Unit(mod.path, name, fn, "reference", "REFERENCE_*")
                )
    return units


def count(rev: str) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], Unit]]:
    modules = load(rev)
    units = classify(modules)
    table: dict[str, dict[str, int]] = {}
    for path, mod in modules.items():
        lines = code_lines(mod.source, mod.tree)
        owner: dict[int, str] = {}
        spans = []
        for (p, _n), unit in units.items():
            if p != path:
                continue
            node = unit.node
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            spans.append((first, node.end_lineno or node.lineno, unit.category))
        for first, last, category in sorted(spans, key=lambda s: s[1] - s[0], reverse=True):
            for line in range(first, last + 1):
                owner[line] = category  # narrower spans later: the innermost wins
        row = dict.fromkeys(CATEGORIES, 0)
        for line in lines:
            row[owner.get(line, "rest")] += 1
        table[path] = row
    return table, units


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revs", nargs="*", default=["115ee6c", "HEAD"])
    parser.add_argument("--files", action="store_true", help="the per-file table")
    parser.add_argument("--list", action="store_true", help="each classified unit")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATH",
        help="leave out this file (relative to src/prefixsim) from the totals; repeatable",
    )
    args = parser.parse_args()
    results = {rev: count(rev) for rev in args.revs}
    for table, _units in results.values():
        for path in args.exclude:
            table.pop(path, None)
    short = {"compiled_other": "other"}
    cols = [short.get(c, c) for c in CATEGORIES]
    if args.list:
        for rev, (_table, units) in results.items():
            print(f"# {rev}")
            for (path, name), unit in sorted(units.items()):
                print(f"{unit.category:15} {path}:{name}  ({unit.why})")
            print()
    if args.files:
        paths = sorted({p for table, _ in results.values() for p in table})
        header = f"{'file':30}" + "".join(
            f" | {rev[:9]:>9} " + " ".join(f"{c[:6]:>6}" for c in cols) for rev in args.revs
        )
        print(header)
        for path in paths:
            row = f"{path:30}"
            for rev in args.revs:
                r = results[rev][0].get(path)
                if r is None:
                    row += f" | {'-':>9} " + " ".join(f"{'':>6}" for _ in cols)
                else:
                    row += f" | {sum(r.values()):9d} " + " ".join(f"{r[c]:6d}" for c in CATEGORIES)
            print(row)
        print()
    print(f"{'revision':10} " + " ".join(f"{c:>9}" for c in cols) + f" {'compiled':>9} {'all':>7}")
    for rev in args.revs:
        totals: dict[str, int] = defaultdict(int)
        for row in results[rev][0].values():
            for c, n in row.items():
                totals[c] += n
        compiled = totals["kernel"] + totals["driver"] + totals["compiled_other"]
        print(
            f"{rev[:10]:10} "
            + " ".join(f"{totals[c]:9d}" for c in CATEGORIES)
            + f" {compiled:9d} {sum(totals.values()):7d}"
        )


if __name__ == "__main__":
    main()
