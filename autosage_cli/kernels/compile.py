"""Kernel compilation: CuPy RawModule with name_expressions at run time (memoized per process, and
on disk by CuPy's kernel cache), and the CPU-side check CI runs with nvcc on the *same* source text
and options.

One module per kernel file holds every registered instantiation of that file, so a process compiles
each file once.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import AutosageError

CUDA_DIR = Path(os.environ.get("AUTOSAGE_CUDA_DIR", Path(__file__).resolve().parents[2] / "cuda"))
ARCH = "sm_90"
# The options NVRTC gets at run time; the nvcc check passes the same ones.
COMPILE_OPTIONS = ("-std=c++17",)


def kernel_source(filename: str) -> str:
    path = CUDA_DIR / filename
    if not path.is_file():
        raise AutosageError(f"kernel source {path} not found (set AUTOSAGE_CUDA_DIR to the cuda/ folder)")
    return path.read_text()


def sources_hash() -> str:
    """Hash of every file under cuda/: part of the cache's software key (a changed kernel re-tunes)."""
    h = hashlib.blake2b(digest_size=12)
    for path in sorted(CUDA_DIR.glob("*")):
        if path.suffix in (".cu", ".cuh"):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def runtime_options() -> tuple[str, ...]:
    return COMPILE_OPTIONS + (f"-I{CUDA_DIR}",)


@functools.lru_cache(maxsize=None)
def _module(filename: str, name_expressions: tuple[str, ...]):
    import cupy

    return cupy.RawModule(code=kernel_source(filename), options=runtime_options(),
                          name_expressions=list(name_expressions), backend="nvrtc")


def get_function(filename: str, name_expression: str, siblings: tuple[str, ...] = ()):
    """The compiled kernel for one instantiation. `siblings` are the other instantiations of the
    same file compiled into the same module (pass the registry's, so one compile serves them all)."""
    exprs = tuple(sorted(set(siblings) | {name_expression}))
    return _module(filename, exprs).get_function(name_expression)


# ---------------------------------------------------------------- compiling ahead

# Ops whose plans launch other ops' kernels: attention's unfused pipeline runs native SDDMM and SpMM.
RUNS_KERNELS_OF = {"attention": ("sddmm", "spmm")}


def module_sets(ops=None, dtype: str = "float", index: str = "int") -> dict[str, tuple[str, ...]]:
    """kernel file -> the name expressions its runtime module is compiled with, for every file the
    plans of `ops` (None: every op) may launch. These are the sets the backends pass to get_function
    (the registry's instantiations of the file, or the space module's `file_expressions` where it
    has one), so a module compiled from them is the one get_function finds memoized."""
    import importlib

    from .schedule import OPS, SPACE_MODULES, registry

    chosen = list(OPS if ops is None else ops)
    for op in list(chosen):
        chosen += [dep for dep in RUNS_KERNELS_OF.get(op, ()) if dep not in chosen]
    sets: dict[str, tuple[str, ...]] = {}
    for op in chosen:
        schedules = registry(op)   # unknown op: AutosageError
        file_expressions = getattr(importlib.import_module(SPACE_MODULES[op]), "file_expressions", None)
        for filename in dict.fromkeys(s.source_file for s in schedules):
            if callable(file_expressions):
                exprs = set(file_expressions(filename, dtype, index))
            else:
                exprs = {s.name_expression(dtype) for s in schedules if s.source_file == filename}
            sets[filename] = tuple(sorted(exprs))
    return sets


def precompile(ops=None) -> dict[str, float]:
    """Compile (NVRTC, or load from CuPy's disk cache) and load the module of every kernel file the
    plans of `ops` (None: every op) may launch, once per process; returns file -> seconds (about 0
    for a module already compiled in this process). Timing code calls it first, so the compile is
    not charged to whatever it times."""
    seconds: dict[str, float] = {}
    for filename, exprs in module_sets(ops).items():
        t0 = time.perf_counter()
        _module(filename, exprs).get_function(exprs[0])   # RawModule compiles on first use
        seconds[filename] = time.perf_counter() - t0
    return seconds


# ---------------------------------------------------------------- nvcc check (no GPU needed)

@dataclass(frozen=True)
class KernelReport:
    name_expression: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int


_PTXAS_FUNC = re.compile(r"Compiling entry function '([^']+)' for")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def nvcc_check(filename: str, name_expressions: list[str], arch: str = ARCH) -> list[KernelReport]:
    """Compile `filename` with nvcc for `arch`, instantiating every name expression (by taking its
    address, which is what NVRTC's name expressions do), and return ptxas' per-kernel report.
    Raises RuntimeError with the compiler output on any error."""
    source = kernel_source(filename)
    inst = "\n".join(f"void* autosage_instance_{i} = (void*)&{expr};"
                     for i, expr in enumerate(name_expressions))
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / filename
        cu.write_text(source + "\n// instantiations (name expressions)\n" + inst + "\n")
        cmd = ["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", *COMPILE_OPTIONS,
               f"-I{CUDA_DIR}", "-o", str(Path(tmp) / "out.cubin"), str(cu)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {filename}:\n{proc.stderr}")
    return _parse_ptxas(proc.stderr, name_expressions)


def _parse_ptxas(text: str, name_expressions: list[str]) -> list[KernelReport]:
    reports, mangled, frame = [], None, None
    for line in text.splitlines():
        if m := _PTXAS_FUNC.search(line):
            mangled, frame = m.group(1), None
        elif (m := _PTXAS_FRAME.search(line)) and mangled:
            frame = tuple(int(x) for x in m.groups())
        elif (m := _PTXAS_REGS.search(line)) and mangled and frame:
            reports.append(KernelReport(mangled, int(m.group(1)), frame[1], frame[2], frame[0]))
            mangled = None
    return reports
