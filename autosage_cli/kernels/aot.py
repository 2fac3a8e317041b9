"""Compiling ahead of time into CuPy's kernel cache (for images, containers and clusters), with or
without a GPU, and what that cache holds.

Modules land in CuPy's on-disk cache under the key a later `RawModule` lookup computes (source,
options, name expressions, target architecture, NVRTC and CuPy versions), so a process that needs a
kernel later loads it instead of compiling it.

With a visible GPU of the target architecture, the modules are built exactly as tuning builds them
(kernels.compile). Without one (or for another architecture), NVRTC still compiles: only the two
steps of CuPy's compile-and-cache path that ask the device are replaced, for the duration, by the
same steps with the architecture given (`_device_free`): which `-arch` to pass NVRTC, and loading the
binary into a context (skipped: nothing will launch it here). The cache key is computed by CuPy's own
code from the same arguments, so the entries are the ones a GPU process looks for.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterable

from ..errors import AutosageError, one_line
from . import compile as kcompile

# The target when no GPU is visible: sm_90 (H100/H200), the architecture the kernels are tuned for.
DEFAULT_ARCH = "90"
CACHE_SUFFIXES = (".cubin", ".ltoir", ".hsaco")
_ARCH = re.compile(r"^(?:sm_|compute_)?(\d+)(?:\.(\d))?([af]?)$")


def kernel_cache_dir() -> Path:
    """Where CuPy keeps compiled kernels: CUPY_CACHE_DIR, else ~/.cupy/kernel_cache."""
    return Path(os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache"))


@dataclass(frozen=True)
class CacheStats:
    path: str
    kernels: int        # compiled modules on disk (every CuPy user's, not only autosage's)
    bytes: int

    def to_dict(self) -> dict:
        return {"path": self.path, "kernels": self.kernels, "bytes": self.bytes}


def cache_stats(path: Path | None = None) -> CacheStats:
    """How many compiled modules CuPy's kernel cache holds, and their size (0 when it is missing)."""
    path = kernel_cache_dir() if path is None else Path(path)
    count = size = 0
    if path.is_dir():
        for entry in os.scandir(path):
            if entry.is_file() and entry.name.endswith(CACHE_SUFFIXES):
                count += 1
                size += entry.stat().st_size
    return CacheStats(str(path), count, size)


def normalize_arch(arch: str) -> str:
    """"90", "sm_90", "9.0" or "compute_90" -> "90" (CuPy's spelling); AutosageError otherwise."""
    m = _ARCH.match(str(arch).strip())
    if not m:
        raise AutosageError(f"--arch must look like 90, sm_90 or 9.0, got {arch!r}")
    return m.group(1) + (m.group(2) or "") + m.group(3)


def device_arch() -> str | None:
    """The architecture CuPy compiles for on the current device, or None without a usable GPU."""
    from ..capability import gpu_status

    if not gpu_status()[0]:
        return None
    from cupy.cuda import compiler

    return str(compiler._get_arch())


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor); AutosageError when NVRTC cannot be loaded."""
    try:
        import cupy  # noqa: F401  (cupy.cuda.compiler must be imported through cupy)
        from cupy.cuda import compiler

        return tuple(compiler._get_nvrtc_version())
    except Exception as exc:
        raise AutosageError(f"NVRTC is not available, so kernels cannot be compiled here "
                            f"({one_line(exc, 200)})") from None


@contextlib.contextmanager
def _device_free():
    """CuPy's compile-and-cache path, with the two device-bound steps replaced (module docstring)."""
    import cupy  # noqa: F401
    from cupy.cuda import compiler, function

    choose_arch = getattr(compiler._get_arch_for_options_for_nvrtc, "__wrapped__", None)
    if choose_arch is None:
        raise AutosageError("this CuPy version cannot compile kernels without a GPU; run "
                            "`autosage compile` where one is visible")

    class Unloaded(function.Module):
        def load(self, cubin):   # written to the cache by CuPy already; nothing to load it into
            return None

    saved = compiler._get_arch_for_options_for_nvrtc, compiler.function
    compiler._get_arch_for_options_for_nvrtc = choose_arch
    compiler.function = SimpleNamespace(Module=Unloaded, LinkState=function.LinkState)
    try:
        yield
    finally:
        compiler._get_arch_for_options_for_nvrtc, compiler.function = saved


def _build_into_cache(ref: kcompile.KernelRef, arch: str) -> None:
    """What RawModule(code, options, name_expressions=[expr]) compiles, for `arch`, into the cache."""
    from cupy._core import core

    options = kcompile.runtime_options(ref.expressions)
    core.compile_with_cache(kcompile.module_source(ref.source_file), options, arch=arch,
                            prepend_cupy_headers=False, backend="nvrtc",
                            name_expressions=ref.expressions, jitify=False)


@dataclass
class AheadResult:
    records: dict            # KernelRef -> CompileRecord
    arch: str
    on_device: bool          # built (and loaded) on this machine's GPU, else device-free

    @property
    def failed(self) -> list:
        return [r for r in self.records.values() if r.error]


def compile_ahead(refs: Iterable[kcompile.KernelRef], arch: str | None = None, workers: int | None = None,
                  on_done: Callable[[kcompile.CompileRecord], None] | None = None) -> AheadResult:
    """Compile `refs` into CuPy's kernel cache for `arch` (default: the visible GPU's, else
    DEFAULT_ARCH) on `workers` threads. Raises AutosageError when NVRTC is missing."""
    nvrtc_version()
    on_gpu = device_arch()
    target = normalize_arch(arch) if arch else (on_gpu or DEFAULT_ARCH)
    if on_gpu is not None and target == on_gpu:
        return AheadResult(kcompile.compile_kernels(refs, workers, on_done), target, True)
    memo = kcompile.ModuleMemo(lambda ref, _device: _build_into_cache(ref, target))
    with _device_free():
        records = memo.compile(refs, workers, on_done)
    return AheadResult(records, target, False)
