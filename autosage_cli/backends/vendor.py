"""Vendor entry points: the names the scheduler and benchmark compare against, and their plans.

  spmm       cusparse-alg1 | cusparse-alg2 | cusparse-alg3 | cusparse-default   (backends.cusparse)
  sddmm      cusparse-sddmm (nvmath-python or torch.sparse.sampled_addmm), else gather-dot
             (backends.sddmm_vendor; plan.provider says which implementation ran)
  attention  vendor-unfused-alg1|alg2|alg3|default (backends.attention_vendor)

"The vendor time" of an input is the best over `vendor_names(op)`, each measured in the same
process (docs/MEASUREMENT.md).
"""
from __future__ import annotations

from .. import dtypes
from ..errors import AutosageError
from . import attention_vendor
from .base import DeviceGraph, Plan
from .cusparse import SPMM_NAMES
from .sddmm_vendor import VENDOR_PROVIDERS as SDDMM_VENDORS, sddmm_vendor_names

OPS = ("spmm", "sddmm", "attention")
# The element types the vendor compositions here are written for (cuSPARSE value types and
# scalars, the CuPy softmax and gather-dot buffers).
VENDOR_DTYPES = ("float32",)


def vendor_names(op: str) -> list[str]:
    """The vendor entries of `op`, in a stable order. Imports no GPU library."""
    if op == "spmm":
        return list(SPMM_NAMES)
    if op == "sddmm":
        return sddmm_vendor_names()
    if op == "attention":
        return attention_vendor.vendor_names()
    raise AutosageError(f"unknown op {op!r}; choose one of {', '.join(OPS)}")


def vendor_op(name: str) -> str | None:
    """The op a vendor name belongs to, or None if it is not a vendor name."""
    if name in SPMM_NAMES:
        return "spmm"
    if name in SDDMM_VENDORS:
        return "sddmm"
    if name in vendor_names("attention"):
        return "attention"
    return None


def prepare_vendor(dgraph: DeviceGraph, name: str, k: int, heads: int = 1,
                   scale: float | None = None, dtype: str = dtypes.DEFAULT) -> Plan:
    """Prepare one vendor entry on a device graph for `dtype` operands (descriptors, buffers,
    checks), outside any timed region; plan.prepare_ms records how long it took."""
    op = vendor_op(name)
    if op is None:
        raise AutosageError(f"unknown vendor backend {name!r}")
    dtypes.require(dtype, VENDOR_DTYPES, name)
    if op == "spmm":
        if heads != 1:
            raise AutosageError("spmm has no heads")
        from .cusparse import prepare_spmm

        return prepare_spmm(dgraph, name, k)
    if op == "sddmm":
        if heads != 1:
            raise AutosageError("sddmm has no heads")
        from .sddmm_vendor import prepare_sddmm

        return prepare_sddmm(dgraph, name, k)
    return attention_vendor.prepare(dgraph, name, k, heads=heads, scale=scale)
