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
