"""Micro-probes: time the top candidates and every vendor algorithm on a degree-preserving sample.

The seed probed an *induced* subgraph of 2-3% of the nodes, which keeps an edge only when both ends
were sampled: on Reddit that cut the mean degree from ~492 to ~9.5 and its probe predicted 1.6-2.3x
where the full graph gave 1.0x. Here a sample is made of WHOLE rows with all their edges and the
column space untouched (B, X, Y keep their full size, so gathers hit the real column range). The rows
come in contiguous WINDOWS of consecutive ids, not one by one: graphs with communities (reddit,
products: 70-80% of a row's edges inside a block of ~2048 nearby ids) run fast on the full graph
because consecutive rows gather the same dense rows from L2; rows drawn one at a time from all over
the graph share none, and the first H200 runs (6a0dd38) showed that sample ranking kernels by a
locality the full graph does not have (probe/oracle agreement 74%). Windows are drawn stratified by
their nonzero count (sorted by it, one window per stratum), so the degree distribution survives, and
the heaviest rows are always in (the hubs decide whether an unsplit schedule is viable).

Measuring goes through a `Measurer` (the GPU one by default) so the loop itself — verify against the
vendor, time every verified candidate and vendor at least MIN_REPEATS times, spend what is left of
the budget on more repeats — is tested on a CPU with a fake.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ..graphs.csr import INT32_LIMIT, CSRGraph

REL_TOLERANCE = 1e-4        # BENCHMARK.md rule 4: fp32 with widely different reduction orders
HEAVIEST_ROWS = 8           # always sampled: the rows that break unsplit schedules...
HEAVY_SHARE_MAX = 0.05      # ...while they hold at most 5% of the sample (the first: always), so
                            # forced hubs do not outweigh the windows

# Sample size. On the H200 a probe graph must be (a) long enough per launch that launch overhead
# (~4 us) and event resolution (~0.5 us) do not decide the ranking, (b) wide enough to fill the GPU
# the way the full graph does (two waves of warp-per-row groups: 132 SMs x 64 warps x 2 rows), and
# (c) a fair share of the graph, so its windows cover the degree distribution. Hence
#     target = max(4% of nnz, 2M nonzeros, MIN_SAMPLE_ROWS x mean degree), capped at the graph,
# and the whole graph is probed when that is half of it or more (a sample saves little then).
# What it costs (full-graph times of 6a0dd38; a sample's launch takes about its share of them):
#   reddit-like (114.6M nnz, mean degree 492): rows bind, 16,896 x 492 = 8.3M nnz (7.3%), the same
#     as the 2% rule gave; a launch is ~7% of the full graph's: spmm K=256 ~1 ms (vendor 13.9 ms),
#     attention d=64 H=8 ~47 ms per vendor (650 ms; 50.7 ms measured on the old sample) and ~4.5 ms
#     per native (57-100 ms). The guaranteed minimum (run to verify + 1 warm-up + 3 repeats = 5
#     launches each) for 4 vendors + 6 natives is 10 x 5 x 1 = 50 ms at spmm K=256 and
#     4 x 5 x 47 + 6 x 5 x 4.5 ~ 1.1 s at attention H=8 (the one case over the 400 ms budget; the
#     probe reports the overrun); sampling (~0.1 s on the CPU) and copying 8.3M nonzeros to the
#     device (~70 MB) add little, so a cold tune stays within ~1.5 s beyond features and compiling.
#   products-like (123.7M nnz, mean degree 51): 4% = 4.95M nnz (2% was 2.47M); spmm K=256 ~0.7 ms
#     per launch, attention H=8 ~11.5 ms per vendor, so the minimum is 4 x 5 x 11.5 + 6 x 5 x 2.6
#     ~ 0.3 s and the budget buys the remaining repeats.
SAMPLE_FRACTION = 0.04
MIN_SAMPLE_NNZ = 2 << 20
MIN_SAMPLE_ROWS = 2 * 132 * 64
WHOLE_GRAPH_SHARE = 0.5     # a sample this large (share of nnz) or larger: probe the whole graph
# Windows: runs of consecutive rows. 2048 is the community block of the reddit/products presets
# (and a size where consecutive rows of real graphs with id locality share their neighbourhoods);
# a small sample uses shorter windows so that it still holds MIN_WINDOWS of them (the strata).
WINDOW_ROWS = 2048
MIN_WINDOWS = 8
MAX_SLICES = 4096           # take_rows copies up to this many runs of rows as slices

DEFAULT_BUDGET_MS = 400.0   # measured GPU time across all candidates and vendors (the minimum below
                            # is spent whatever the budget; the budget only buys more repeats)
MIN_REPEATS = 3             # every verified candidate and vendor is timed at least this often...
MAX_REPEAT = 20             # ...and at most this often, as the budget allows
WARMUP = 1                  # per timed batch; the verification run before it paid one-time costs


# ------------------------------------------------------------------ sampling

def default_target_nnz(graph: CSRGraph) -> int:
    """max(4% of nnz, 2M nonzeros, enough rows to fill the GPU twice), capped at the whole graph."""
    mean_degree = graph.nnz / max(1, graph.n_rows)
    target = max(SAMPLE_FRACTION * graph.nnz, MIN_SAMPLE_NNZ, MIN_SAMPLE_ROWS * mean_degree)
    return int(min(graph.nnz, math.ceil(target)))


def probes_whole_graph(graph: CSRGraph, target_nnz: int | None = None) -> bool:
    """True when a sample of `target_nnz` (default: default_target_nnz) nonzeros would hold half of
    the graph or more: the probe then runs on the graph itself."""
    target = default_target_nnz(graph) if target_nnz is None else int(target_nnz)
    return graph.nnz == 0 or target >= WHOLE_GRAPH_SHARE * graph.nnz


def window_rows(graph: CSRGraph, target_nnz: int) -> int:
    """Rows per window: WINDOW_ROWS, shortened so that a sample of `target_nnz` nonzeros holds at
    least MIN_WINDOWS windows."""
    mean_degree = max(graph.nnz / max(1, graph.n_rows), 1e-9)
    target_rows = target_nnz / mean_degree
    return int(max(1, min(WINDOW_ROWS, target_rows // MIN_WINDOWS)))


def heaviest_rows(degrees: np.ndarray, target_nnz: int) -> np.ndarray:
    """The heaviest row, and the next HEAVIEST_ROWS - 1 while together they hold at most
    HEAVY_SHARE_MAX of the target."""
    if degrees.size == 0:
        return np.empty(0, dtype=np.int64)
    top = min(HEAVIEST_ROWS, degrees.size)
    cand = np.argpartition(-degrees, top - 1)[:top] if top < degrees.size else np.arange(degrees.size)
    cand = cand[np.lexsort((cand, -degrees[cand]))]          # heaviest first, ties by id
    heavy, held = [int(cand[0])], int(degrees[cand[0]])
    for r in cand[1:]:
        if degrees[r] == 0 or held + degrees[r] > HEAVY_SHARE_MAX * target_nnz:
            break
        heavy.append(int(r))
        held += int(degrees[r])
    return np.asarray(heavy, dtype=np.int64)


def _stratified_windows(window_nnz: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of about `fraction` of the windows: sorted by nonzero count, cut into equal strata
    (one per window taken), one window drawn from each, so the chosen windows' sizes follow the
    distribution of all windows (and the sample's nonzeros are `fraction` of the whole in
    expectation)."""
    n = window_nnz.size
    want = fraction * n
    take = min(n, int(want) + int(rng.random() < want - int(want)))
    if take <= 0:
        return np.empty(0, dtype=np.int64)
    order = np.argsort(window_nnz, kind="stable")
    edges = np.floor(np.linspace(0, n, take + 1)).astype(np.int64)
    picks = edges[:-1] + (rng.random(take) * np.diff(edges)).astype(np.int64)
    return order[np.minimum(picks, edges[1:] - 1)]


def take_rows(graph: CSRGraph, rows: np.ndarray, source: dict) -> CSRGraph:
    """The CSR of the given rows (sorted ids) with all their edges; columns unchanged. Runs of
    consecutive rows (windows) are copied as slices. Not validated again: whole rows of a canonical
    graph are canonical."""
    rows = np.asarray(rows, dtype=np.int64)
    degrees = graph.row_degrees()[rows]
    nnz = int(degrees.sum())
    idx_t = np.int32 if max(nnz, rows.size, graph.n_cols) <= INT32_LIMIT else np.int64
    indptr = np.zeros(rows.size + 1, dtype=idx_t)
    np.cumsum(degrees, out=indptr[1:])
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    first = np.concatenate([[0], breaks]).astype(np.int64)
    last = np.append(breaks, rows.size).astype(np.int64) - 1
    if first.size <= MAX_SLICES:
        lo = graph.indptr[rows[first]].astype(np.int64)
        hi = graph.indptr[rows[last] + 1].astype(np.int64)
        indices = np.concatenate([graph.indices[a:b] for a, b in zip(lo, hi)] or [graph.indices[:0]])
        values = np.concatenate([graph.values[a:b] for a, b in zip(lo, hi)] or [graph.values[:0]])
    else:
        # Position of every kept edge in the full arrays: row start + offset within the row.
        starts = graph.indptr[rows].astype(np.int64)
        gather = np.repeat(starts - indptr[:-1], degrees) + np.arange(nnz, dtype=np.int64)
        indices, values = graph.indices[gather], graph.values[gather]
    return CSRGraph(indptr, np.ascontiguousarray(indices, dtype=idx_t),
                    np.ascontiguousarray(values, dtype=np.float32), (int(rows.size), graph.n_cols),
                    dict(source))


def sample_rows(graph: CSRGraph, target_nnz: int | None = None, seed: int = 0,
                window: int | None = None):
    """(sample, row_ids): windows of `window` consecutive whole rows (default: window_rows), drawn
    stratified by their nonzero count at seeded positions, plus the heaviest rows; about
    `target_nnz` nonzeros (default: default_target_nnz); row order kept, columns untouched.

    The windows tile the rows from a random offset (so where they start relative to a graph's own
    blocks is random); the heaviest rows are taken out of the windows' counts and always added."""
    target = default_target_nnz(graph) if target_nnz is None else int(target_nnz)
    degrees = graph.row_degrees()
    rng = np.random.default_rng(seed)
    n = graph.n_rows
    w = int(window) if window is not None else window_rows(graph, target)
    if w < 1:
        raise ValueError(f"window must be >= 1 row, got {w}")
    if target >= graph.nnz:
        rows = np.arange(n, dtype=np.int64)
    else:
        heavy = heaviest_rows(degrees, target)
        heavy_nnz = int(degrees[heavy].sum())
        offset = int(rng.integers(0, w)) if n > w else 0
        starts = np.unique(np.concatenate([[0], np.arange(offset, n, w, dtype=np.int64)]))
        ends = np.append(starts[1:], n)
        # Window nonzeros without the forced rows (they are in anyway).
        csum = np.concatenate([[0], np.cumsum(degrees)])
        nnz_w = csum[ends] - csum[starts]
        np.subtract.at(nnz_w, np.searchsorted(starts, heavy, side="right") - 1, degrees[heavy])
        fraction = max(0.0, target - heavy_nnz) / max(1, graph.nnz - heavy_nnz)
        chosen = np.sort(_stratified_windows(nnz_w, fraction, rng))
        lengths = ends[chosen] - starts[chosen]
        runs = np.repeat(starts[chosen] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        in_windows = runs + np.arange(int(lengths.sum()), dtype=np.int64)
        rows = np.union1d(in_windows, heavy)
    kept_nnz = int(degrees[rows].sum())
    source = {"sample": {"of": dict(graph.source), "fingerprint": graph.fingerprint,
                         "method": "windows of consecutive whole rows, stratified by window nonzeros, "
                                   "heaviest rows kept",
                         "rows": int(rows.size), "nnz": kept_nnz, "target_nnz": target,
                         "window": w, "seed": int(seed)}}
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
    budget_ms: float = DEFAULT_BUDGET_MS
    floor_ms: float = 0.0       # GPU time of the guaranteed minimum (verify, warm-up, MIN_REPEATS)

    @property
    def overrun_ms(self) -> float:
        """How far the probe went over its budget (the minimum is spent whatever the budget)."""
        return max(0.0, self.spent_ms - self.budget_ms)


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
        """float64 SciPy reference, used only when the vendor algorithms cannot give one."""
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


@dataclass
class _Live:
    """A verified plan waiting to be timed, and its timing batches (median, p20, p80, repeats)."""
    rec: ProbeRecord
    plan: object
    batches: list = field(default_factory=list)

    @property
    def median(self) -> float:
        return self.batches[0][0]


def merge_batches(batches) -> tuple[float, float, float, int]:
    """One (median, p20, p80, repeats) from several timing batches of one plan: the batch medians'
    median weighted by repeats (a short batch at another clock cannot pull it far), p20 and p80
    averaged by repeats, repeats summed."""
    if len(batches) == 1:
        return batches[0]
    reps = np.array([b[3] for b in batches], dtype=float)
    med = np.array([b[0] for b in batches], dtype=float)
    order = np.argsort(med, kind="stable")
    cum = np.cumsum(reps[order])
    median = float(med[order][np.searchsorted(cum, 0.5 * cum[-1])])
    p20 = float(np.dot(reps, [b[1] for b in batches]) / reps.sum())
    p80 = float(np.dot(reps, [b[2] for b in batches]) / reps.sum())
    return median, p20, p80, int(reps.sum())


def interleave(*groups):
    """Round robin over the groups (v1, n1, v2, n2, ...): no group waits for another to finish."""
    out, longest = [], max((len(g) for g in groups), default=0)
    for i in range(longest):
        out += [g[i] for g in groups if i < len(g)]
    return out


def probe_candidates(dgraph, op: str, k: int, heads: int, candidates, vendor_names,
                     budget_ms: float = DEFAULT_BUDGET_MS, measure=None, seed: int = 0,
                     progress=None) -> ProbeResult:
    """Verify and time `candidates` [(Schedule, estimate_ms)] and every vendor algorithm on `dgraph`.

    1. Every vendor algorithm is prepared and run once; the reference is the first (registry order)
       whose output another vendor confirms (a lone vendor is trusted; if none agree, the float64
       SciPy reference decides), and a vendor that disagrees with it fails.
    2. Each native candidate, in estimate order, is prepared, run once into a NaN-poisoned output and
       compared with the reference (rel. error <= 1e-4, or it fails "mismatch" and is never timed).
    3. Timing, interleaved vendor / native so no group waits on the other: every verified plan gets
       one warm-up and MIN_REPEATS timed launches WHATEVER the budget (a candidate is never dropped
       for budget: that is how the vendor once won by default); what is left of the budget then buys
       more repeats (up to MAX_REPEAT), shared equally. The result says when the minimum alone
       overran the budget, and by how much.
    Any exception is recorded against its candidate; every plan is closed at the end."""
    measure = measure or GpuMeasurer()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    budget = _Budget(budget_ms)
    inputs = measure.inputs(dgraph, op, k, heads, seed)
    vendors = [ProbeRecord(name=v, backend=v) for v in vendor_names]
    natives = [ProbeRecord(name=s.name, backend="native", estimate_ms=float(est), params=s.params())
               for s, est in candidates]
    live_vendors: list[_Live] = []
    live_natives: list[_Live] = []
    try:
        outputs = {}
        for rec in vendors:
            say(f"probe vendor {rec.name}")
            got = _prepare_and_run(measure, rec, lambda n=rec.name: measure.prepare_vendor(dgraph, n, k, heads),
                                   inputs)
            if got is not None:
                live_vendors.append(_Live(rec, got[0]))
                outputs[rec.name] = got[1]
        reference, ref_name = _vendor_reference(measure, op, dgraph, inputs, [lv.rec for lv in live_vendors],
                                                outputs)
        scratch = next((out for name, out in outputs.items() if out is not reference), None)
        outputs.clear()
        for lv in [lv for lv in live_vendors if lv.rec.status == "failed"]:
            _close(lv.plan)
            live_vendors.remove(lv)

        for rec, (schedule, _est) in zip(natives, candidates):
            say(f"probe {rec.name}")
            got = _prepare_and_run(measure, rec, lambda s=schedule: measure.prepare_native(dgraph, s, k, heads),
                                   inputs, reference)
            if got is not None:
                live_natives.append(_Live(rec, got[0]))
                scratch = got[1] if scratch is None else scratch
        if scratch is None and (live_vendors or live_natives):
            scratch = reference.copy()     # timing writes somewhere; never into the reference

        floor_ms = _time_all(measure, interleave(live_vendors, live_natives), inputs, scratch, budget)
    finally:
        for lv in live_vendors + live_natives:
            _close(lv.plan)
    result = ProbeResult(natives, vendors, ref_name, budget.spent, (time.perf_counter() - t0) * 1e3,
                         budget.total, floor_ms)
    if result.overrun_ms > 0:
        say(f"probe used {result.spent_ms:.0f} ms of GPU time, {result.overrun_ms:.0f} ms over its "
            f"{budget.total:g} ms budget: every verified plan is timed {MIN_REPEATS} times regardless")
    return result


def _time_all(measure, items: list[_Live], inputs, out, budget: _Budget) -> float:
    """The minimum for every item (in the given, interleaved order), then extra repeats from what is
    left of the budget, shared equally. Returns the GPU time of the minimum."""
    for it in items:
        _batch(measure, it, inputs, out, MIN_REPEATS, budget, verify_run=True)
    floor_ms = budget.spent
    timed = [it for it in items if it.batches]
    for i, it in enumerate(timed):
        share = max(budget.left, 0.0) / (len(timed) - i)
        extra = min(MAX_REPEAT - MIN_REPEATS, int(share // max(it.median, 1e-6)) - WARMUP)
        if extra >= 1:
            _batch(measure, it, inputs, out, extra, budget)
    for it in items:
        if it.batches:
            rec = it.rec
            rec.ms, rec.p20_ms, rec.p80_ms, rec.repeats = merge_batches(it.batches)
            rec.status = "ok"
    return floor_ms


def _batch(measure, it: _Live, inputs, out, repeat: int, budget: _Budget, verify_run: bool = False) -> None:
    """One timed batch (WARMUP + `repeat` launches), charged to the budget (with the verification
    run before it, the first time). A failure marks the record and drops its batches."""
    if it.rec.status == "failed":
        return
    try:
        stats = measure.time(it.plan, inputs, out, repeat=repeat, warmup=WARMUP)
    except Exception as exc:
        it.rec.status, it.rec.reason = "failed", f"time: {one_line(exc)}"
        it.batches.clear()
        return
    budget.spent += stats.median_ms * (stats.repeats + WARMUP + (1 if verify_run else 0))
    it.batches.append((float(stats.median_ms), float(stats.p20_ms), float(stats.p80_ms), int(stats.repeats)))


def _vendor_reference(measure, op, dgraph, inputs, ran: list[ProbeRecord], outputs: dict):
    """(reference output, its name): the first vendor output another vendor confirms, a lone
    vendor's, or the float64 reference when none ran or none agree. Marks each vendor's error
    against it, and fails those that disagree."""
    for cand in ran:
        others = [r for r in ran if r is not cand]
        errors = [measure.rel_error(outputs[r.name], outputs[cand.name]) for r in others]
        if others and not any(e <= REL_TOLERANCE for e in errors):
            continue
        cand.rel_error = min(errors) if errors else 0.0
        for r, e in zip(others, errors):
            r.rel_error = e
            if not e <= REL_TOLERANCE:
                r.status, r.reason = "failed", f"disagrees with {cand.name} rel_err={e:.2e}"
        return outputs[cand.name], cand.name
    why = "no vendor ran" if not ran else "vendor algorithms disagree"
    reference, name = measure.reference(op, dgraph, inputs), f"float64 reference ({why})"
    for r in ran:
        r.rel_error = measure.rel_error(outputs[r.name], reference)
        if not r.rel_error <= REL_TOLERANCE:
            r.status, r.reason = "failed", f"disagrees with the {name} rel_err={r.rel_error:.2e}"
    return reference, name


def _prepare_and_run(measure, rec: ProbeRecord, prepare, inputs, reference=None):
    """Prepare, run once, verify (when a reference is given). Returns (plan, output) — the plan
    still open, to be timed — or None with the failure recorded (and the plan closed)."""
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
                _close(plan)
                return None
    except Exception as exc:
        rec.status, rec.reason = "failed", f"{stage}: {one_line(exc)}"
        _close(plan)
        return None
    return plan, out


def _close(plan) -> None:
    close = getattr(plan, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass
