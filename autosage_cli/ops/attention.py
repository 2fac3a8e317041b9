"""The attention op spec."""
from __future__ import annotations

from .spec import OpSpec

SPEC = OpSpec(name="attention", dtypes=("float32",))
