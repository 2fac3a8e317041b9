"""The package's shape, read with `ast`: no module over MAX_MODULE_LINES, no function over
MAX_FUNCTION_LINES, no branch on an op's name outside `autosage_cli/ops/` (everything else asks
the op's spec) and no branch on a kernel family's name anywhere (everything asks the family's
entry). Each failure lists every offender with its place."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from autosage_cli import ops

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autosage_cli"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
OPS_PACKAGE = PACKAGE / "ops"


@lru_cache(maxsize=None)
def modules() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def test_no_module_is_over_the_line_limit():
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: " + ", ".join(long)


def test_no_function_is_over_the_line_limit():
    long = [f"{_where(p, node)} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for p, tree in modules().items() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: " + ", ".join(long)


def _names_an_op(node: ast.AST) -> bool:
    """`op`, `x.op`: an expression that holds an op's name."""
    return (isinstance(node, ast.Name) and node.id == "op") or (
        isinstance(node, ast.Attribute) and node.attr == "op")


def _spelled(node: ast.AST, names) -> list[str]:
    """The `names` a literal spells: "spmm", or ("spmm", "sddmm") and the like."""
    if isinstance(node, ast.Constant) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [name for elt in node.elts for name in _spelled(elt, names)]
    return []


def _op_literals(node: ast.AST) -> list[str]:
    return _spelled(node, ops.names())


def branches(tree: ast.Module, holds_name, literals) -> list[ast.Compare]:
    """Comparisons (==, !=, in, not in, either side) of an expression that `holds_name` with a
    literal that spells names (`literals` returns them)."""
    found = []
    for node in (n for n in ast.walk(tree) if isinstance(n, ast.Compare)):
        operands = [node.left, *node.comparators]
        if any(holds_name(x) and literals(y) for a, b in zip(operands, operands[1:])
               for x, y in ((a, b), (b, a))):
            found.append(node)
    return found


def op_branches(tree: ast.Module) -> list[ast.Compare]:
    """Comparisons of an op's name with a spelled-out op name."""
    return branches(tree, _names_an_op, _op_literals)


def test_the_branch_finder_sees_the_forms_it_must():
    code = ('if op == "spmm": pass\nif "sddmm" != s.op: pass\nif op in ("spmm", "attention"): pass\n'
            'if s.op == op: pass\nif name == "spmm": pass\n')
    assert [n.lineno for n in op_branches(ast.parse(code))] == [1, 2, 3]


def test_no_branch_on_an_op_name_outside_the_op_specs():
    offenders = [_where(p, node) for p, tree in modules().items()
                 if OPS_PACKAGE not in p.parents for node in op_branches(tree)]
    assert not offenders, ("branches on an op name outside autosage_cli/ops/ (ask the op's spec "
                           "instead): " + ", ".join(offenders))


def test_every_op_has_a_spec_with_a_consistent_contract():
    from types import SimpleNamespace

    graph = SimpleNamespace(n_rows=5, n_cols=7, nnz=11)
    for name in ops.names():
        spec = ops.get(name)
        assert spec.name == name and spec.dtypes and spec.dtypes[0] == "float32"
        shapes = spec.input_shapes(graph, 8, 2 if spec.multi_head else 1)
        assert len(shapes) == len(spec.operands) and all(min(s) >= 1 for s in shapes)
        # attention-additive has no vendor: its guardrail is the float64 reference (ops/additive.py)
        assert spec.vendor_names() or name == "attention-additive"
        assert all(ops.vendor_op(v) == name for v in spec.vendor_names())
        assert spec.compulsory_bytes(5, 7, 11, 8) > spec.compulsory_bytes(5, 7, 11, 4)


# What a family needs (cost model, staging, plan layout, work and row lists, name expressions, the
# kernels a plan launches, index types, score variants, sub-steps) is read from its entry, never
# from its name: no module of the package compares a family's name with a spelled-out family.


def _family_literals(node: ast.AST) -> list[str]:
    from autosage_cli.kernels.schedule import FAMILIES

    return _spelled(node, FAMILIES)


def family_branches(tree: ast.Module) -> list[ast.Compare]:
    """Comparisons of `x.family` with a spelled-out family name."""
    return branches(tree, lambda node: isinstance(node, ast.Attribute) and node.attr == "family",
                    _family_literals)


def test_the_family_branch_finder_sees_the_forms_it_must():
    code = ('if s.family == "vector": pass\nif s.family in ("split", "splitwarp"): pass\n'
            'if "edge" != s.family: pass\nif s.family not in seen: pass\nif name == "vector": pass\n')
    assert [n.lineno for n in family_branches(ast.parse(code))] == [1, 2, 3]


def test_no_module_branches_on_a_family_name():
    offenders = [_where(p, node) for p, tree in modules().items() for node in family_branches(tree)]
    assert not offenders, "branches on a family name (ask its Family entry): " + ", ".join(offenders)


def test_every_family_names_a_layout_and_a_cost_model_its_op_has():
    from autosage_cli.backends import native_attention, native_sddmm, native_spmm
    from autosage_cli.kernels.schedule import FAMILIES
    from autosage_cli.scheduler.estimate import cost_models

    layouts = {"spmm": native_spmm.LAYOUTS, "sddmm": native_sddmm.LAYOUTS,
               "attention": native_attention.PLANS}
    missing = [f"{name} ({family.op}: plan {family.plan!r}, cost {family.cost!r})"
               for name, family in FAMILIES.items()
               if family.plan not in layouts[family.op] or family.cost not in cost_models(family.op)]
    assert not missing, "families whose layout or cost model their op lacks: " + ", ".join(missing)
    for op, table in layouts.items():   # and no layout is left without a family
        assert set(table) == {f.plan for f in FAMILIES.values() if f.op == op}, op
