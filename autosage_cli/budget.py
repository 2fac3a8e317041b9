"""Memory budgets, checked before anything large is allocated.

Every path that builds a graph or launches work first estimates the bytes it will need, from what is
known before allocating: a file's header (rows, cols, entries) or size, a generator's parameters, a
benchmark case (op, K, heads, dtype). `require_host` / `require_device` compare the estimate with the
memory this process may still use and refuse in one line naming both numbers.

Host memory available is the smallest of: MemAvailable (/proc/meminfo), the cgroup's limit less its
usage (containers), the process's RLIMIT_AS / RLIMIT_DATA less what it already maps (`ulimit -v`),
and AUTOSAGE_MEMORY_LIMIT (bytes, or with a K/M/G/T suffix) when set. Device memory is what the
caller measured on the GPU (backends.memory.device_free_bytes).

The per-row and per-nonzero costs below are measured peaks of loading, canonicalising,
fingerprinting and computing features (inspect, the first steps of tune and bench) with margin:
63 bytes per row for a graph that is nearly all empty rows and 40 bytes per nonzero for one that is
nearly all nonzeros, measured with NumPy 2.4 / SciPy 1.17 on the development machine.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from . import dtypes
from .errors import AutosageError, BudgetError

LIMIT_ENV = "AUTOSAGE_MEMORY_LIMIT"
HOST_BYTES_PER_ROW = 72
HOST_BYTES_PER_NNZ = 48
# Outputs a benchmark case holds at once: every vendor algorithm's (kept to cross-check them), the
# reference, the probe's and autosage's own.
OUTPUTS_HELD = 6
_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; plain numbers, binary units."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def parse_bytes(text: str, what: str = LIMIT_ENV) -> int:
    """'512M', '2G', '1.5g', '1000000' -> bytes (binary suffixes)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
    if not match:
        raise AutosageError(f"{what} must be a number of bytes such as 512M or 2G, got {text!r}")
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value <= 0:
        raise AutosageError(f"{what} must be positive, got {text!r}")
    return int(value)


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None   # "max" (no limit) is not a number


def _meminfo(field: str, path: str = "/proc/meminfo") -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == field:
                return int(rest.split()[0]) * 1024        # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_headroom() -> int | None:
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:   # v1 "no limit" is ~2**63
            return max(0, limit - usage)
    return None


def _rlimit_headroom() -> list[tuple[int, str]]:
    try:
        import resource
    except ImportError:      # not on a POSIX system
        return []
    found = []
    for name, status_field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        soft, _hard = resource.getrlimit(getattr(resource, name))
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        used = _meminfo(status_field, "/proc/self/status") or 0
        found.append((max(0, soft - used), f"{name} limit less what the process maps"))
    return found


def host_available() -> tuple[int | None, str]:
    """(bytes this process may still allocate, where that number comes from); (None, reason) when
    nothing can be measured (not Linux, no limit set)."""
    candidates: list[tuple[int, str]] = []
    available = _meminfo("MemAvailable")
    if available is not None:
        candidates.append((available, "MemAvailable"))
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        candidates.append((cgroup, "cgroup memory limit less usage"))
    candidates += _rlimit_headroom()
    override = os.environ.get(LIMIT_ENV)
    if override:
        candidates.append((parse_bytes(override), LIMIT_ENV))
    if not candidates:
        return None, "not measurable here"
    return min(candidates)


def require_host(needed: float, what: str) -> None:
    """BudgetError unless `needed` bytes of host memory are available to this process."""
    available, source = host_available()
    if available is not None and needed > available:
        raise BudgetError(f"{what} needs about {format_bytes(needed)} of host memory; "
                          f"{format_bytes(available)} available ({source})")


def require_device(needed: float, free: int, what: str) -> None:
    """BudgetError unless `needed` bytes fit in the `free` bytes the GPU reported."""
    if needed > free:
        raise BudgetError(f"{what} needs about {format_bytes(needed)} of GPU memory; "
                          f"{format_bytes(free)} free on the device")


# ---------------------------------------------------------------- estimates

def index_bytes(n: int, nnz: int) -> int:
    return 4 if max(n, nnz) < 2**31 - 1 else 8


def graph_bytes(n_rows: int, n_cols: int, nnz: int) -> int:
    """The canonical CSR itself: indptr, indices and float32 values."""
    idx = index_bytes(max(n_rows, n_cols), nnz)
    return (n_rows + 1) * idx + nnz * (idx + 4)


def graph_host_bytes(n_rows: int, n_cols: int, nnz: int) -> int:
    """Peak host bytes to build a graph of this size and compute its fingerprint and features."""
    return HOST_BYTES_PER_ROW * (n_rows + 1) + 8 * n_cols + HOST_BYTES_PER_NNZ * nnz


def case_device_bytes(n_rows: int, n_cols: int, nnz: int, input_elements: int, output_elements: int,
                      per_edge_elements: int = 0, dtype: str = "float32") -> int:
    """GPU bytes one benchmark or tuning case holds at its peak: the graph, the dense inputs, the
    outputs it keeps (OUTPUTS_HELD), the values held per edge between stages (attention's scores).
    The op's spec counts the elements (`ops.device_bytes`)."""
    f = dtypes.itemsize(dtype)
    graph = graph_bytes(n_rows, n_cols, nnz)
    inputs, output, per_edge = input_elements * f, output_elements * f, per_edge_elements * f
    # The vendor libraries' work buffers (cuSPARSE, the gather-dot SDDMM) and the sample a probe runs
    # on stay below a second copy of the graph and of the inputs.
    return 2 * graph + 2 * inputs + OUTPUTS_HELD * output + per_edge
