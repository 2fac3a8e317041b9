"""compile.precompile builds exactly the modules the backends later ask get_function for (so the
benchmark pays NVRTC once, before it times anything), on CPU with a recording stand-in for CuPy."""
from __future__ import annotations

import pytest

from autosage_cli.backends import native_attention
from autosage_cli.backends.native_common import kernel_for
from autosage_cli.errors import AutosageError
from autosage_cli.kernels import attention_space
from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import schedule as sched


class Module:
    def __init__(self, filename, exprs, built):
        self.filename, self.exprs = filename, exprs
        built.append((filename, exprs))

    def get_function(self, expr):
        assert expr in self.exprs
        return (self.filename, expr)


@pytest.fixture
def built(monkeypatch):
    """Every module constructed, memoized per (file, expressions) as the real _module is."""
    log: list = []
    cache: dict = {}

    def fake_module(filename, exprs):
        if (filename, exprs) not in cache:
            cache[filename, exprs] = Module(filename, exprs, log)
        return cache[filename, exprs]

    monkeypatch.setattr(kcompile, "_module", fake_module)
    return log


def test_precompile_then_every_kernel_lookup_hits_a_compiled_module(built):
    seconds = kcompile.precompile()
    files = {s.source_file for s in sched.all_schedules()} | {attention_space.SOFTMAX_SOURCE}
    assert set(seconds) == files and all(t >= 0 for t in seconds.values())
    assert len(built) == len(files)                    # one module per file
    for op in ("spmm", "sddmm"):
        for s in sched.registry(op):
            kernel_for(s)
    for s in sched.registry("attention"):
        source = attention_space.SOFTMAX_SOURCE if s.family == "unfused" else attention_space.FUSED_SOURCE
        for expr in attention_space.expressions(s, "float", "int"):
            native_attention.kernel(source, expr, "int")
    assert len(built) == len(files)                    # ...and no lookup compiled another one


def test_precompile_of_one_op_compiles_only_what_its_plans_launch(built):
    assert set(kcompile.precompile(["spmm"])) == {s.source_file for s in sched.registry("spmm")}
    # attention's unfused pipeline runs native SDDMM and SpMM kernels
    att = set(kcompile.module_sets(["attention"]))
    assert {s.source_file for s in sched.registry("sddmm")} <= att
    assert {s.source_file for s in sched.registry("spmm")} <= att
    with pytest.raises(AutosageError):
        kcompile.precompile(["gemm"])
