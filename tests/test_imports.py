"""The package's imports, read from the source with `ast` rather than by importing it: imports inside
functions count as much as those at the top, because many of them only run on a GPU, and a CPU run
would never notice one left dangling after a move.

Checked here: the import graph of autosage_cli has no cycle; every import of an autosage_cli module or
name resolves (package modules, tests and scripts); imports go down the layer table (LAYERS), never
up; and CuPy is imported only where the CuPy rule says, only inside functions, so every module
imports on a machine without a GPU (checked for real, in a process where CuPy cannot be imported).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "autosage_cli"

# Units (a top-level module, or a subpackage with everything under it; PACKAGE itself is the
# package's __init__), from the top layer down. A module may import from its own unit and from the
# units of lower layers, never from a higher layer nor from another unit of its own layer.
LAYERS = (
    ("__main__",),               # `python -m autosage_cli`: the CLI entry point
    (PACKAGE, "cli"),            # the package facade (loads api on first use); the CLI entry point
    ("commands",),               # one module per CLI command
    ("bench", "torch"),          # the benchmark; the PyTorch ops and layers
    ("api",),                    # spmm / sddmm / attention on user arrays
    ("scheduler",),              # estimate, probe, select, tune, replay
    ("ops",),                    # one spec per op: operands, dtypes, reference, bytes, plans
    ("backends",),               # plans: native, vendor, baselines, reference, timing
    ("kernels",),                # schedules, their spaces, compilation
    # leaves: importable by every layer above, and among themselves in this order
    ("cache", "features"),
    ("environment", "graphs"),
    ("budget", "cache_entry", "capability", "cuda_sources", "paths"),
    ("dtypes",),                 # the element-type table (C type, size, tolerance)
    ("errors",),
    ("prebuild",),               # install-time cubins: standard library only (setup.py loads it by path)
)

# The CuPy rule. The GPU libraries are imported only inside functions (never at module level), and
# only by the GPU layers (whole packages) and by the few modules at the GPU boundary named here.
GPU_LIBRARIES = ("cupy", "cupyx", "cupy_backends")
CUPY_PACKAGES = (f"{PACKAGE}.kernels", f"{PACKAGE}.backends")
CUPY_MODULES = {
    f"{PACKAGE}.torch.cuda": "the CUDA path of the PyTorch ops (DLPack views, torch's stream)",
    f"{PACKAGE}.api": "turns user arrays (CuPy or DLPack) into CuPy arrays",
    f"{PACKAGE}.capability": "counts the visible devices",
    f"{PACKAGE}.environment": "reads device properties and library versions",
    f"{PACKAGE}.scheduler.probing.measure": "the measurer: synchronizes and uploads the float64 reference",
    f"{PACKAGE}.bench.toolkit": "every GPU call of the benchmark (a NumPy fake replaces it in tests)",
    f"{PACKAGE}.bench.reorder_gain": "moves SpMM's features and result with the vertices on the device",
}


class Import(NamedTuple):
    importer: str          # module name, or a file path relative to ROOT for tests and scripts
    module: str            # the absolute name of the module imported from
    names: tuple           # `from module import names`; empty for `import module`
    line: int
    top_level: bool        # runs when the importer is imported (not inside a function)

    def where(self) -> str:
        return f"{self.importer}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@lru_cache(maxsize=None)
def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of a `from` import made in `package`."""
    if not node.level:
        return node.module
    base = package.split(".")
    if node.level - 1 >= len(base):
        raise AssertionError(f"relative import beyond the top package in {package}")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _literal_import(node: ast.Call) -> str | None:
    """The module of `importlib.import_module("x")` / `__import__("x")` with a literal name."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def read_imports(path: Path, importer: str, package: str) -> list[Import]:
    """Every import in the file, at any depth; `package` resolves its relative imports."""
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(importer, a.name, (), child.lineno, not in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append(Import(importer, _absolute(child, package), tuple(a.name for a in child.names),
                                    child.lineno, not in_function))
            elif isinstance(child, ast.Call) and (literal := _literal_import(child)):
                found.append(Import(importer, literal, (), child.lineno, not in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


@lru_cache(maxsize=None)
def package_imports() -> tuple[Import, ...]:
    found = []
    for name, path in package_modules().items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found += read_imports(path, name, package)
    return tuple(found)


def is_internal(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def targets(imp: Import) -> set[str]:
    """The package modules an import loads: `from pkg import sub` loads pkg.sub."""
    if not imp.names:
        return {imp.module}
    subs = {f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in package_modules()}
    return subs | ({imp.module} if len(subs) < len(imp.names) else set())


def import_graph() -> dict[str, dict[str, Import]]:
    """importer -> {imported package module: the first import that loads it}."""
    graph: dict[str, dict[str, Import]] = {name: {} for name in package_modules()}
    for imp in package_imports():
        if is_internal(imp.module):
            for target in targets(imp):
                graph[imp.importer].setdefault(target, imp)
    return graph


def find_cycle(graph: dict[str, dict]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None. Iterative depth-first search with three colours."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def top_level_names(path: Path) -> set[str]:
    """Names bound when the module runs: definitions, assignments and imports outside functions and
    classes (inside `if`/`try`/`with`/`for` too); a module with `__getattr__` also offers its
    `__all__`."""
    names: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))

    def bind(target):
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
                bind(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars)
            for field in ("body", "orelse", "finalbody", "handlers"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(getattr(node, field, []))

    visit(tree.body)
    if "__getattr__" in names:
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                names.update(getattr(e, "value", "") for e in getattr(node.value, "elts", []))
    return names


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def layer_of(unit: str) -> int | None:
    """The layer index (0 = top) of a unit; None when LAYERS lacks it (reported by its own test)."""
    return next((i for i, layer in enumerate(LAYERS) if unit in layer), None)


def uses_gpu_library(imp: Import) -> bool:
    return imp.module.split(".")[0] in GPU_LIBRARIES


def cupy_allowed(module: str) -> bool:
    return module in CUPY_MODULES or any(module.startswith(p + ".") for p in CUPY_PACKAGES)


# --- the helpers above, on small inputs --------------------------------------------------------------

def test_find_cycle_reports_the_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a": 1}}) == ["a", "a"]
    assert find_cycle({"a": {"b": 1, "c": 1}, "b": {"c": 1}, "c": {}}) is None


def test_read_imports_resolves_relative_imports_and_tells_function_level_apart(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("from . import a\nfrom ..b import c\nimport cupy\n"
                   "def f():\n    from .d import e\n    import importlib; importlib.import_module('cupyx')\n")
    got = [(i.module, i.names, i.top_level) for i in read_imports(src, "p.q.mod", "p.q")]
    assert got == [("p.q", ("a",), True), ("p.b", ("c",), True), ("cupy", (), True),
                   ("p.q.d", ("e",), False), ("importlib", (), False), ("cupyx", (), False)]


def test_top_level_names_sees_definitions_assignments_and_imports_but_not_function_locals(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("import os.path\nfrom x import y as z\nA, (B, C) = 1, (2, 3)\nD: int = 4\n"
                   "try:\n    import e\nexcept ImportError:\n    F = None\n"
                   "def g():\n    hidden = 1\nclass H:\n    inner = 2\n")
    assert top_level_names(src) == {"os", "z", "A", "B", "C", "D", "e", "F", "g", "H"}


# --- the package -------------------------------------------------------------------------------------

def test_the_package_import_graph_has_no_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle:
        steps = [f"{a} -> {b} ({graph[a][b].where()})" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle:\n  " + "\n  ".join(steps))


def _external_imports() -> list[Import]:
    """The autosage_cli imports of the tests and scripts (absolute only)."""
    files = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "scripts").rglob("*.py"))
    return [imp for path in files for imp in read_imports(path, str(path.relative_to(ROOT)), "")
            if is_internal(imp.module)]


def test_every_import_of_a_package_module_or_name_resolves():
    """Function-level imports included: they run only on some paths (many only on a GPU), so a
    function moved elsewhere must not leave one behind that no CPU test executes."""
    modules = package_modules()
    problems = []
    for imp in [i for i in package_imports() if is_internal(i.module)] + _external_imports():
        if imp.module not in modules:
            problems.append(f"{imp.where()}: no module {imp.module}")
            continue
        defined = top_level_names(modules[imp.module])
        problems += [f"{imp.where()}: {imp.module} has no {name!r}" for name in imp.names
                     if name != "*" and name not in defined and f"{imp.module}.{name}" not in modules]
    assert not problems, "\n".join(problems)


def test_every_unit_of_the_package_has_a_layer():
    units = {unit_of(m) for m in package_modules()}
    listed = [u for layer in LAYERS for u in layer]
    assert len(listed) == len(set(listed)), "a unit is listed twice in LAYERS"
    assert units == set(listed), (f"not in LAYERS: {sorted(units - set(listed))}; "
                                  f"in LAYERS but gone: {sorted(set(listed) - units)}")


def test_imports_go_down_the_layers():
    upward = []
    for importer, imported in import_graph().items():
        for target, imp in imported.items():
            a, b = unit_of(importer), unit_of(target)
            if a != b and None not in (layer_of(a), layer_of(b)) and layer_of(b) <= layer_of(a):
                upward.append(f"{imp.where()}: {a} (layer {layer_of(a)}) imports {target} "
                              f"(layer {layer_of(b)})")
    assert not upward, "imports that do not go down:\n" + "\n".join(upward)


def test_cupy_is_imported_only_inside_functions_of_the_gpu_modules():
    gpu = [imp for imp in package_imports() if uses_gpu_library(imp)]
    at_top = [f"{imp.where()}: import of {imp.module} at module level" for imp in gpu if imp.top_level]
    outside = [f"{imp.where()}: imports {imp.module}" for imp in gpu if not cupy_allowed(imp.importer)]
    assert not at_top and not outside, "\n".join(at_top + outside)
    # the named boundary modules are exactly those that import it: a stale entry is removed
    assert {imp.importer for imp in gpu if imp.importer in CUPY_MODULES} == set(CUPY_MODULES)


def test_every_module_imports_where_cupy_cannot_be_imported():
    """What the CuPy rule buys: a machine without a GPU stack can import everything (the torch
    subpackage needs torch itself and is left out when torch is missing)."""
    script = (
        "import importlib, importlib.util, sys\n"
        f"for name in {GPU_LIBRARIES!r}:\n"
        "    sys.modules[name] = None\n"
        "has_torch = importlib.util.find_spec('torch') is not None\n"
        f"for name in {sorted(package_modules())!r}:\n"
        f"    if has_torch or not name.startswith('{PACKAGE}.torch'):\n"
        "        importlib.import_module(name)\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


# Libraries the bare install (`make install` in a fresh venv) does not bring, and test helpers
# that import them: a test file may import these at module level only after skipping without them.
OPTIONAL_LIBRARIES = {"torch": "torch", "torch_geometric": "torch_geometric", "ogb": "ogb",
                      "nvmath": "nvmath", "torch_helpers": "torch", f"{PACKAGE}.torch": "torch"}


def _guarded_library(stmt: ast.stmt) -> str | None:
    """The library a module-level `x = pytest.importorskip("lib", ...)` skips without, if it is one."""
    value = getattr(stmt, "value", None)
    if isinstance(stmt, (ast.Assign, ast.Expr)) and isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr == "importorskip" and value.args:
            first = value.args[0]
            return first.value if isinstance(first, ast.Constant) else None
    return None


def unguarded_optional_imports(path: Path) -> list[str]:
    """Module-level imports of an optional library in a test file before any importorskip of it
    (pytest collects every file, also with -m "not gpu", so one such import fails a bare `make test`)."""
    guarded, found = set(), []
    for stmt in ast.parse(path.read_text()).body:
        if (lib := _guarded_library(stmt)) is not None:
            guarded.add(lib)
        names = ([a.name for a in stmt.names] if isinstance(stmt, ast.Import)
                 else [stmt.module or ""] if isinstance(stmt, ast.ImportFrom) and not stmt.level else [])
        for name in names:
            needs = next((lib for prefix, lib in OPTIONAL_LIBRARIES.items()
                          if name == prefix or name.startswith(prefix + ".")), None)
            if needs is not None and needs not in guarded:
                found.append(f"{path.name}:{stmt.lineno}: imports {name} without skipping when {needs} "
                             f"is missing")
    return found


def test_unguarded_optional_imports_finds_an_import_before_its_skip(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("import pytest\nimport torch\ntorch = pytest.importorskip('torch')\n"
                   "from torch_helpers import leaf\nimport torch_geometric\n")
    assert [line.split(":")[1] for line in unguarded_optional_imports(bad)] == ["2", "5"]
    good = tmp_path / "test_good.py"
    good.write_text("import pytest\ntorch = pytest.importorskip('torch')\nimport torch.nn\n"
                    f"from {PACKAGE}.torch import Graph\n\ndef f():\n    import torch_geometric\n")
    assert unguarded_optional_imports(good) == []


def test_every_test_file_collects_without_the_optional_libraries():
    """The README's `make test` on a bare install: every test file, GPU ones too (collected before
    their marker deselects them), imports its optional libraries only after skipping without them."""
    found = [line for path in sorted((ROOT / "tests").glob("*.py")) if path.name != "torch_helpers.py"
             for line in unguarded_optional_imports(path)]
    assert not found, "\n".join(found)
