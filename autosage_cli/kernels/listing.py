"""The listing of install-time cubins, `cuda/prebuilt.json`: which modules autosage_cli/prebuild.py
builds with nvcc (it cannot import the registry inside pip's build environment, so it reads this
file). Every helper group, and per kernel file and dtype every instantiation the registry's
schedules may launch. A CPU test keeps the file current; refresh it with
`python -m autosage_cli.kernels.listing` after the schedule space or a helper group changes.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import prebuild
from ..cuda_sources import CUDA_DIR
from ..dtypes import DTYPES
from . import util
from .compile import module_options, module_sets


def listing() -> dict:
    """{"modules": [{name, file, expressions, options}, ...]}: what prebuild builds."""
    modules = [{"name": f"util/{name}", "file": ref.source_file, "expressions": list(ref.expressions),
                "options": module_options(ref.expressions)} for name, ref in util.MODULES.items()]
    for dtype, info in DTYPES.items():
        per_file: dict[str, dict] = {}
        for index in util.INDEX:
            for filename, exprs in module_sets(None, info.c_type, index).items():
                per_file.setdefault(filename, {}).update(dict.fromkeys(exprs))
        for filename, exprs in per_file.items():
            names = list(exprs)
            modules.append({"name": f"{Path(filename).stem}/{dtype}", "file": filename,
                            "expressions": names, "options": module_options(names)})
    return {"modules": modules}


def listing_text() -> str:
    return json.dumps(listing(), indent=1) + "\n"


def write_listing(cuda_dir: Path = CUDA_DIR) -> Path:
    path = Path(cuda_dir) / prebuild.LISTING
    path.write_text(listing_text())
    return path


if __name__ == "__main__":
    print(write_listing())
