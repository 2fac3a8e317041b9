"""Where a measurement or decision was made: device, software versions, commit, host, time.

Recorded in every result file (results.json, the run README) and in the decision cache key.
Everything here is guarded: on a machine without a GPU (or without CuPy) the device is None and the
CUDA versions are None — nothing raises. CuPy is imported only inside the functions, after the
capability check.
"""
from __future__ import annotations

import datetime as _dt
import platform
import os
import socket
import subprocess
from pathlib import Path

from .capability import gpu_status
from .cuda_sources import sources_hash

REPO_DIR = Path(__file__).resolve().parent.parent


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def device_info(device_id: int = 0) -> dict | None:
    """name, compute_capability ("9.0"), sms, memory_bytes, l2_bytes of one CUDA device; None when
    no device is usable."""
    if not gpu_status()[0]:
        return None
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        return {
            "name": _text(props["name"]),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "sms": int(props["multiProcessorCount"]),
            "memory_bytes": int(props["totalGlobalMem"]),
            "l2_bytes": int(props["l2CacheSize"]),
        }
    except Exception:  # a driver that vanished after the capability check: report no device
        return None


def _cuda_version(number: int) -> str:
    """CUDA encodes 13.2 as 13020."""
    return f"{number // 1000}.{(number % 1000) // 10}"


def _cusparse_version() -> str | None:
    try:
        import cupy
        from cupy_backends.cuda.libs import cusparse

        handle = cupy.cuda.device.get_cusparse_handle()
        return str(cusparse.getVersion(handle))
    except Exception:  # older CuPy without the binding, or no device
        return None


def software_info() -> dict:
    """Versions that change results: CUDA driver and runtime, CuPy, cuSPARSE, Python, NumPy, SciPy,
    and the hash of the cuda/ kernel sources. CUDA entries are None without a usable GPU."""
    import numpy

    info = {"driver": None, "cuda_runtime": None, "cupy": None, "cusparse": None,
            "python": platform.python_version(), "numpy": numpy.__version__, "scipy": _installed("scipy"),
            "cuda_sources": _sources_hash()}
    try:
        import cupy

        info["cupy"] = cupy.__version__
    except Exception:
        return info
    if gpu_status()[0]:
        try:
            info["driver"] = _cuda_version(cupy.cuda.runtime.driverGetVersion())
            info["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        except Exception:
            pass
        info["cusparse"] = _cusparse_version()
    return info


def _installed(package: str) -> str | None:
    """An installed package's version from its metadata, without importing it (importing SciPy
    takes about a second on a cold machine; every tune, even a cache hit, asks for its version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _sources_hash() -> str | None:
    try:
        return sources_hash()
    except Exception:  # a kernel tree that cannot be read must not break `autosage info`
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO_DIR, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit() -> str:
    """Short commit of the source tree, "-dirty" when tracked files changed; "unknown" outside git."""
    # The device machine gets a copy of the tree without .git: the session passes the commit in.
    if os.environ.get("AUTOSAGE_COMMIT"):
        return os.environ["AUTOSAGE_COMMIT"]
    commit = _git("rev-parse", "--short", "HEAD")
    if not commit:
        return "unknown"
    status = _git("status", "--porcelain", "--untracked-files=no")
    return f"{commit}-dirty" if status else commit


def now_iso() -> str:
    """The current UTC time to the second, ISO 8601: the stamp on runs, rows and cache entries."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def environment() -> dict:
    """Device (None without GPU) + software + commit + hostname + UTC timestamp."""
    ok, reason = gpu_status()
    return {
        "device": device_info(),
        "gpu_status": "ok" if ok else reason,
        "software": software_info(),
        "commit": git_commit(),
        "hostname": socket.gethostname(),
        "timestamp": now_iso(),
    }
