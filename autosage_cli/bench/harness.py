"""The benchmark loop: for every graph × op × K (× heads) of a run, every way to compute it, timed side
by side in one process (docs/MEASUREMENT.md) and checked against the best vendor output.

Per case, in this order:
  1. every vendor entry of the op's spec: run, time; the measurer (scheduler/probing/measure.py) picks the
     case's reference by its one rule and the best vendor, the fastest that verified;
  2. autosage: scheduler.tune.tune with the cache (decision "probe", or "cache" on a hit), then the
     chosen plan on the full graph;
  3. with --oracle, tune(full=True) (decision "oracle") and whether the probe agreed with it;
  4. torch.sparse / PyG baselines when importable; with --all-schedules, every supported native
     schedule (decision "fixed").
Before the first case, every kernel file the run's ops may launch is compiled once
(toolkit.precompile, NVRTC), and each graph's fingerprint and features are computed once, before its
first tune is timed: `tune_ms` measures tuning, not compilation (13-16 s on a fresh machine) nor
hashing the graph (reported as `features_ms` and `fingerprint_ms`). The compile seconds go into the run's environment
(`compile`) and on one stderr line.

Every non-vendor plan is verified first (output poisoned with NaN, run once, compared with the
reference) and timed only if it verifies; a failing plan becomes a row with status "wrong" or
"failed" and its reason — marked, never hidden, never a crash of the suite.

GPU work goes through a *toolkit* (bench.toolkit.GpuToolkit, the tuner's measurer extended), so the
loop itself runs on CPU in tests with a NumPy fake (tests/bench_fakes.py).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .. import dtypes
from ..errors import one_line
from . import guard
from .case import CaseRunner
from .rows import Row
from .suites import Case, GraphWork

@dataclass
class RunOptions:
    repeat: int = 20
    warmup: int = 3
    flush_l2: bool = False
    oracle: bool = False
    all_schedules: tuple[str, ...] = ()   # ops whose every supported native schedule is timed
    # Time every supported native schedule of every op with a screen (one launch each; the ones
    # within SCREEN_RATIO of the case's best so far are timed again in full): the exhaustive best.
    exhaustive: bool = False
    cache: str | None = ""          # decision cache file ("": the user's default; None: no cache)
    seed: int = 0
    top_k: int | None = None
    budget_ms: float | None = None
    guardrail: float | None = None
    root: str = "datasets"
    tolerance: float | None = None   # None: the case's (ops.case_tolerance; 1e-4 for float32)
    labeller: object = None          # labelprop's labels for reordered rows (graphs.reorder.labelprop_order)


@dataclass
class RunContext:
    """What every row of a run shares."""
    commit: str
    gpu: str
    copy_tbps: float
    options: RunOptions
    environment: dict = field(default_factory=dict)   # the run's environment (compile seconds added)


@dataclass
class Listener:
    """Progress hooks (the command draws a rich progress bar from them)."""
    on_graph: Callable[[GraphWork], None] = lambda work: None
    on_case: Callable[[GraphWork, Case], None] = lambda work, case: None
    on_compile: Callable[[dict], None] = lambda info: print(compile_line(info), file=sys.stderr)


def count_cases(work: list[GraphWork]) -> int:
    return sum(len(w.cases) for w in work)


def compile_line(info: dict) -> str:
    if info.get("error"):
        return f"kernel precompile failed ({info['error']}); plans compile as they are prepared"
    files = ", ".join(f"{name} {sec:.1f} s" for name, sec in sorted(info["files"].items(),
                                                                      key=lambda kv: -kv[1]))
    return (f"compiled {len(info['files'])} kernel files for {', '.join(info['ops'])} in "
            f"{info['seconds']:.1f} s before timing ({files})")


def precompile(toolkit, ops: list[str], dtypes_run=(dtypes.DEFAULT,)) -> dict:
    """Compile every kernel file the ops' plans may launch in the run's dtypes, once: {"ops",
    "seconds", "files"} (or an "error": a kernel that does not compile fails its own plans, as
    outcomes, later)."""
    t0 = time.perf_counter()
    files: dict = {}
    try:
        for dtype in dtypes_run:
            for name, sec in toolkit.precompile(ops, dtype).items():
                files[name] = round(files.get(name, 0.0) + float(sec), 3)
    except Exception as exc:
        return {"ops": ops, "seconds": round(time.perf_counter() - t0, 3), "files": {}, "error": one_line(exc, 300)}
    return {"ops": ops, "seconds": round(time.perf_counter() - t0, 3), "files": files}


def run_suite(work: list[GraphWork], options: RunOptions, ctx: RunContext, toolkit,
              listener: Listener | None = None) -> Iterator[list[Row]]:
    """Yield each case's rows as soon as it is measured (the caller writes them incrementally, so an
    interrupted run keeps what it measured). Each graph is loaded and moved to the device once, and
    device memory is returned after every case and graph."""
    listener = listener or Listener()
    ops = sorted({c.op for w in work for c in w.cases})
    if ops:
        run_dtypes = [d for d in dtypes.DTYPES if any(c.dtype == d for w in work for c in w.cases)]
        info = precompile(toolkit, ops, run_dtypes)
        ctx.environment["compile"] = info
        listener.on_compile(info)
    faults = guard.FaultState()
    loaded: dict = {}
    for w in work:
        listener.on_graph(w)
        graph = dgraph = None
        reorder_s = math.nan
        try:
            if not faults.lost:
                graph, reorder_s = load_graph(w.spec, options, loaded)
                dgraph = toolkit.to_device(graph)
        except Exception as exc:   # out of memory, a CUDA fault, a graph that cannot load
            reason = f"load: {faults.note(exc)}"
        for case in w.cases:
            listener.on_case(w, case)
            if faults.lost or dgraph is None:
                reason = faults.not_run() if faults.lost else reason
                yield _in_order([guard.failed_row(ctx, w.spec.label, graph, case, reason)], w, reorder_s)
                continue
            try:
                guard.check_device_budget(toolkit, graph, case)
                rows = CaseRunner(toolkit, ctx, w.spec.label, graph, dgraph, case).run()
            except Exception as exc:   # the case ends; the run goes on (or stops its GPU work)
                rows = [guard.failed_row(ctx, w.spec.label, graph, case, faults.note(exc))]
            _free(toolkit, faults)
            yield _in_order(rows, w, reorder_s)
        del dgraph, graph
        _free(toolkit, faults)
    if faults.lost:
        raise faults.fault


def load_graph(spec, options: RunOptions, loaded: dict):
    """(graph, seconds its reordering cost or NaN): the spec's graph, reordered by `spec.reorder`
    when set. `loaded` keeps the last graph in its user's order, so that the reorderings that
    follow it in the run (suites.with_reorderings) do not load or generate it again."""
    import dataclasses

    method = getattr(spec, "reorder", "")
    base = dataclasses.replace(spec, reorder="") if method else spec
    held = loaded.get("base")
    if held is not None and held[0] == base:
        graph = held[1]
    else:
        loaded.clear()
        graph = base.load(options.root, options.seed)
        loaded["base"] = (base, graph)
    if not method:
        return graph, math.nan
    from .reordering import reorder

    reordered, _, report = reorder(graph, method, options.labeller)
    return reordered, report.order_s + report.apply_s


def _in_order(rows: list[Row], work: GraphWork, reorder_s: float) -> list[Row]:
    for r in rows:
        r.reorder, r.reorder_s = getattr(work.spec, "reorder", ""), reorder_s
    return rows


def _free(toolkit, faults: "guard.FaultState") -> None:
    if faults.lost:
        return   # every CUDA call fails once the context is lost
    try:
        toolkit.free()
    except Exception as exc:
        faults.note(exc)


def make_context(toolkit, options: RunOptions) -> tuple[RunContext, dict]:
    """Environment once per run and the copy bandwidth measured in this run (the ceiling
    effective bandwidths are compared with). The environment
    dict is shared with the context: run_suite adds the kernel compile seconds (`compile`) to it."""
    env = toolkit.environment()
    device = env.get("device") or {}
    ctx = RunContext(commit=str(env.get("commit", "")), gpu=str(device.get("name", "")),
                     copy_tbps=toolkit.copy_bandwidth_tbps(), options=options, environment=env)
    return ctx, env
