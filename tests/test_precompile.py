"""Which kernel modules get built, on CPU with a recording stand-in for CuPy: one module per
instantiation; a plan's lookup builds only its own; `compile_plans` builds exactly the probed
candidates' kernels (attention's sub-steps and second kernels included), each once even when
threads race for it; `precompile` builds every instantiation so no later lookup compiles."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from autosage_cli.backends import native, native_attention
from autosage_cli.backends.attention_unfused import substep_schedules
from autosage_cli.backends.native_common import kernel_for
from autosage_cli.errors import AutosageError
from autosage_cli.kernels import attention_space
from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import schedule as sched
from autosage_cli.kernels import util
from autosage_cli.kernels.compile import KernelRef
from autosage_cli.dtypes import vector_bytes_fit


class Recorder:
    """A builder that records every module it builds; `broken` expressions fail to compile."""

    def __init__(self, broken=(), delay_s: float = 0.0):
        self.built: list[KernelRef] = []
        self.broken, self.delay_s = set(broken), delay_s
        self.lock = threading.Lock()

    def __call__(self, ref: KernelRef, device_id=None):
        time.sleep(self.delay_s)
        with self.lock:
            self.built.append(ref)
        if ref.expression in self.broken:
            raise RuntimeError(f"nvrtc: error in {ref.source_file}\n  line 2: bad template")
        return ("kernel", ref)


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(kcompile, "_memo", kcompile.ModuleMemo(rec))
    return rec


def int32_graph():
    return SimpleNamespace(indices=np.zeros(4, dtype=np.int32))


def test_a_lookup_builds_only_its_own_module(recorder):
    s = sched.registry("spmm")[0]
    assert kernel_for(s) == ("kernel", KernelRef(s.source_file, s.name_expression("float")))
    assert recorder.built == [KernelRef(s.source_file, s.name_expression("float"))]
    kernel_for(s)
    assert len(recorder.built) == 1                      # memoized


def test_precompile_then_every_kernel_lookup_hits_a_compiled_module(recorder):
    seconds = kcompile.precompile()
    refs = kcompile.instantiations()
    files = {s.source_file for s in sched.all_schedules()} | {attention_space.SOFTMAX_SOURCE}
    assert set(seconds) == files and all(t >= 0 for t in seconds.values())
    assert sorted(recorder.built) == sorted(refs) and len(set(refs)) == len(refs)  # one module each
    # Every schedule float32 runs (the 16-byte half schedules never launch in float).
    for op in ("spmm", "sddmm"):
        for s in sched.registry(op):
            if vector_bytes_fit(s.vec, "float32") is None:
                kernel_for(s)
    for s in sched.registry("attention"):
        runs_in_float = vector_bytes_fit(s.vec, "float32") is None
        for expr in attention_space.expressions(s, "float", "int") if runs_in_float else ():
            native_attention.kernel(s.source_file, expr)
    assert len(recorder.built) == len(refs)              # ...and no lookup compiled another one


def test_precompile_builds_the_extra_modules_with_the_kernels(recorder):
    helpers = list(util.MODULES.values())
    seconds = kcompile.precompile(["sddmm"], extra=helpers)
    assert set(util.SOURCES) <= set(seconds) and set(helpers) <= set(recorder.built)
    assert sorted(recorder.built) == sorted(helpers + kcompile.instantiations(["sddmm"]))


def test_precompile_of_one_op_compiles_only_what_its_plans_launch(recorder):
    assert set(kcompile.precompile(["spmm"])) == {s.source_file for s in sched.registry("spmm")}
    assert {r.source_file for r in recorder.built} == {s.source_file for s in sched.registry("spmm")}
    # attention's unfused pipeline runs native SDDMM and SpMM kernels
    att = {r.source_file for r in kcompile.instantiations(["attention"])}
    assert {s.source_file for s in sched.registry("sddmm")} <= att
    assert {s.source_file for s in sched.registry("spmm")} <= att
    with pytest.raises(AutosageError):
        kcompile.precompile(["gemm"])


def test_compile_plans_builds_exactly_the_candidates_kernels(recorder):
    picks = sched.candidates("spmm", 64)[:3]
    outcome = native.compile_plans(int32_graph(), picks, 64)
    assert set(outcome) == {s.name for s in picks}
    assert all(ms >= 0 and error is None for ms, error in outcome.values())
    # ...and the helper groups an SpMM tune launches (inputs, poisoning, verification), no other
    assert sorted(recorder.built) == sorted({KernelRef(s.source_file, s.name_expression("float"))
                                             for s in picks} | {util.MODULES["core"], util.MODULES["values/F32"]})
    assert len(recorder.built) < len(kcompile.instantiations(["spmm"])) / 10


def test_attention_candidates_bring_their_second_kernels_and_sub_steps(recorder):
    by_family = {f: next(s for s in sched.candidates("attention", 64, 4) if s.family == f)
                 for f in ("fused", "fused_split", "unfused")}
    native.compile_plans(int32_graph(), list(by_family.values()), 64, 4)
    built = set(recorder.built)
    split, unfused = by_family["fused_split"], by_family["unfused"]
    assert KernelRef(split.source_file, attention_space.combine_expression("float", "int")) in built
    assert KernelRef(unfused.source_file, attention_space.softmax_heavy_expression(unfused, "int")) in built
    for step in substep_schedules(unfused, 64):
        assert KernelRef(step.source_file, step.name_expression("float")) in built
    expected = {r for s in by_family.values() for r in native.kernel_refs(s, 64)}
    assert built == expected | set(util.tune_modules("attention", "float32", "int"))


def test_int64_graphs_get_long_long_attention_kernels_and_no_int32_only_ones(recorder):
    s = next(x for x in sched.candidates("attention", 64, 1) if x.family == "fused")
    spmm = sched.candidates("spmm", 64)[0]
    outcome = native.compile_plans(SimpleNamespace(indices=np.zeros(2, dtype=np.int64)), [s, spmm], 64)
    fused = KernelRef(s.source_file, attention_space.fused_expression(s, "float", "long long"))
    assert sorted(recorder.built) == sorted([*util.tune_modules("attention", "float32", "long long"), fused])
    assert set(outcome) == {s.name}                     # native.prepare refuses SpMM on int64 indices


def test_a_schedule_that_cannot_run_is_not_compiled(recorder):
    wide = next(s for s in sched.registry("spmm") if s.supports(1) is not None)
    assert native.compile_plans(int32_graph(), [wide], 1) == {}
    # only the helper groups a probe needs
    assert sorted(recorder.built) == sorted(util.tune_modules("spmm", "float32"))


def test_a_compile_failure_is_reported_per_schedule_and_remembered(monkeypatch):
    picks = sched.candidates("sddmm", 32)[:2]
    bad = picks[0].name_expression("float")
    rec = Recorder(broken={bad})
    monkeypatch.setattr(kcompile, "_memo", kcompile.ModuleMemo(rec))
    outcome = native.compile_plans(int32_graph(), picks, 32)
    assert outcome[picks[0].name][1].startswith(f"{bad}: RuntimeError: nvrtc: error in")
    assert "\n" not in outcome[picks[0].name][1] and outcome[picks[1].name][1] is None
    with pytest.raises(RuntimeError, match="bad template"):
        kernel_for(picks[0])                           # the same error, not a second compile
    assert rec.built.count(KernelRef(picks[0].source_file, bad)) == 1
    with pytest.raises(RuntimeError, match="1 of .* kernels failed to compile; first"):
        kcompile.precompile(["sddmm"])


def test_racing_threads_build_each_module_once(monkeypatch):
    rec = Recorder(delay_s=0.02)
    memo = kcompile.ModuleMemo(rec)
    refs = kcompile.instantiations(["sddmm"])[:8]
    results = []

    def compile_some(part):
        results.append(memo.compile(part, workers=4))

    threads = [threading.Thread(target=compile_some, args=(refs[i:] + refs[:i],)) for i in (0, 3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(rec.built) == sorted(refs)             # every module built exactly once
    assert all(set(r) == set(refs) and all(x.error is None for x in r.values()) for r in results)
    paid = [x.ref for r in results for x in r.values() if x.ms > 0]
    assert sorted(paid) == sorted(refs)                  # ...and charged to the call that built it
    assert memo.total_ms == pytest.approx(sum(x.ms for r in results for x in r.values()))


def test_parallel_builds_overlap_and_report_each_one(monkeypatch):
    rec = Recorder(delay_s=0.1)
    memo = kcompile.ModuleMemo(rec)
    refs = kcompile.instantiations(["spmm"])[:8]
    done = []
    t0 = time.perf_counter()
    records = memo.compile(refs, workers=8, on_done=done.append)
    assert time.perf_counter() - t0 < 0.5               # 8 x 0.1 s serially
    assert len(done) == 8 and list(records) == refs and all(r.ms >= 90 for r in records.values())
