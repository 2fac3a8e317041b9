"""Kernel compilation: one CuPy RawModule per kernel instantiation (a source file and one NVRTC name
expression), memoized per process and on disk by CuPy's kernel cache, compiled only when a plan
asks for it, or ahead of time in parallel (`compile_kernels`); and the CPU-side check CI runs with
nvcc on the *same* source text and options.

Why one module per instantiation: CuPy's disk cache keys a module on its source, options and name
expressions, so a module holding exactly one instantiation is found again by any later process
that needs that instantiation, whichever other kernels it probes; a tune compiles only the
candidates it probes. NVRTC releases the GIL while it compiles, so a thread pool compiles
independent modules in parallel.
"""
from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from ..cuda_sources import CUDA_DIR, kernel_source, sources_hash
from ..errors import one_line
from ..graphs.csr import default_workers   # NVRTC releases the GIL: threads compile in parallel
from ..dtypes import DTYPES, TWO_BYTE_DEFINE as TWO_BYTE_DEFINE_NAME, vector_bytes_fit
from .. import prebuild
from . import cubins, epilogues

ARCH = "sm_90"
# The options NVRTC gets at run time; the nvcc check passes the same ones.
COMPILE_OPTIONS = ("-std=c++17",)


# Defined for instantiations of a 2-byte value type (their rows' `header_define`): cuda/common.cuh
# then includes cuda_fp16.h and cuda_bf16.h.
TWO_BYTE_DEFINE = f"-D{TWO_BYTE_DEFINE_NAME}=1"


def header_defines(expressions) -> tuple[str, ...]:
    """The -D options of the value types the name expressions instantiate kernels on (each type's
    row: `DType.header_define`), in table order, each once; then the SpMM epilogue's, for
    expressions that instantiate one (kernels/epilogues.py: its kernels' epilogue arguments)."""
    wanted = (t.header_define for t in DTYPES.values()
              if t.header_define and any(t.c_type in e for e in expressions))
    return tuple(f"-D{name}=1" for name in dict.fromkeys(wanted)) + epilogues.header_defines(expressions)


def needs_two_byte_types(expressions) -> bool:
    """Whether any name expression instantiates a kernel on a 2-byte value type."""
    return TWO_BYTE_DEFINE in header_defines(expressions)


def runtime_options(expressions=()) -> tuple[str, ...]:
    """The NVRTC options of a module holding `expressions`."""
    return COMPILE_OPTIONS + (f"-I{CUDA_DIR}",) + header_defines(expressions)


def module_options(expressions) -> list[str]:
    """The options of a module of `expressions` less the include path (which differs between
    machines): what an install-time cubin records and must match."""
    return [o for o in runtime_options(expressions) if not o.startswith("-I")]


def module_source(filename: str) -> str:
    """The text a module is compiled from: the file, then a comment naming the hash of every cuda/
    source. CuPy's disk cache keys a module on this text, not on the headers it includes, so an
    edited header (or a shared kernel body another file includes) builds new modules instead of
    loading stale ones."""
    return prebuild.module_text(kernel_source(filename), sources_hash())


# ---------------------------------------------------------------- instantiations and modules

class KernelRef(NamedTuple):
    """One module: its file under cuda/ and its NVRTC name expression (a kernel instantiation), or
    several, one per line (a group of helper kernels compiled as one module: kernels/util.py)."""
    source_file: str
    expression: str

    @property
    def expressions(self) -> tuple[str, ...]:
        return tuple(self.expression.split("\n"))


@dataclass(frozen=True)
class CompileRecord:
    """How building one module went: milliseconds (compiling, or loading from CuPy's disk cache or
    the install-time cubins: `prebuilt`), and the one-line error when it failed."""
    ref: KernelRef
    ms: float
    error: str | None = None
    prebuilt: bool = False


class Loaded(NamedTuple):
    """What a build function returns for a module it loaded from the install-time cubins."""
    value: object


def build_module(ref: KernelRef, device_id: int | None = None):
    """Load the module of `ref` from the install-time cubins (kernels/cubins.py; wrapped in
    `Loaded`), else compile it (or load it from CuPy's disk cache); its kernel, or for a module of
    several expressions {expression: kernel}. On a worker thread, `device_id` is the caller's
    device, made current first (it also makes that device's context current, which loading a
    module needs)."""
    import cupy

    if device_id is not None:
        cupy.cuda.Device(device_id).use()
    exprs = ref.expressions
    functions = cubins.functions(ref.source_file, exprs, module_options(exprs))   # install-time cubins
    if functions is not None:
        return Loaded(functions[ref.expression] if len(exprs) == 1 else functions)
    module = cupy.RawModule(code=module_source(ref.source_file), options=runtime_options(exprs),
                            name_expressions=list(exprs), backend="nvrtc")
    functions = {e: module.get_function(e) for e in exprs}   # RawModule compiles on first use
    return functions[ref.expression] if len(exprs) == 1 else functions


class ModuleMemo:
    """The modules built in this process: one future per instantiation, so a module is built once
    even when several threads ask for it at the same time, and a failed build is remembered (a
    kernel that does not compile fails again at once, with the same error)."""

    def __init__(self, build: Callable = build_module):
        self.build = build
        self._futures: dict[KernelRef, Future] = {}
        self._lock = threading.Lock()
        self.log: list[CompileRecord] = []
        self.total_ms = 0.0

    def _claim(self, ref: KernelRef) -> tuple[Future, bool]:
        with self._lock:
            fut = self._futures.get(ref)
            if fut is not None:
                return fut, False
            fut = self._futures[ref] = Future()
            return fut, True

    def _build(self, ref: KernelRef, fut: Future, device_id: int | None) -> CompileRecord:
        t0 = time.perf_counter()
        try:
            fn = self.build(ref, device_id)
        except BaseException as exc:   # settle the future whatever happens: others wait on it
            record = CompileRecord(ref, (time.perf_counter() - t0) * 1e3, one_line(exc, 300))
            fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            loaded = isinstance(fn, Loaded)
            record = CompileRecord(ref, (time.perf_counter() - t0) * 1e3, prebuilt=loaded)
            fut.set_result(fn.value if loaded else fn)
        with self._lock:
            self.log.append(record)
            self.total_ms += record.ms
        return record

    def get(self, ref: KernelRef):
        """The kernel of `ref`, built on this thread if no one has built it yet."""
        fut, mine = self._claim(ref)
        if mine:
            self._build(ref, fut, None)
        return fut.result()

    def compile(self, refs: Iterable[KernelRef], workers: int | None = None,
                on_done: Callable[[CompileRecord], None] | None = None) -> dict[KernelRef, CompileRecord]:
        """Build every module of `refs` not built yet, on up to `workers` threads; {ref: record},
        in the order of `refs`. A module built before (or by another thread) records 0 ms: this
        call did not pay for it. `on_done(record)` is called as each build this call made ends."""
        refs = list(dict.fromkeys(refs))
        claimed = [(ref, fut) for ref in refs for fut, mine in [self._claim(ref)] if mine]
        records: dict[KernelRef, CompileRecord] = {}

        def finished(record: CompileRecord) -> None:
            records[record.ref] = record
            if on_done:
                on_done(record)

        if claimed:
            device_id = _current_device()
            threads = min(workers or default_workers(), len(claimed))
            if threads <= 1:
                for ref, fut in claimed:
                    finished(self._build(ref, fut, device_id))
            else:
                with ThreadPoolExecutor(threads) as pool:
                    jobs = [pool.submit(self._build, ref, fut, device_id) for ref, fut in claimed]
                    for job in as_completed(jobs):
                        finished(job.result())
        for ref in refs:
            if ref not in records:   # built earlier or elsewhere: wait for it, no cost to this call
                exc = self._futures[ref].exception()
                records[ref] = CompileRecord(ref, 0.0, one_line(exc, 300) if exc else None)
        return {ref: records[ref] for ref in refs}


def _current_device() -> int | None:
    """The calling thread's CUDA device (worker threads make it theirs), or None where CuPy or a
    device is not usable (the build then fails with the reason, or needs no device)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDevice())
    except Exception:
        return None


_memo = ModuleMemo()


def get_function(filename: str, name_expression: str):
    """The compiled kernel of one instantiation (its module built on first use)."""
    return _memo.get(KernelRef(filename, name_expression))


def get_module_functions(ref: KernelRef) -> dict:
    """{expression: kernel} of a module of one or several expressions (built on first use)."""
    built = _memo.get(ref)
    return built if isinstance(built, dict) else {ref.expression: built}


def compile_kernels(refs: Iterable[KernelRef], workers: int | None = None,
                    on_done: Callable[[CompileRecord], None] | None = None) -> dict[KernelRef, CompileRecord]:
    """Build the modules of `refs` in parallel (into this process's memo and CuPy's disk cache)."""
    return _memo.compile(refs, workers, on_done)


def compile_ms_total() -> float:
    """Milliseconds this process has spent building modules so far (a clock for callers that
    want to know how much of a step was compilation)."""
    return _memo.total_ms


def compiled_log() -> list[CompileRecord]:
    return list(_memo.log)


def module_counts(since: int = 0) -> dict[str, int]:
    """Modules this process built after the first `since` of its log: how many were loaded from
    the install-time cubins and how many were compiled (or loaded from CuPy's disk cache)."""
    built = [r for r in _memo.log[since:] if not r.error]
    loaded = sum(r.prebuilt for r in built)
    return {"modules_prebuilt": loaded, "modules_compiled": len(built) - loaded}


# ---------------------------------------------------------------- which instantiations

def schedule_kernels(schedule, dtype: str = "float", index: str = "int") -> tuple[KernelRef, ...]:
    """The instantiations a plan of `schedule` launches itself: every expression its family entry
    lists (`Family.kernels`: its name expression, or more for a schedule with a second kernel).
    Sub-steps run through other schedules are theirs."""
    from .schedule import family_of

    return tuple(KernelRef(schedule.source_file, e)
                 for e in family_of(schedule.family).kernels(schedule, dtype, index))


def module_sets(ops=None, dtype: str = "float", index: str = "int") -> dict[str, tuple[str, ...]]:
    """kernel file -> every name expression of it that the plans of `ops` (None: every op) may
    launch in `dtype` (a dtype name or its C++ type): the kernels of the registry's schedules of
    the file (`schedule_kernels`; schedules whose vector is too wide for `dtype` never run in it)."""
    from .schedule import family_of, known_ops, registry

    chosen = list(known_ops() if ops is None else ops)
    for op in list(chosen):   # ops whose plans run other ops' schedules too (Family.substeps)
        runs = dict.fromkeys(dep for s in registry(op) for dep in family_of(s.family).substeps)
        chosen += [dep for dep in runs if dep not in chosen]
    sets: dict[str, set[str]] = {}
    for op in chosen:
        for s in registry(op):   # unknown op: AutosageError
            exprs = sets.setdefault(s.source_file, set())
            if vector_bytes_fit(s.vec, dtype) is None:
                exprs.update(ref.expression for ref in schedule_kernels(s, dtype, index))
    return {filename: tuple(sorted(exprs)) for filename, exprs in sets.items()}


def instantiations(ops=None, dtype: str = "float", index: str = "int") -> list[KernelRef]:
    """Every instantiation the plans of `ops` may launch, one module each."""
    return [KernelRef(f, e) for f, exprs in module_sets(ops, dtype, index).items() for e in exprs]


def precompile(ops=None, workers: int | None = None, dtype: str = "float32",
               extra: Iterable[KernelRef] = ()) -> dict[str, float]:
    """Build every module the plans of `ops` (None: every op) may launch in `dtype`, and the modules
    of `extra` (the helper kernels' groups: kernels/util.py), in parallel, so that
    timing code that calls it first does not charge compilation to what it times. Returns kernel
    file -> seconds spent on its modules (about 0 for modules built before in this process).
    Raises RuntimeError naming the first failure if any module fails (the failure is remembered:
    the plans that need that kernel fail when prepared)."""
    records = compile_kernels(list(extra) + instantiations(ops, dtype), workers)
    seconds: dict[str, float] = {}
    for record in records.values():
        seconds[record.ref.source_file] = seconds.get(record.ref.source_file, 0.0) + record.ms / 1e3
    failed = [r for r in records.values() if r.error]
    if failed:
        first = failed[0]
        raise RuntimeError(f"{len(failed)} of {len(records)} kernels failed to compile; first "
                           f"{first.ref.source_file} {first.ref.expression}: {first.error}")
    return seconds


# ---------------------------------------------------------------- nvcc check (no GPU needed)

@dataclass(frozen=True)
class KernelReport:
    name_expression: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_frame: int


def _nvcc(filename: str, name_expressions: list[str], arch: str, output: str, *flags: str):
    """Run nvcc on `filename` with every name expression instantiated (by taking its address, which
    is what NVRTC's name expressions do) and the module's runtime options; returns (stderr, the
    text of the `output` file: "cubin" or "ptx"). Raises RuntimeError with the compiler output on
    any error."""
    source = kernel_source(filename)
    inst = prebuild.instantiations(name_expressions)
    with tempfile.TemporaryDirectory() as tmp:
        cu, out = Path(tmp) / filename, Path(tmp) / f"out.{output}"
        cu.write_text(source + "\n// instantiations (name expressions)\n" + inst + "\n")
        cmd = ["nvcc", f"-arch={arch}", f"-{output}", *flags, *runtime_options(name_expressions),
               "-o", str(out), str(cu)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed on {filename}:\n{proc.stderr}")
        return proc.stderr, (out.read_text() if output == "ptx" else "")


def nvcc_check(filename: str, name_expressions: list[str], arch: str = ARCH) -> list[KernelReport]:
    """Compile `filename` with nvcc for `arch`, instantiating every name expression, and return
    ptxas' per-kernel report. Raises RuntimeError with the compiler output on any error."""
    stderr, _ = _nvcc(filename, name_expressions, arch, "cubin", "-Xptxas", "-v")
    return [KernelReport(mangled, *report) for mangled, report in prebuild.parse_ptxas(stderr).items()]


def nvcc_ptx(filename: str, name_expressions: list[str], arch: str = ARCH) -> str:
    """The PTX nvcc makes of `filename` with every name expression instantiated (one .entry each)."""
    return _nvcc(filename, name_expressions, arch, "ptx")[1]
