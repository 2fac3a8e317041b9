"""Kernel launches with their arguments packed once, for the torch path's per-call floor.

CuPy's `kernel(grid, block, args)` converts every argument on every call (a NumPy scalar to its
bytes, an array to its pointer): about 16 us of host time for an SpMM launch of a dozen arguments
on the H200's host, more than the kernel itself on a small graph. A `PackedLaunch` converts them
once into 8-byte slots (every argument the native kernels take is a pointer or a scalar of at most
8 bytes) and an array of pointers to the slots, cuLaunchKernel's `kernelParams`; a call writes the
per-call operands' pointers (the `Slot`s: B, out, per-call values, an epilogue's bias) into their
slots, and an epilogue's scale and alpha as their bits, and launches through the driver. The
driver copies the parameters when the launch is made (a captured launch too), so the slots are
free for the next call as soon as `launch` returns.

The caller vouches for the operands (the torch path's checks: type, contiguity, 16-byte alignment,
shape): a packed launch checks nothing, which is what makes it cheap.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np


_LOCK = threading.Lock()


@dataclass(frozen=True)
class Slot:
    """A per-call argument of at most 8 bytes, by name: a pointer ("B", "out", "values", an
    epilogue's "bias") or a scalar's bits (an epilogue's "scale" and "alpha": `float_bits`)."""
    name: str


def float_bits(value: float) -> int:
    """The slot value of a float32 kernel argument (its 4 bytes, little-endian: what the device
    reads at the slot's address)."""
    return int.from_bytes(np.float32(value).tobytes(), "little")


class PackedLaunch:
    """One kernel launch: `launch(stream, pointers)` with `pointers` mapping each Slot's name to
    a device address. `args` may hold CuPy arrays (their pointers, fixed: the launch keeps them
    alive), NumPy scalars (their bytes) and Slots; anything else raises TypeError (such a launch
    is not packed)."""

    def __init__(self, kernel, grid: tuple, block: tuple, args: tuple):
        self.function = getattr(kernel, "kernel", kernel)   # a RawKernel's Function on this device
        self.grid, self.block = tuple(int(v) for v in grid), tuple(int(v) for v in block)
        self._keep = args
        self._slots = (ctypes.c_uint64 * max(1, len(args)))()
        base = ctypes.addressof(self._slots)
        self._params = (ctypes.c_void_p * max(1, len(args)))(*(base + 8 * i for i in range(len(args))))
        self.per_call: list[tuple[int, str]] = []
        for i, arg in enumerate(args):
            if isinstance(arg, Slot):
                self.per_call.append((i, arg.name))
            else:
                self._slots[i] = _bits(arg)

    def launch(self, stream: int, pointers: dict) -> None:
        from cupy_backends.cuda.api import driver

        with _LOCK:   # the slots are shared: one launch writes and launches at a time
            for i, name in self.per_call:
                self._slots[i] = pointers[name]
            driver.launchKernel(self.function.ptr, *self.grid, *self.block, 0, stream,
                                ctypes.addressof(self._params), 0)


def _bits(arg) -> int:
    """The 8-byte slot value of a fixed argument (little-endian, as the device reads it)."""
    if isinstance(arg, np.generic):
        raw = arg.tobytes()
        if len(raw) > 8:
            raise TypeError(f"a {arg.dtype} argument does not fit an 8-byte slot")
        return int.from_bytes(raw, "little")
    data = getattr(arg, "data", None)
    ptr = getattr(data, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    raise TypeError(f"cannot pack a kernel argument of type {type(arg).__name__}")


def pack_all(launches) -> list[PackedLaunch] | None:
    """PackedLaunches of (kernel, grid, block, args) tuples, or None when one cannot be packed
    (the plan keeps its CuPy launch then)."""
    try:
        return [PackedLaunch(*launch) for launch in launches]
    except TypeError:
        return None
