"""`autosage compile`: build kernels ahead of time into CuPy's kernel cache (for images, containers
and clusters), so that no later tune or run compiles. Works without a GPU wherever NVRTC loads; on
a GPU it also warms CuPy's own kernels that tuning launches (scheduler/warmup.py)."""
from __future__ import annotations

import json
import sys
import time

import click

from .. import dtypes, ops as op_specs
from ..errors import AutosageError
from ..kernels import compile as kcompile
from .op_names import OpNames
from .progress import StderrBar

def parse_ops(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated or comma-separated --op values, in order, without duplicates (none: every op)."""
    known = op_specs.names()
    ops = tuple(dict.fromkeys(p.strip() for v in values for p in v.split(",") if p.strip()))
    for op in ops:
        if op not in known:
            raise AutosageError(f"unknown op {op!r} in --op; choose from {', '.join(known)}")
    return ops or default_ops(known)


def default_ops(known: tuple[str, ...]) -> tuple[str, ...]:
    """What `autosage compile` builds without --op: every op but the fused SpMM epilogues no layer
    runs by default (each is all of SpMM's schedules again; they compile on first use). GCNConv
    adds its bias in the SpMM's store, so spmm-bias is built."""
    from ..kernels import epilogues

    optional = {epilogues.op_name(row) for row in epilogues.FUSED if row.name != "bias"}
    return tuple(op for op in known if op not in optional)


def c_type(dtype: str, ops: tuple[str, ...]) -> str:
    """The kernels' C++ type of `dtype`, when every op asked for accepts it."""
    for op in ops:
        op_specs.require_dtype(op, dtype)
    return dtypes.c_type(dtype)


class Progress(StderrBar):
    """Progress on stderr: a rich bar on a terminal, else a plain line every tenth of the work."""

    def __init__(self, total: int):
        super().__init__(total, "compiling kernels")
        self.total, self.done, self.failed = total, 0, 0
        self.step = max(1, total // 10)

    def __call__(self, record: kcompile.CompileRecord) -> None:
        self.done += 1
        self.failed += bool(record.error)
        if self.bar:
            self.bar.advance(self.task)
        elif self.done % self.step == 0 or self.done == self.total:
            failed = f", {self.failed} failed" if self.failed else ""
            click.echo(f"compiled {self.done}/{self.total} kernels{failed}", err=True)


@click.command("compile")
@click.option("--op", "ops", multiple=True, type=OpNames(listed=True),
              help="the ops whose kernels to build (repeat or comma-separate; default: all). attention "
              "includes the SDDMM and SpMM kernels its pipeline runs")
@click.option("--dtype", default="float32", show_default=True, help="element type of the kernels")
@click.option("--arch", default=None, help="target architecture, e.g. 90 or sm_90 (default: the visible "
              "GPU's; without one, sm_90)")
@click.option("--workers", type=int, default=None, help="compiler threads (default: one per CPU, at most 32)")
@click.option("--kernels-only", is_flag=True, help="skip the warm-up tune that caches CuPy's own kernels "
              "(done only where the target GPU is visible)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object on stdout")
def command(ops, dtype, arch, workers, kernels_only, as_json):
    """Compile every kernel variant of the chosen ops into CuPy's kernel cache, ahead of time."""
    from ..kernels import aot

    from ..kernels import util

    chosen = parse_ops(ops)
    # every group of autosage's helper kernels too (inputs, poisoning, verification, the vendors'
    # steps, the float64 references): a tune of any op, type or index type finds them compiled
    refs = list(util.MODULES.values()) + op_specs.instantiations(chosen, c_type(dtype, chosen))
    if workers is not None and workers < 1:
        raise AutosageError(f"--workers must be >= 1, got {workers}")
    target = aot.normalize_arch(arch) if arch else None
    aot.nvrtc_version()
    t0 = time.perf_counter()
    with Progress(len(refs)) as progress:
        result = aot.compile_ahead(refs, target, workers, progress)
    wall_s = time.perf_counter() - t0
    warmed = None
    if result.on_device and not kernels_only and not result.failed:
        from ..scheduler.warmup import warm_up

        click.echo(f"warming CuPy's own kernels: a tiny tune of {', '.join(chosen)}", err=True)
        warmed = {op: round(s, 3) for op, s in warm_up(chosen).items()}
    stats = aot.cache_stats()
    summary = {"ops": list(chosen), "dtype": dtype, "arch": f"sm_{result.arch}", "on_device": result.on_device,
               "kernels": len(result.records), "failed": len(result.failed), "wall_s": round(wall_s, 3),
               "compile_s": round(sum(r.ms for r in result.records.values()) / 1e3, 3),
               "warm_up_s": warmed, "cache": stats.to_dict(),
               "failures": [{"file": r.ref.source_file, "expression": r.ref.expression, "error": r.error}
                            for r in result.failed]}
    if as_json:
        click.echo(json.dumps(summary))
    else:
        where = "on this GPU" if result.on_device else "without loading them on a GPU"
        click.echo(f"compiled {summary['kernels']} kernels for {', '.join(chosen)} ({dtype}, "
                   f"{summary['arch']}) {where} in {wall_s:.1f} s ({summary['compile_s']:.1f} s of compiler "
                   f"time on {workers or kcompile.default_workers()} threads)")
        if warmed:
            click.echo(f"warmed CuPy's own kernels in {sum(warmed.values()):.1f} s (a tiny tune of each op)")
        click.echo(f"kernel cache: {stats.path} ({stats.kernels} kernels, {stats.bytes / 2**20:.1f} MiB)")
        for f in summary["failures"]:
            click.echo(f"failed: {f['file']} {f['expression']}: {f['error']}", err=True)
    if result.failed:
        raise AutosageError(f"{len(result.failed)} of {len(result.records)} kernels failed to compile "
                            f"(first: {result.failed[0].ref.expression})")
