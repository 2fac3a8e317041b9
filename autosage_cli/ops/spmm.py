"""The spmm op spec."""
from __future__ import annotations

from .spec import OpSpec

SPEC = OpSpec(name="spmm", dtypes=("float32",))
