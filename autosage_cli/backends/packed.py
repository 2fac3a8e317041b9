"""Kernel launches with their arguments packed once, for the torch path's per-call floor.

A `PackedLaunch` converts a plan's launch arguments once into the 8-byte slots of kernels/launch.py
(every argument the native kernels take is a pointer or a scalar of at most 8 bytes); a call writes
the per-call operands' pointers (the `Slot`s: B, out, per-call values, an epilogue's bias) into
their slots, and an epilogue's scale and alpha as their bits, and launches through the driver.

The caller vouches for the operands (the torch path's checks: type, contiguity, 16-byte alignment,
shape): a packed launch checks nothing, which is what makes it cheap.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..kernels.launch import function_pointer, launch, parameters, slot_value


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
        self.function = function_pointer(kernel)
        self.grid, self.block = tuple(int(v) for v in grid), tuple(int(v) for v in block)
        self._keep = args
        self.per_call: list[tuple[int, str]] = [(i, a.name) for i, a in enumerate(args) if isinstance(a, Slot)]
        self._slots, self._params = parameters([0 if isinstance(a, Slot) else slot_value(a) for a in args])

    def launch(self, stream: int, pointers: dict) -> None:
        with _LOCK:   # the slots are shared: one launch writes and launches at a time
            for i, name in self.per_call:
                self._slots[i] = pointers[name]
            launch(self.function, self.grid, self.block, stream, self._params)


def pack_all(launches) -> list[PackedLaunch] | None:
    """PackedLaunches of (kernel, grid, block, args) tuples, or None when one cannot be packed
    (the plan keeps its CuPy launch then)."""
    try:
        return [PackedLaunch(*spec) for spec in launches]
    except TypeError:
        return None
