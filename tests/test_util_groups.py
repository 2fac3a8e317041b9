"""The helper kernels (kernels/util.py) compile in groups, one module each: every expression a
wrapper launches is in exactly one group, a wrapper builds only its own group's module (once, even
when threads race), and a tune prefetches exactly the groups it launches: a float32 tune on int32
indices never the float64 references, the attention vendor's softmax or a long-long group."""
from __future__ import annotations

import ast
import re
import threading
from pathlib import Path

import pytest

from autosage_cli.kernels import compile as kcompile
from autosage_cli import ops
from autosage_cli.kernels import util, util_heads, util_labelprop
from autosage_cli.kernels.compile import KernelRef

WRAPPERS = ("_launch", "_fn", "_count")   # the calls whose first argument is a name expression
WRAPPER_MODULES = (util, util_heads, util_labelprop)   # the modules whose functions launch the helper kernels


def launched_patterns() -> list[re.Pattern]:
    """A pattern per name expression the wrapper modules launch: a string as written, an f-string
    with each substituted value (a codec or an index type) matching any text."""
    trees = [ast.parse(Path(m.__file__).read_text()) for m in WRAPPER_MODULES]
    patterns = []
    for node in (n for tree in trees for n in ast.walk(tree)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in WRAPPERS):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            patterns.append(re.compile(re.escape(arg.value)))
        elif isinstance(arg, ast.JoinedStr):
            parts = [re.escape(p.value) if isinstance(p, ast.Constant) else "(.+?)" for p in arg.values]
            patterns.append(re.compile("".join(parts)))
    return patterns


def test_every_launched_expression_is_in_exactly_one_group():
    counts: dict[str, int] = {}
    for exprs in util.GROUPS.values():
        for e in exprs:
            counts[e] = counts.get(e, 0) + 1
    assert all(n == 1 for n in counts.values()), [e for e, n in counts.items() if n > 1]
    patterns = launched_patterns()
    kernels = {e.partition("<")[0] for e in counts}
    assert {p.pattern.partition("<")[0] for p in patterns} == kernels   # every kernel is launched
    for pattern in patterns:                          # each launch has at least one instantiation
        assert any(pattern.fullmatch(e) for e in counts), pattern.pattern
    for e in counts:                                  # and no group holds a kernel nobody launches
        assert any(p.fullmatch(e) for p in patterns), e
    assert set(util.EXPRESSIONS) == set(counts) and len(util.EXPRESSIONS) == len(counts)


def test_a_group_takes_only_the_codec_and_index_type_its_name_says():
    for name, exprs in util.GROUPS.items():
        parts = name.split("/")
        for e in exprs:
            args = re.findall(r"[A-Za-z0-9 ]+", e.partition("<")[2])
            args = {a.strip() for a in args}
            for value in ({"F16", "BF16", "long long", "int"} & args):
                assert value in parts, (name, e)


def test_modules_are_one_per_group_from_the_helper_file():
    assert set(util.MODULES) == set(util.GROUPS)
    for name, ref in util.MODULES.items():
        assert ref.source_file in util.SOURCES and ref.expressions == util.GROUPS[name]
    assert {ref.source_file for ref in util.MODULES.values()} == set(util.SOURCES)
    assert len(set(util.MODULES.values())) == len(util.MODULES)


def test_a_float32_spmm_tune_on_int32_prefetches_no_reference_softmax_or_long_long_group():
    groups = ops.tune_groups("spmm", "float32", "int")
    assert groups == ("core", "values/F32")
    for op in ("spmm", "sddmm", "attention"):
        names = ops.tune_groups(op, "float32", "int")
        assert not any(n.startswith("reference/") or "long long" in n or "F16" in n for n in names), names
        assert ("softmax" in names) == (op == "attention")
        assert ("gather/F32/int" in names) == (op != "spmm")   # the SDDMM vendors gather rows per edge
        assert ops.tune_modules(op, "float32", "int") == tuple(util.MODULES[n] for n in names)


@pytest.mark.parametrize("dtype, codec", [("bfloat16", "BF16"), ("float16", "F16"), ("__half", "F16")])
@pytest.mark.parametrize("index", ["int", "long long"])
def test_a_two_byte_tune_prefetches_its_ops_device_reference_in_its_types(dtype, codec, index):
    for op in ("spmm", "sddmm", "attention"):
        names = ops.tune_groups(op, dtype, index)
        assert [n for n in names if n.startswith("reference/")] == [f"reference/{op}/{codec}/{index}"]
        assert f"values/{codec}" in names and "values/F32" not in names
        other = "int" if index == "long long" else "long long"
        assert not any(n.endswith("/" + other) for n in names), names
    assert f"softmax/{codec}/{index}" in ops.tune_groups("attention", dtype, index)


def test_tune_groups_of_an_op_without_helpers_of_its_own_and_bad_index_types():
    assert util.tune_groups("gemm", "float32") == ("core", "values/F32")
    with pytest.raises(ValueError):
        ops.tune_groups("spmm", "float32", "int64")


class GroupRecorder:
    """Builds like kernels.compile.build_module (one kernel, or {expression: kernel} for several),
    recording each module it builds."""

    def __init__(self):
        self.built: list[KernelRef] = []
        self.lock = threading.Lock()

    def __call__(self, ref: KernelRef, device_id=None):
        with self.lock:
            self.built.append(ref)
        kernels = {e: ("kernel", e) for e in ref.expressions}
        return kernels[ref.expression] if len(kernels) == 1 else kernels


@pytest.fixture
def recorder(monkeypatch):
    rec = GroupRecorder()
    monkeypatch.setattr(kcompile, "_memo", kcompile.ModuleMemo(rec))
    return rec


def test_a_wrapper_builds_only_its_groups_module_once(recorder):
    assert util._fn("autosage_spin") == ("kernel", "autosage_spin")
    assert util._fn("autosage_fill_u32") == ("kernel", "autosage_fill_u32")
    assert recorder.built == [util.MODULES["core"]]
    # a group of one kernel: its module's one function
    assert util._fn("autosage_edge_rows<int>") == ("kernel", "autosage_edge_rows<int>")
    assert recorder.built == [util.MODULES["core"], util.MODULES["edges/int"]]


def test_threads_racing_for_one_group_build_it_once(recorder):
    barrier = threading.Barrier(8)

    def launch():
        barrier.wait()
        util._fn("autosage_count_nan<BF16>")

    threads = [threading.Thread(target=launch) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert recorder.built == [util.MODULES["values/BF16"]]


def test_an_expression_no_group_has_is_a_key_error_and_builds_nothing(recorder):
    # backends/timing.py falls back to float64 sums on this KeyError
    with pytest.raises(KeyError):
        util._fn("autosage_squared_sums<F16, F32>")
    assert recorder.built == []


def test_each_kernel_is_defined_in_the_file_of_its_group():
    defined = {}
    for source in util.SOURCES:
        text = (kcompile.CUDA_DIR / source).read_text()
        for name in re.findall(r"__global__ void (autosage_\w+)", text):
            assert name not in defined, (name, source, defined.get(name))
            defined[name] = source
    for ref in util.MODULES.values():
        for e in ref.expressions:
            assert defined[e.partition("<")[0]] == ref.source_file, e
    assert set(defined) == {e.partition("<")[0] for e in util.EXPRESSIONS}
