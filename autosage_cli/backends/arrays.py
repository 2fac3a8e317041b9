"""The array module for whole-array graph work that can run on the device (graphs.label_propagation
takes one): CuPy where a GPU is usable, else None (the caller's NumPy)."""
from __future__ import annotations


def device_module():
    from ..capability import gpu_available

    if not gpu_available():
        return None
    import cupy
    return cupy
