"""Capability check, decided once (PyG `typing.py` style).

Only kernels/ and backends/ import CuPy; everything else asks here whether a GPU is usable, so the
package imports and tests on machines without a GPU (CI).
"""
from __future__ import annotations

import functools

from .errors import NoGPUError


@functools.lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """(usable, reason). Never raises."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"no CUDA device visible ({type(exc).__name__})"
    if count < 1:
        return False, "no CUDA device visible"
    return True, "ok"


def gpu_available() -> bool:
    return gpu_status()[0]


def require_gpu(what: str = "this command", hint: str = "") -> None:
    """NoGPUError naming `what` and why no GPU is usable (then `hint`, e.g. an option that works
    without one)."""
    ok, reason = gpu_status()
    if not ok:
        raise NoGPUError(f"{what} needs a CUDA GPU: {reason}" + (f"; {hint}" if hint else ""))
