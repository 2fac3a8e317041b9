"""ptxas' per-kernel reports (registers, spills) of a kernel file's instantiations, for the no-spill
checks: those the install-time build recorded for the cubins it made (the same source text and
options, compiled by nvcc with ptxas -v: autosage_cli/prebuild.py), where that build is current,
and nvcc's own for every other instantiation. In CI the install has just built every prebuilt
module from this tree, so the checks compile only what no cubin holds (the epilogues that are not
prebuilt), not the whole registry a second time."""
from __future__ import annotations

import functools

from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import cubins


@functools.lru_cache(maxsize=None)
def recorded(directory) -> dict:
    """The build's reports in `directory`, read once per process (every file's check asks)."""
    return cubins.ptxas_reports(kcompile.ARCH.removeprefix("sm_"), directory)


def reports(source_file: str, expressions) -> list[kcompile.KernelReport]:
    """One report per distinct kernel; raises RuntimeError (nvcc's output) where a compile fails."""
    recorded_here = recorded(cubins.PREBUILT_DIR)
    found, missing = [], []
    for expr in sorted(set(expressions)):
        entry = recorded_here.get((source_file, expr))
        if entry is not None and entry[0] == kcompile.module_options([expr]):
            found.append(kcompile.KernelReport(expr, *entry[1]))
        else:
            missing.append(expr)
    return found + (kcompile.nvcc_check(source_file, missing) if missing else [])
