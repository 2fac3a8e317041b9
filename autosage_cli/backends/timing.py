"""Timing and checking (the method is described in docs/MEASUREMENT.md).

`time_plan` records a CUDA event pair around each launch only, on CuPy's current stream: warm-up
first, then every repeat queued (an optional L2 flush outside the events before each), then one
synchronize. `cupyx.profiler.benchmark` is not used: it synchronizes every repeat and cannot flush
L2. With `max_ms` the number of repeats is cut (never below 3) so the whole measurement fits the
budget, judged from the warm-up time.

`rel_error` is ||out - ref|| / ||ref|| in float64 (NaN or Inf anywhere -> inf; ||ref|| = 0 -> the
absolute norm); `poison` fills an output with NaN so an unwritten element cannot pass a check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..dtypes import from_storage, of_storage

MIN_REPEATS = 3
_L2_FLUSH_FACTOR = 2          # the flush buffer is larger than this many L2 caches
_COPY_BYTES = 1 << 30         # bytes per buffer for the copy-bandwidth measurement


@dataclass(frozen=True)
class TimingStats:
    median_ms: float
    p20_ms: float
    p80_ms: float
    repeats: int

    @classmethod
    def from_samples(cls, samples_ms) -> "TimingStats":
        s = np.asarray(samples_ms, dtype=np.float64)
        if s.size == 0:
            raise ValueError("no timing samples")
        return cls(float(np.median(s)), float(np.percentile(s, 20)), float(np.percentile(s, 80)),
                   int(s.size))


def repeats_within_budget(per_call_ms: float, repeat: int, max_ms: float | None,
                          flush_ms: float = 0.0, minimum: int = MIN_REPEATS) -> int:
    """How many timed repeats fit in `max_ms` when one costs `per_call_ms` (+ `flush_ms` for an L2
    flush): at most `repeat`, at least min(minimum, repeat)."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    floor = min(minimum, repeat)
    if max_ms is None:
        return repeat
    cost = max(per_call_ms + flush_ms, 1e-6)
    fit = int(math.floor(max_ms / cost))
    return max(floor, min(repeat, fit))


def check_warmup(warmup: int, max_ms: float | None) -> None:
    """A batch needs a warm-up launch (the first launch pays module load and handle setup), unless
    the caller has just launched the same plan itself (warmup=0) and sets no time cap, which is
    judged from the warm-up's duration."""
    if warmup < 0 or (warmup == 0 and max_ms is not None):
        raise ValueError(f"warmup must be >= 1 (0 only right after a launch of the same plan and "
                         f"without max_ms), got {warmup}")


def l2_flush_bytes(l2_bytes: int) -> int:
    """Size of a buffer whose write evicts the whole L2: more than twice its size."""
    return _L2_FLUSH_FACTOR * int(l2_bytes) + (1 << 20)


def _l2_bytes() -> int:
    import cupy

    dev = cupy.cuda.Device()
    return int(cupy.cuda.runtime.getDeviceProperties(dev.id)["l2CacheSize"])


class _L2Flusher:
    def __init__(self):
        import cupy

        self.buffer = cupy.empty(l2_flush_bytes(_l2_bytes()) // 4, dtype=cupy.float32)
        self.step = 0

    def __call__(self) -> None:
        from ..kernels import util

        self.step += 1
        util.fill(self.buffer, self.step)  # a write of every line: the old contents leave L2


# A one-thread kernel (autosage_spin, kernels/util.py) keeps the GPU busy for a fixed time before
# each timed launch, so the host's enqueue of (start event, launch, end event) completes while the
# GPU is still spinning and the events measure GPU time only, not Python launch latency (nvbench's
# "blocking kernel" idea). Without it, first H200 run: a 13k-nonzero SpMM measured 0.0217 ms median
# with p20/p80 of 0.018/0.024 ms, dominated by the ~10 us CuPy launch path rather than by the kernel.
SPIN_NS = 50_000


class _Spinner:
    def __init__(self, ns: int = SPIN_NS):
        from ..kernels import util

        self.spin, self.ns = util.spin, ns

    def __call__(self) -> None:
        self.spin(self.ns)


def _event_pairs(n: int):
    import cupy

    return [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(n)]


def time_launch(launch, repeat: int = 20, warmup: int = 3, flush_l2: bool = False,
                max_ms: float | None = None) -> TimingStats:
    """Time `launch()` (a callable that only enqueues GPU work on the current stream)."""
    import cupy

    check_warmup(warmup, max_ms)
    stream = cupy.cuda.get_current_stream()
    flush = _L2Flusher() if flush_l2 else None
    spin = _Spinner()

    def timed(n: int) -> list[float]:
        """n launches, each after the flush (if any) and the spin, each between its own events."""
        pairs = _event_pairs(n)
        for start, end in pairs:
            if flush:
                flush()
            spin()
            start.record(stream)
            launch()
            end.record(stream)
        stream.synchronize()
        return [cupy.cuda.get_elapsed_time(s, e) for s, e in pairs]

    # The first warm-up launch carries one-time costs; judge the budget from the later ones.
    warm_ms = timed(warmup)
    per_call = float(np.median(warm_ms[1:] if len(warm_ms) > 1 else warm_ms)) if warm_ms else 0.0
    flush_ms = 0.0
    if flush:
        f0, f1 = cupy.cuda.Event(), cupy.cuda.Event()
        f0.record(stream)
        flush()
        f1.record(stream)
        f1.synchronize()
        flush_ms = cupy.cuda.get_elapsed_time(f0, f1)
    n = repeats_within_budget(per_call, repeat, max_ms, flush_ms + SPIN_NS / 1e6)
    return TimingStats.from_samples(timed(n))


def time_plan(plan, inputs, out, repeat: int = 20, warmup: int = 3, flush_l2: bool = False,
              max_ms: float | None = None) -> TimingStats:
    """CUDA-event time of `plan.run(inputs, out)`: median, p20, p80 over the repeats run."""
    return time_launch(lambda: plan.run(inputs, out), repeat=repeat, warmup=warmup,
                       flush_l2=flush_l2, max_ms=max_ms)


def copy_bandwidth_tbps(nbytes: int | None = None, repeat: int = 10) -> float:
    """Device-to-device copy bandwidth in TB/s, counting bytes read plus bytes written (the
    ceiling effective bandwidths are compared with). The buffers are at most 1 GiB each and at
    most a quarter of the free memory."""
    import cupy

    if nbytes is None:
        nbytes = min(_COPY_BYTES, cupy.cuda.runtime.memGetInfo()[0] // 4)
    n = max(1, int(nbytes) // 4)
    from ..kernels import util

    src = util.fill(cupy.empty(n, dtype=cupy.float32), 1.0)
    dst = cupy.empty_like(src)
    size = n * 4
    stream = cupy.cuda.get_current_stream()
    stats = time_launch(lambda: dst.data.copy_from_device_async(src.data, size, stream),
                        repeat=repeat, warmup=3)
    return 2 * size / (stats.median_ms * 1e-3) / 1e12


_ERROR_CHUNK = 1 << 24        # elements per float64 temporary when comparing


def _is_device_array(arr) -> bool:
    return type(arr).__module__.startswith("cupy")


def _squared_sums(xp, o, r, diff2, ref2):
    for s in range(0, o.size, _ERROR_CHUNK):
        oc = o[s:s + _ERROR_CHUNK].astype(xp.float64)
        rc = r[s:s + _ERROR_CHUNK].astype(xp.float64)
        # NaN or Inf anywhere makes a sum NaN or Inf (inf - inf = nan), so no separate scan.
        diff2 = diff2 + xp.sum((oc - rc) ** 2)
        ref2 = ref2 + xp.sum(rc * rc)
    return diff2, ref2


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 for host or device arrays (computed on the device when
    either is a CuPy array, in chunks, with one synchronization). NaN/Inf in either -> inf;
    ||ref|| = 0 -> the absolute error ||out - ref||. Arrays of a value type's bit patterns (bfloat16's
    uint16, dtypes.of_storage) are compared by value."""
    out = _values_of(out if hasattr(out, "shape") else np.asarray(out))
    ref = _values_of(ref if hasattr(ref, "shape") else np.asarray(ref))
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"shape mismatch: out {tuple(out.shape)} vs ref {tuple(ref.shape)}")
    if _is_device_array(out) or _is_device_array(ref):
        diff2, ref2 = _device_squared_sums(out, ref)
        if not (math.isfinite(diff2) and math.isfinite(ref2)):
            return math.inf
        return math.sqrt(diff2 / ref2) if ref2 > 0 else math.sqrt(diff2)
    xp = np
    o, r = xp.asarray(out).ravel(), xp.asarray(ref).ravel()
    diff2 = xp.zeros((), dtype=xp.float64)
    ref2 = xp.zeros((), dtype=xp.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf inputs are the point here
        diff2, ref2 = _squared_sums(xp, o, r, diff2, ref2)
    diff2, ref2 = float(diff2), float(ref2)
    if not (math.isfinite(diff2) and math.isfinite(ref2)):
        return math.inf
    return math.sqrt(diff2 / ref2) if ref2 > 0 else math.sqrt(diff2)


def _device_squared_sums(out, ref) -> tuple[float, float]:
    """(||out - ref||^2, ||ref||^2) on the device, by the helper module's one float64 reduction,
    reading each array in its own type (dtypes.of_storage); a host array is uploaded first."""
    import cupy

    from ..kernels import util

    o, r = (cupy.ascontiguousarray(cupy.asarray(a)).ravel() for a in (out, ref))
    try:
        return util.squared_sums(o, r)
    except (KeyError, TypeError):   # types the helper module has no reduction for: both in float64
        return util.squared_sums(*(_float64(x) for x in (o, r)))


def _bit_type(arr):
    """The value type whose bit patterns `arr` holds (bfloat16 for uint16 arrays), else None:
    the dtypes table's one reverse lookup decides, not this module."""
    t = of_storage(arr.dtype)
    return t if t is not None and t.bit_patterns else None


def _float64(x):
    """A device array's values in float64 (bit patterns of a value type widened exactly)."""
    import cupy

    from .value_arrays import to_float32

    t = _bit_type(x)
    return (to_float32(x, t.name) if t is not None else x).astype(cupy.float64)


def _values_of(arr):
    """The values of a host result array: bit patterns of a value type (bfloat16's uint16) widened
    exactly (device arrays are read in their own type by the helper module's reduction)."""
    t = _bit_type(arr)
    if t is None or _is_device_array(arr):
        return arr
    return from_storage(arr, t.name)


def poison(out):
    """Fill `out` (NumPy or CuPy, floating point, or the bit patterns of a value type) with NaN in
    place; returns it. Device arrays through the helper module's fill (no CuPy fill kernel)."""
    if _is_device_array(out) and out.flags.c_contiguous and of_storage(out.dtype) is not None:
        from ..kernels import util

        return util.fill(out, np.nan)
    t = _bit_type(out)
    out.fill(t.nan_bits if t is not None else np.nan)
    return out
