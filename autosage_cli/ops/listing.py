"""The listing of install-time cubins, `cuda/prebuilt.json`: which modules autosage_cli/prebuild.py
builds with nvcc (it cannot import the registry inside pip's build environment, so it reads this
file). Every helper group; per kernel file and dtype every instantiation the registry's schedules
may launch; and per dtype the kernel variants of the ops the PyTorch layers run on another op's
schedules (PREBUILT_VARIANT_OPS), with the kernels their vendor plans launch after the vendor's
call, each variant a module of its own (its options differ). A CPU test
keeps the file current; refresh it with `python -m autosage_cli.ops.listing` after the schedule
space, a variant or a helper group changes.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import prebuild
from ..cuda_sources import CUDA_DIR
from ..dtypes import DTYPES
from ..kernels import util
from ..kernels.compile import module_options, module_sets
from . import get, instantiations

# The variant ops a layer's first step would otherwise compile with NVRTC (0.4-0.8 s per dtype on
# the H200 for spmm-bias's fused bias, the GCN and SAGE layers' aggregation; the GAT layer's
# additive score): GCNConv / SAGEConv with a bias, GATConv. Other fused epilogues compile on first
# use. Only 32-bit indices: a graph needs 64-bit ones past 2^31 edges, where the compile is a small
# part of a tune.
PREBUILT_VARIANT_OPS = ("spmm-bias", "attention-additive")
VARIANT_INDEX = "int"


def listing() -> dict:
    """{"modules": [{name, file, expressions, options}, ...]}: what prebuild builds."""
    modules = [_module(f"util/{name}", ref.source_file, ref.expressions) for name, ref in util.MODULES.items()]
    for dtype, info in DTYPES.items():
        per_file = _by_file((filename, e) for index in util.INDEX
                            for filename, exprs in module_sets(None, info.c_type, index).items() for e in exprs)
        modules += [_module(f"{Path(f).stem}/{dtype}", f, exprs) for f, exprs in per_file.items()]
    for op in PREBUILT_VARIANT_OPS:
        for dtype in DTYPES:
            refs = [*instantiations([op], dtype, VARIANT_INDEX), *get(op).vendor_kernels(dtype)]
            per_file = _by_file((r.source_file, r.expression) for r in refs)
            modules += [_module(f"{Path(f).stem}/{dtype}/{op}", f, sorted(exprs)) for f, exprs in per_file.items()]
    return {"modules": modules}


def _by_file(pairs) -> dict[str, list[str]]:
    """(file, expression) pairs -> file: its expressions, each once, in first-seen order."""
    grouped: dict[str, dict] = {}
    for filename, expression in pairs:
        grouped.setdefault(filename, {})[expression] = None
    return {filename: list(exprs) for filename, exprs in grouped.items()}


def _module(name: str, filename: str, expressions) -> dict:
    names = list(expressions)
    return {"name": name, "file": filename, "expressions": names, "options": module_options(names)}


def listing_text() -> str:
    return json.dumps(listing(), indent=1) + "\n"


def write_listing(cuda_dir: Path = CUDA_DIR) -> Path:
    path = Path(cuda_dir) / prebuild.LISTING
    path.write_text(listing_text())
    return path


if __name__ == "__main__":
    print(write_listing())
