"""A kernel launch through the driver, its arguments in 8-byte slots: the torch path's per-call
floor. CuPy's `kernel(grid, block, args)` converts every argument on every call (about 16 us of
host time for a dozen arguments on the H200's host), and a CuPy array per operand costs a view of
its own; here every argument the helper and native kernels take is a pointer or a scalar of at
most 8 bytes, so a call fills one slot per argument and hands the driver their addresses
(`kernelParams`). The driver copies the parameters when the launch is made (a captured launch
too), so the slots are free as soon as `launch` returns.

The caller vouches for its arguments (types, contiguity, alignment, shapes): nothing is checked.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

_MASKS = {np.int64: (1 << 64) - 1, np.uint64: (1 << 64) - 1, np.int32: (1 << 32) - 1,
          np.uint32: (1 << 32) - 1, np.int16: (1 << 16) - 1, np.uint16: (1 << 16) - 1,
          np.int8: (1 << 8) - 1, np.uint8: (1 << 8) - 1}   # an integer scalar's two's-complement bytes


def slot_value(arg, ints_are_addresses: bool = False) -> int:
    """The 8-byte slot of one argument (little-endian, as the device reads it): a NumPy scalar its
    bytes, a CuPy array its pointer, and with `ints_are_addresses` an int a device address (0:
    null); otherwise an int is refused (TypeError), as its C type is not known. The common types
    by their type alone (a dict lookup, no bytes object): this runs for every argument of every
    launch of the torch path."""
    kind = type(arg)
    if kind is int and ints_are_addresses:
        if not 0 <= arg < 1 << 64:
            raise TypeError(f"{arg} is not a device address")
        return arg
    mask = _MASKS.get(kind)
    if mask is not None:
        return int(arg) & mask
    if kind is np.float32:
        return int(arg.view(np.uint32))
    if isinstance(arg, np.generic):
        raw = arg.tobytes()
        if len(raw) > 8:
            raise TypeError(f"a {arg.dtype} argument does not fit an 8-byte slot")
        return int.from_bytes(raw, "little")
    data = getattr(arg, "data", None)
    ptr = getattr(data, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    raise TypeError(f"cannot pack a kernel argument of type {kind.__name__}")


def parameters(values) -> tuple:
    """(slots, kernelParams) of slot values: the slots and an array of their addresses, which
    must stay alive until the launch is made."""
    n = max(1, len(values))
    slots = (ctypes.c_uint64 * n)(*values)
    base = ctypes.addressof(slots)
    return slots, (ctypes.c_void_p * n)(*(base + 8 * i for i in range(len(values))))


def function_pointer(kernel) -> int:
    """The CUfunction of a CuPy RawKernel (its Function on the current device) or Function."""
    return getattr(kernel, "kernel", kernel).ptr


_driver = None
_INVALID_CONTEXT = 201    # CUDA_ERROR_INVALID_CONTEXT


def launch(function: int, grid: tuple, block: tuple, stream: int, params) -> None:
    """cuLaunchKernel of `function` with `params` (a kernelParams array) on `stream`."""
    global _driver
    if _driver is None:
        from cupy_backends.cuda.api import driver as _driver
    try:
        _driver.launchKernel(function, *grid, *block, 0, stream, ctypes.addressof(params), 0)
    except _driver.CUDADriverError as exc:
        # A thread whose first CUDA call this launch is has no current context: the runtime makes
        # the primary context current lazily, on a thread's first runtime call, and the driver
        # never does. Autograd runs a CUDA backward on a thread of its own, whose first kernel may
        # be ours (a loss's sum has a backward without kernels). cudaSetDevice of the thread's
        # device (the one the caller checked the stream against) makes its context current.
        if getattr(exc, "status", None) != _INVALID_CONTEXT:
            raise
        from cupy.cuda import runtime

        runtime.setDevice(runtime.getDevice())
        _driver.launchKernel(function, *grid, *block, 0, stream, ctypes.addressof(params), 0)


# One parameter block per argument count, reused by every launch_now: the driver has copied the
# arguments when cuLaunchKernel returns, so the next launch may overwrite them (the lock keeps
# two threads, a forward's and autograd's device thread, from writing one block at once).
_SCRATCH: dict = {}
_SCRATCH_LOCK = threading.Lock()


def launch_now(kernel, grid: tuple, block: tuple, stream: int, args) -> None:
    """Launch `kernel` (a CuPy kernel, or its CUfunction as an int) on `stream` with `args`:
    device addresses (ints), NumPy scalars, CuPy arrays."""
    values = [slot_value(a, ints_are_addresses=True) for a in args]
    function = kernel if type(kernel) is int else function_pointer(kernel)
    with _SCRATCH_LOCK:
        block_of = _SCRATCH.get(len(values))
        if block_of is None:
            block_of = _SCRATCH[len(values)] = parameters([0] * len(values))
        slots, params = block_of
        if values:
            slots[:] = values
        launch(function, grid, block, stream, params)
