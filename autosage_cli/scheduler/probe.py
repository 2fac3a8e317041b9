"""Micro-probes: time the top candidates and every vendor algorithm on a degree-preserving sample.

The seed probed an *induced* subgraph of 2-3% of the nodes, which keeps an edge only when both ends
were sampled: on Reddit that cut the mean degree from ~492 to ~9.5 and its probe predicted 1.6-2.3x
where the full graph gave 1.0x. Here a sample is made of WHOLE rows with all their edges, drawn in
equal proportion from every log2-degree bin (so the degree quantiles survive), always with the
heaviest rows (the hubs decide whether an unsplit schedule is viable), and with the column space
untouched (B, X, Y keep their full size, so gathers hit the real column range and L2 behaves as on the
full graph).

Measuring goes through a `Measurer` (the GPU one by default) so the loop itself — verify against the
vendor, time within a budget, record every failure — is tested on a CPU with a fake.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..graphs.csr import CSRGraph, from_arrays

REL_TOLERANCE = 1e-4        # BENCHMARK.md rule 4: fp32 with widely different reduction orders
HEAVIEST_ROWS = 8           # always sampled: the rows that break unsplit schedules...
HEAVY_SHARE_MAX = 0.05      # ...while they hold at most 5% of the sample (the first: always), so
                            # forced hubs do not outweigh the stratified rows
SAMPLE_FRACTION = 0.02
# A probe launch must be long enough that launch overhead (~4 us) and event resolution (~0.5 us)
# do not decide the ranking: ~1M nonzeros is 20-30 us even at K=16 on the H200.
MIN_SAMPLE_NNZ = 1 << 20
# ...and must fill the GPU the way the full graph does: two waves of warp-per-row groups
# (132 SMs x 64 resident warps x 2), or a sample of a dense graph would leave SMs idle.
MIN_SAMPLE_ROWS = 2 * 132 * 64
DEFAULT_BUDGET_MS = 400.0   # measured GPU time across all candidates and vendors
WARMUP, MAX_REPEAT = 2, 20         # per candidate; time_plan keeps >= 3 repeats


# ------------------------------------------------------------------ sampling

def default_target_nnz(graph: CSRGraph) -> int:
    """max(2% of nnz, 1M nonzeros, enough rows to fill the GPU twice), capped at the whole graph."""
    mean_degree = graph.nnz / max(1, graph.n_rows)
    target = max(SAMPLE_FRACTION * graph.nnz, MIN_SAMPLE_NNZ, MIN_SAMPLE_ROWS * mean_degree)
    return int(min(graph.nnz, math.ceil(target)))


def degree_bins(degrees: np.ndarray) -> np.ndarray:
    """0 for empty rows, 1 + floor(log2(degree)) otherwise."""
    bins = np.zeros(degrees.shape, dtype=np.int64)
    nonempty = degrees > 0
    bins[nonempty] = 1 + np.floor(np.log2(degrees[nonempty])).astype(np.int64)
    return bins


def _stratified_rows(degrees: np.ndarray, pool: np.ndarray, fraction: float,
                     rng: np.random.Generator) -> np.ndarray:
    """`fraction` of the rows of every degree bin of `pool`, with stochastic rounding so small
    bins are kept in expectation."""
    if fraction >= 1.0:
        return pool
    bins = degree_bins(degrees[pool])
    chosen = []
    for b in np.unique(bins):
        members = pool[bins == b]
        want = fraction * members.size
        take = int(want) + int(rng.random() < want - int(want))
        if take:
            chosen.append(rng.choice(members, size=take, replace=False))
    return np.concatenate(chosen) if chosen else np.empty(0, dtype=np.int64)


def take_rows(graph: CSRGraph, rows: np.ndarray, source: dict) -> CSRGraph:
    """The CSR of the given rows (sorted ids) with all their edges; columns unchanged."""
    degrees = graph.row_degrees()[rows]
    indptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    starts = graph.indptr[rows].astype(np.int64)
    # Position of every kept edge in the full arrays: row start + offset within the row.
    gather = np.repeat(starts - indptr[:-1], degrees) + np.arange(indptr[-1], dtype=np.int64)
    return from_arrays(indptr, graph.indices[gather], graph.values[gather],
                       (rows.size, graph.n_cols), source)


def sample_rows(graph: CSRGraph, target_nnz: int | None = None, seed: int = 0):
    """(sample, row_ids): whole rows, stratified by degree, heaviest rows always in, about
    `target_nnz` nonzeros (default: default_target_nnz), row order kept, columns untouched."""
    target = default_target_nnz(graph) if target_nnz is None else int(target_nnz)
    degrees = graph.row_degrees()
    rng = np.random.default_rng(seed)
    if target >= graph.nnz:
        rows = np.arange(graph.n_rows, dtype=np.int64)
    else:
        by_degree = np.argsort(-degrees, kind="stable")
        heavy = by_degree[:1].tolist()
        for r in by_degree[1:HEAVIEST_ROWS]:
            if degrees[r] == 0 or degrees[heavy].sum() + degrees[r] > HEAVY_SHARE_MAX * target:
                break
            heavy.append(int(r))
        heavy = np.asarray(heavy, dtype=np.int64)
        rest = np.setdiff1d(np.arange(graph.n_rows, dtype=np.int64), heavy, assume_unique=True)
        rest_nnz = graph.nnz - int(degrees[heavy].sum())
        fraction = max(0.0, target - int(degrees[heavy].sum())) / max(1, rest_nnz)
        rows = np.sort(np.concatenate([heavy, _stratified_rows(degrees, rest, fraction, rng)]))
    kept_nnz = int(degrees[rows].sum())
    source = {"sample": {"of": dict(graph.source), "fingerprint": graph.fingerprint,
                         "method": "whole rows, stratified by log2 degree, heaviest rows kept",
                         "rows": int(rows.size), "nnz": kept_nnz, "target_nnz": target,
                         "seed": int(seed)}}
    return take_rows(graph, rows, source), rows


# ------------------------------------------------------------------ records

@dataclass
class ProbeRecord:
    """One candidate's (or vendor algorithm's) outcome on the probe graph."""
    name: str                   # schedule name or vendor name
    backend: str                # "native" or the vendor name
    estimate_ms: float | None = None
    status: str = "pending"     # "ok" | "failed" | "skipped"
    reason: str = ""
    ms: float | None = None     # median
    p20_ms: float | None = None
    p80_ms: float | None = None
    repeats: int = 0
    rel_error: float | None = None
    prepare_ms: float | None = None
    params: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.ms is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["rel_error"] is not None and not math.isfinite(d["rel_error"]):
            d["rel_error"] = "inf"   # JSON has no Infinity
        return d


@dataclass
class ProbeResult:
    natives: list[ProbeRecord]
    vendors: list[ProbeRecord]
    reference: str              # what the natives were checked against
    spent_ms: float             # measured GPU time (the budget's currency)
    wall_ms: float


def one_line(exc: BaseException, limit: int = 240) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------ measuring

class GpuMeasurer:
    """The real measurements: backends.native / backends.vendor plans, CUDA-event timing."""

    def to_device(self, graph: CSRGraph):
        from ..backends.base import DeviceGraph
        return DeviceGraph.from_host(graph)

    def vendor_names(self, op: str) -> list[str]:
        from ..backends import vendor
        return list(vendor.vendor_names(op))

    def inputs(self, dgraph, op: str, k: int, heads: int, seed: int) -> tuple:
        from ..backends.base import make_inputs
        return make_inputs(op, dgraph, k, heads, seed)

    def prepare_native(self, dgraph, schedule, k: int, heads: int, scale=None):
        from ..backends import native
        return native.prepare(dgraph, schedule, k, heads, scale)

    def prepare_vendor(self, dgraph, name: str, k: int, heads: int, scale=None):
        from ..backends import vendor
        return vendor.prepare_vendor(dgraph, name, k, heads, scale)

    def run(self, plan, inputs):
        """One launch into a NaN-poisoned output (so an untouched output cannot pass), synced."""
        import cupy
        from ..backends import timing
        out = plan.alloc_out()
        timing.poison(out)
        plan.run(inputs, out)
        cupy.cuda.get_current_stream().synchronize()
        return out

    def reference(self, op: str, dgraph, inputs, scale=None):
        """float64 SciPy reference, used only when no vendor algorithm ran."""
        import cupy
        from ..backends import reference
        return cupy.asarray(reference.reference(op, dgraph.host, [cupy.asnumpy(x) for x in inputs],
                                                scale=scale))

    def rel_error(self, out, ref) -> float:
        from ..backends import timing
        return float(timing.rel_error(out, ref))

    def time(self, plan, inputs, out, repeat: int, warmup: int, max_ms: float | None = None):
        from ..backends import timing
        return timing.time_plan(plan, inputs, out, repeat=repeat, warmup=warmup, max_ms=max_ms)


# ------------------------------------------------------------------ the probe loop

class _Budget:
    def __init__(self, total_ms: float):
        self.total, self.spent = float(total_ms), 0.0

    @property
    def left(self) -> float:
        return self.total - self.spent


def _time_record(measure, rec: ProbeRecord, plan, inputs, out, budget: _Budget, items_left: int) -> None:
    """CUDA-event timing with this item's share of what is left of the budget (time_plan cuts the
    repeats to fit, judged from the warm-up, never below 3)."""
    share = max(budget.left, 0.0) / max(1, items_left)
    stats = measure.time(plan, inputs, out, repeat=MAX_REPEAT, warmup=WARMUP, max_ms=share)
    budget.spent += stats.median_ms * (stats.repeats + WARMUP)
    rec.ms, rec.p20_ms, rec.p80_ms = stats.median_ms, stats.p20_ms, stats.p80_ms
    rec.repeats = int(stats.repeats)


def probe_candidates(dgraph, op: str, k: int, heads: int, candidates, vendor_names,
                     budget_ms: float = DEFAULT_BUDGET_MS, measure=None, seed: int = 0,
                     progress=None) -> ProbeResult:
    """Verify and time `candidates` [(Schedule, estimate_ms)] and every vendor algorithm on `dgraph`.

    Vendors first (all of them: they are the guardrail's yardstick); the fastest vendor's output is
    the reference. Each native candidate, in estimate order, is prepared, run once into a NaN-poisoned
    output and compared with the reference (rel. error <= 1e-4 or it fails "mismatch" and is never
    timed); verified ones are timed with CUDA events within their share of the budget; once the
    budget is spent the rest are "skipped". Any exception is recorded against its candidate."""
    measure = measure or GpuMeasurer()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    budget = _Budget(budget_ms)
    inputs = measure.inputs(dgraph, op, k, heads, seed)
    vendors = [ProbeRecord(name=v, backend=v) for v in vendor_names]
    natives = [ProbeRecord(name=s.name, backend="native", estimate_ms=float(est), params=s.params())
               for s, est in candidates]
    items_left = len(vendors) + len(natives)

    outputs = {}
    for rec in vendors:
        say(f"probe vendor {rec.name}")
        out = _measure_one(measure, rec, lambda n=rec.name: measure.prepare_vendor(dgraph, n, k, heads),
                           inputs, None, budget, items_left)
        items_left -= 1
        if out is not None:
            outputs[rec.name] = out
    timed = [r for r in vendors if r.ok]
    if timed:
        best = min(timed, key=lambda r: r.ms)
        reference, ref_name = outputs[best.name], best.name
        for rec in timed:
            rec.rel_error = measure.rel_error(outputs[rec.name], reference)
            if not rec.rel_error <= REL_TOLERANCE:
                rec.status, rec.reason = "failed", f"disagrees with {ref_name} rel_err={rec.rel_error:.2e}"
    else:
        reference, ref_name = measure.reference(op, dgraph, inputs), "float64 reference (no vendor ran)"
    outputs.clear()

    for rec, (schedule, _est) in zip(natives, candidates):
        if budget.left <= 0:
            rec.status, rec.reason = "skipped", f"probe budget of {budget.total:g} ms spent"
            continue
        say(f"probe {rec.name}")
        _measure_one(measure, rec, lambda s=schedule: measure.prepare_native(dgraph, s, k, heads),
                     inputs, reference, budget, items_left)
        items_left -= 1
    return ProbeResult(natives, vendors, ref_name, budget.spent, (time.perf_counter() - t0) * 1e3)


def _measure_one(measure, rec: ProbeRecord, prepare, inputs, reference, budget: _Budget, items_left: int):
    """Prepare, run once, verify (when a reference is given), time. Returns the output or None."""
    try:
        plan = prepare()
    except Exception as exc:  # a compile or prepare failure is an outcome, never a crash
        rec.status, rec.reason = "failed", f"prepare: {one_line(exc)}"
        return None
    rec.prepare_ms = float(getattr(plan, "prepare_ms", 0.0) or 0.0)
    stage = "run"
    try:
        out = measure.run(plan, inputs)
        if reference is not None:
            stage = "verify"
            rec.rel_error = measure.rel_error(out, reference)
            if not rec.rel_error <= REL_TOLERANCE:   # NaN and inf fail too
                rec.status, rec.reason = "failed", f"mismatch rel_err={rec.rel_error:.2e}"
                return None
        stage = "time"
        _time_record(measure, rec, plan, inputs, out, budget, items_left)
    except Exception as exc:
        rec.status, rec.reason = "failed", f"{stage}: {one_line(exc)}"
        return None
    finally:
        close = getattr(plan, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                pass
    rec.status = "ok"
    return out
