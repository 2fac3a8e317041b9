"""GPU memory this process may still allocate: what the driver reports free plus what CuPy's pool
holds unused (it hands that back to new arrays before asking the driver)."""
from __future__ import annotations


def device_free_bytes() -> int:
    import cupy

    free, _total = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    return int(free) + int(pool.free_bytes())
