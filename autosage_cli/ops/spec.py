"""The contract of one op: everything autosage knows about an operation, in one object.

Each op module (`spmm`, `sddmm`, `attention`) defines one `OpSpec` named `SPEC`; the registry
(`autosage_cli.ops`) lists them. Layers above (scheduler, api, bench, commands) ask the spec
instead of testing the op's name.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes


@dataclass(frozen=True)
class OpSpec:
    name: str
    # The dtypes this op accepts, first the default. Only these are instantiated and tuned; asking
    # for another is a one-line error naming them.
    dtypes: tuple[str, ...]

    def require_dtype(self, dtype: str) -> str:
        return dtypes.require(dtype, self.dtypes, self.name)
