"""Every registered schedule of every op compiles for sm_90 with nvcc, from the same source text and
options NVRTC gets at run time, without local-memory spills (CPU only; nvcc must be on PATH).

Each kernel file is compiled once with all its instantiations (the runtime compiles each
instantiation as its own module; one nvcc run per file checks them all faster); the files compile
concurrently. A space module may list extra instantiations a schedule
needs beyond its name expression (e.g. a second kernel, or int64 index variants) through
`file_expressions(source_file, dtype[, index])`; they are checked too.
"""
from __future__ import annotations

import functools
import importlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import schedule as sched

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def expressions_by_file() -> dict[str, set[str]]:
    files: dict[str, set[str]] = {}
    for s in sched.all_schedules():
        files.setdefault(s.source_file, set()).add(s.name_expression("float"))
    for op in sched.OPS:
        space = importlib.import_module(sched.SPACE_MODULES[op])
        extra = getattr(space, "file_expressions", None)
        if extra is None:
            continue
        index_types = tuple(getattr(space, "INDEX_TYPES", {}).values())
        for source_file in {s.source_file for s in space.SCHEDULES}:
            if index_types:
                for index in index_types:
                    files[source_file].update(extra(source_file, "float", index))
            else:
                files[source_file].update(extra(source_file, "float"))
    return files


FILES = expressions_by_file()


@functools.lru_cache(maxsize=1)
def all_reports() -> dict[str, object]:
    """nvcc report per file (or the exception it raised), all files compiled concurrently."""
    def check(item):
        name, exprs = item
        try:
            return name, kcompile.nvcc_check(name, sorted(exprs))
        except Exception as exc:  # reported per file by the test below
            return name, exc

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(check, FILES.items()))


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
