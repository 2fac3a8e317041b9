"""Torch's current stream as CuPy sees it: the CUDA path (torch/cuda.py) runs CuPy work (plans
that are not packed launches, cuSPARSE, plan preparation) on torch's current stream of the
operands' device, so that torch's kernels and ours are ordered without a synchronisation."""
from __future__ import annotations

import torch

_streams: dict = {}


def _index(device: torch.device) -> int:
    """The device's ordinal (torch.device("cuda") has none: the current device's)."""
    return torch.cuda.current_device() if device.index is None else device.index


def _stream(device: torch.device):
    """A CuPy stream object for torch's current stream on `device`."""
    import cupy

    ptr = torch._C._cuda_getCurrentRawStream(_index(device))   # what current_stream() wraps, ~10x cheaper
    if ptr == 0:
        return cupy.cuda.Stream.null
    stream = _streams.get(ptr)
    if stream is None:
        stream = _streams[ptr] = _wrap_stream(ptr, _index(device))
    return stream


class _StreamHandle:
    """A raw stream handle as the CUDA stream protocol hands one over: (version 0, the handle)."""
    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def _wrap_stream(ptr: int, index: int):
    """A CuPy stream object for a stream CuPy does not own. CuPy 14 deprecates ExternalStream for
    Stream.from_external (the stream protocol), which takes the device that is current when it
    is called, and does not destroy the stream when the wrapper goes; CuPy 13 has only the first."""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is None:
        return cupy.cuda.ExternalStream(ptr, index)
    with cupy.cuda.Device(index):
        return from_external(_StreamHandle(ptr))


_devices: dict = {}


class _on_torch_stream:
    """`with _on_torch_stream(device):` CuPy work goes to torch's current stream on that device."""

    def __init__(self, device: torch.device):
        found = _devices.get(device.index)
        if found is None:
            import cupy

            found = _devices[device.index] = cupy.cuda.Device(device.index)
        self.device = found
        self.stream = _stream(device)

    def __enter__(self):
        self.device.__enter__()
        self.stream.__enter__()

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)
        return False


def release_pool() -> None:
    """Return the blocks CuPy's memory pool caches unused (plan buffers, tuning inputs) to the
    driver, where torch's allocator can have them."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
