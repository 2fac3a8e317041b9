"""autosage: input-aware SpMM / SDDMM / CSR-attention for NVIDIA GPUs.

`spmm`, `sddmm` and `attention` (see autosage_cli.api) are loaded on first use, so importing the
package never imports CuPy and works on a machine without a GPU. `AutosageError` is what they raise
for bad input or an unusable environment (no GPU), with a one-line message; `require_gpu()` raises
it up front where no GPU is usable.
"""
from __future__ import annotations

from importlib import metadata as _metadata

from .errors import AutosageError   # standard library only: importing it costs nothing

try:
    __version__ = _metadata.version("autosage")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

_API = ("spmm", "sddmm", "attention")
__all__ = [*_API, "AutosageError", "require_gpu", "__version__"]


def require_gpu() -> None:
    """AutosageError, in one line naming why, unless a CUDA GPU is usable: call it before asking
    CuPy for device memory, which without a driver or a device fails in a CuPy traceback."""
    from .capability import require_gpu as check

    check("autosage_cli")


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))
