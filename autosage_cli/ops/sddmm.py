"""The sddmm op spec."""
from __future__ import annotations

from .spec import OpSpec

SPEC = OpSpec(name="sddmm", dtypes=("float32",))
