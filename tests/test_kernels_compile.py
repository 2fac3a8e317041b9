"""Every registered schedule of every op compiles for sm_90 with nvcc, from the same source text and
options NVRTC gets at run time, without local-memory spills (CPU only; nvcc must be on PATH), in
every value type it can run in.

Each kernel file is compiled once with all its instantiations (the runtime compiles each
instantiation as its own module; one nvcc run per file checks them all faster); the files compile
concurrently. The instantiations are those the plans launch (`compile.schedule_kernels`: a second
kernel of a schedule, and the int64 index variants of the spaces that list INDEX_TYPES, too).
float32 checks every schedule. The 2-byte types run the same code with other loads and conversions,
so they check a sample that keeps the check within CI's time: bfloat16 every second schedule of each
family plus every schedule only the 2-byte types can run (16-byte vectors of 8 halves), float16 every
fourth of each family; so each family is checked in each type.
"""
from __future__ import annotations

import functools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import schedule as sched
from autosage_cli.kernels import epilogues, util
from autosage_cli.dtypes import DTYPES, vector_bytes_fit
from ptxas_helpers import reports

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

# dtype -> every n-th schedule of each family that is checked in it.
SCHEDULE_STRIDE = {"float32": 1, "bfloat16": 2, "float16": 4}
# The type in which every schedule that float32 cannot run is checked.
HALF_ONLY_CHECKED_IN = "bfloat16"


def index_types(op: str) -> tuple[str, ...]:
    wide = any(f.wide_indices for f in sched.BUILTIN_FAMILIES[op].values())   # 64-bit indices too
    return ("int", "long long") if wide else ("int",)


def checked_schedules(dtype: str) -> list:
    """The schedules checked in `dtype`: those its vector width allows, every n-th per family (and
    every half-only schedule in HALF_ONLY_CHECKED_IN)."""
    by_family: dict[str, list] = {}
    for s in sched.all_schedules():
        if vector_bytes_fit(s.vec, dtype) is None:
            by_family.setdefault(s.family, []).append(s)
    sample = [s for schedules in by_family.values() for s in schedules[::SCHEDULE_STRIDE[dtype]]]
    if dtype == HALF_ONLY_CHECKED_IN:
        sample += [s for s in sched.all_schedules()
                   if vector_bytes_fit(s.vec, "float32") and s not in sample]
    return sample


def additive_expressions() -> set[str]:
    """The additive (GAT) score's kernels: float32 only, one per fused/fused_split schedule float32
    runs, plus the chunk-statistics merge."""
    from autosage_cli.kernels import attention_families as af

    exprs = {af.additive_stats_expression(index) for index in index_types("attention")}
    for s in checked_schedules("float32"):
        if s.family in ("fused", "fused_split"):
            exprs |= {af.additive_expression(s, "float", index) for index in index_types("attention")}
    return exprs


def expressions_by_file() -> dict[str, set[str]]:
    files: dict[str, set[str]] = {}
    for dtype in SCHEDULE_STRIDE:
        for s in checked_schedules(dtype):
            for index in index_types(s.op):
                for ref in kcompile.schedule_kernels(s, dtype, index):
                    files.setdefault(ref.source_file, set()).add(ref.expression)
    files["attention_fused.cu"] |= additive_expressions()
    # the vendor path's epilogue launch (tests/test_epilogue.py checks the fused SpMM kernels)
    files[epilogues.VENDOR_FILE] = {epilogues.vendor_expression(t.c_type, e)
                                    for e in epilogues.FUSED for t in DTYPES.values()}
    for ref in util.MODULES.values():   # every group of the helper kernels
        files.setdefault(ref.source_file, set()).update(ref.expressions)
    return files


FILES = expressions_by_file()


@functools.lru_cache(maxsize=1)
def all_reports() -> dict[str, object]:
    """ptxas' report per file (or the exception nvcc raised): the install's where it built the
    instantiation (tests/ptxas_helpers.py), else nvcc's, the files compiled concurrently."""
    def check(item):
        name, exprs = item
        try:
            return name, reports(name, exprs)
        except Exception as exc:  # reported per file by the test below
            return name, exc

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(check, FILES.items()))


def test_every_family_is_checked_in_every_value_type():
    assert set(SCHEDULE_STRIDE) == set(DTYPES)
    for dtype in SCHEDULE_STRIDE:
        c_type = DTYPES[dtype].c_type
        checked = checked_schedules(dtype)
        assert {s.family for s in checked} == set(sched.FAMILIES), dtype
        if dtype == HALF_ONLY_CHECKED_IN:
            assert {s for s in sched.all_schedules() if s.vec == 8} <= set(checked)
        for s in checked:
            exprs = FILES[s.source_file]
            assert kcompile.schedule_kernels(s, dtype)[0].expression in exprs
            assert c_type == "float" or any(c_type in e for e in exprs)


def test_every_cuda_source_file_is_checked():
    assert {p.name for p in kcompile.CUDA_DIR.glob("*.cu")} == set(FILES)


def test_every_op_has_kernel_files():
    ops = {s.op for s in sched.all_schedules()}
    assert {"spmm", "sddmm"} <= ops
    assert all(f.endswith(".cu") and (kcompile.CUDA_DIR / f).is_file() for f in FILES)


@pytest.mark.parametrize("source_file", sorted(FILES))
def test_file_compiles_without_spills(source_file):
    report = all_reports()[source_file]
    if isinstance(report, Exception):
        pytest.fail(f"{source_file}: {report}")
    # Identical instantiations (schedules differing only in launch geometry) compile once.
    assert len(report) == len(FILES[source_file]), (
        f"{source_file}: {len(FILES[source_file])} instantiations, ptxas reported {len(report)}")
    bad = [f"{r.name_expression}: {r.spill_stores} B spill stores, {r.spill_loads} B spill loads, "
           f"{r.stack_frame} B stack, {r.registers} registers"
           for r in report if r.spill_stores or r.spill_loads]
    assert not bad, "\n".join(bad)


def test_only_two_byte_instantiations_include_the_half_headers():
    f32 = "spmm_subwarp<float, 8, 4, 4>"
    bf16 = "spmm_subwarp<__nv_bfloat16, 8, 8, 4>"
    assert kcompile.TWO_BYTE_DEFINE not in kcompile.runtime_options([f32])
    assert kcompile.TWO_BYTE_DEFINE in kcompile.runtime_options([bf16])
    assert kcompile.TWO_BYTE_DEFINE in kcompile.runtime_options(["attention_softmax_rows<int, 32, __half>"])
    # each compiles with the options its module gets at run time
    assert len(kcompile.nvcc_check("spmm_subwarp.cu", [f32])) == 1
    assert len(kcompile.nvcc_check("spmm_subwarp.cu", [bf16])) == 1


def test_a_module_is_keyed_on_every_cuda_source_not_only_its_own_file(tmp_path, monkeypatch):
    """CuPy's disk cache keys a module on its text; an edited header must change that text."""
    import shutil

    from autosage_cli import cuda_sources
    from autosage_cli.kernels import compile as kcompile

    for f in cuda_sources.CUDA_DIR.iterdir():
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setattr(cuda_sources, "CUDA_DIR", tmp_path)
    before = kcompile.module_source("spmm_vector.cu")
    assert before.startswith((tmp_path / "spmm_vector.cu").read_text())
    (tmp_path / "common.cuh").write_text((tmp_path / "common.cuh").read_text() + "\n// edited\n")
    after = kcompile.module_source("spmm_vector.cu")
    assert after != before and after.startswith((tmp_path / "spmm_vector.cu").read_text())
