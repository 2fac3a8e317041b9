"""Reordering as a decision the scheduler makes per input, like a schedule: for SpMM at width K on
one graph, whether to renumber its vertices (graphs.reorder) and with which method.

  1. Estimate. SpMM at K >= 16 is bound by gathering rows of B through L2, so an order can only
     help when B does not fit in L2, and only as much as it brings each row's columns together.
     The estimate is 1 + the relative drop in locality (mean |i - j| / n), from B's size and the
     locality before and after each candidate order. Calibration (H200, best schedule each):
     products-like-shuffled -> its natural order is a drop of 0.79 (0.333 -> 0.070) for a
     measured 1.74x at K=16 and 1.85x at K=64; RCM's drop of 0.06 (0.333 -> 0.312) measured
     1.15x / 1.09x. A graph that is already local (locality <= LOCAL_ENOUGH) or whose B fits in
     L2 is answered without computing any order.
  2. Confirm. A method predicted to take more than MAX_ORDER_S to compute (ORDER_S_PER_NNZ:
     METIS on a graph of millions of nonzeros) is not run. Each candidate's locality comes from its permutation alone (reorder.
     relabelled_locality); the candidates estimated at >= ESTIMATE_MIN (best first, at most
     MAX_MEASURED) are relabelled (12.7 s each on 124M nonzeros, so only these) and measured: the tuned plan on each order, the reordered result checked against the original
     one permuted (`measure_orders`, a callable; scheduler.reorder_measure is the GPU one, CPU
     tests pass fakes).
  3. Weigh. An order is applied only when it verified, measured at most GUARDRAIL times the
     original's time, and its saving over `expected_calls` calls (a training run's SpMMs) exceeds
     its cost (computing the order and relabelling the graph). Never one that measured slower.
     The relabelling counted is the one the caller's path pays: the host's (what a reordered
     file needs: 1.85-2.8 s on 124M nonzeros) unless the caller passes `relabel`, e.g. the torch
     path, which relabels the Graph already on its GPU (0.02 s there) and hands back its host
     copy to measure. Counting the host's on that path kept products-like-shuffled's 1.83x
     labelprop order out of a 100-call decision.
  4. Store. The decision goes into the decision cache as an entry of op `reorder-<op>` (backend
     "reorder", schedule the method, "identity" when none is applied) under the same device and
     software key as a tune, and the permutation beside the cache as
     `<cache stem>.reorder/<fingerprint>.<method>.npy`, so a cache hit reuses the very order that
     was measured (the community order varies between runs) and `autosage replay` re-checks it
     (scheduler.reorder_measure.replay_entry).
"""
from __future__ import annotations

import io
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ... import cache as cache_mod, dtypes
from ...errors import AutosageError
from ...graphs import reorder as reorder_mod
from ...graphs.csr import CSRGraph

POLICY_VERSION = 1
BACKEND = "reorder"                 # the decision's backend in a cache entry
OPS = ("spmm",)                     # the op whose time a reordering decision is measured on
DEFAULT_METHODS = ("labelprop", "metis", "hubcluster")
GUARDRAIL = 0.95                    # the reordered time must be at most this times the original's
ESTIMATE_MIN = 1.05                 # below this estimated speed-up an order is not measured
MAX_MEASURED = 2
LOCAL_ENOUGH = 0.10                 # products-like's natural order: 0.070; shuffled: 0.333
DEFAULT_CALLS = 100
# What computing an order costs, per stored nonzero, for the methods whose cost grows past what a
# decision can wait for: METIS took 1.1 us at 2M nonzeros and 1.8 us at 8M (growing with size) on
# a 2-core x86 host, i.e. minutes on a 124M-nonzero graph, where a reordering saves seconds over
# a training run; RCM took 12 s on 124M (SciPy, the H200's host). The others (labelprop,
# hubcluster, degree, hubsort on the GPU or vectorised) are not predicted: always run.
ORDER_S_PER_NNZ = {"metis": 1.8e-6, "rcm": 1.0e-7}
MAX_ORDER_S = 10.0                  # a method predicted to take longer is not computed


def cache_op(op: str) -> str:
    return f"{BACKEND}-{op}"


def is_reorder_entry(entry: dict) -> bool:
    return (entry.get("decision") or {}).get("backend") == BACKEND


@dataclass(frozen=True)
class OrderTimes:
    """One measurement of the op on both orders (what `measure_orders` returns)."""
    before_ms: float
    after_ms: float
    before_schedule: str
    after_schedule: str
    rel_error: float
    verified: bool

    @property
    def speedup(self) -> float:
        return self.before_ms / self.after_ms if self.after_ms > 0 else float("inf")


@dataclass
class Candidate:
    method: str
    order_s: float
    apply_s: float
    locality: float
    estimate: float
    times: OrderTimes | None = None
    verdict: str = ""                # why it was or was not applied

    @property
    def cost_s(self) -> float:
        return self.order_s + self.apply_s

    def saving_s(self, calls: int) -> float:
        """Seconds saved over `calls` calls less the cost (negative: not worth it)."""
        if self.times is None:
            return float("-inf")
        return calls * (self.times.before_ms - self.times.after_ms) / 1000.0 - self.cost_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times"] = None if self.times is None else {**asdict(self.times), "speedup": self.times.speedup}
        return d


@dataclass
class ReorderDecision:
    method: str                       # the applied method, or "identity"
    reason: str
    locality: float                   # the original order's
    expected_calls: int
    candidates: list = field(default_factory=list)   # Candidate, or their dicts on a cache hit
    perm: np.ndarray | None = None    # perm[new] = old when applied
    reordered: CSRGraph | None = None # the measured graph; None on a cache hit until relabelled()
    from_cache: bool = False
    key_id: str = ""
    original: CSRGraph | None = field(default=None, repr=False)
    # seconds per phase of deciding (features, candidate orders and their locality, relabelling
    # the measured ones, measuring): where a cold decision's time goes, which its cost leaves out
    timings: dict = field(default_factory=dict)

    @property
    def applied(self) -> bool:
        return self.method != "identity"

    def relabelled(self) -> CSRGraph | None:
        """The reordered host graph: the one measured, or (a cached decision) the original
        relabelled on first use; a caller that applies the order elsewhere (the torch path, on
        its GPU) never pays the host's relabelling (2.8 s on 124M nonzeros)."""
        if self.reordered is None and self.applied and self.original is not None:
            self.reordered = host_relabel(self.original, self.perm, self.method)[0]
        return self.reordered

    def to_dict(self) -> dict:
        return {"method": self.method, "applied": self.applied, "reason": self.reason,
                "locality": self.locality, "expected_calls": self.expected_calls,
                "from_cache": self.from_cache, "timings": dict(self.timings),
                "candidates": [c.to_dict() if isinstance(c, Candidate) else c for c in self.candidates]}


def describe_timings(timings: dict) -> str:
    """A decision's seconds per phase of deciding, as one line ("features 0.43 s, ...")."""
    return ", ".join(f"{name.removesuffix('_s')} {seconds:.2f} s" for name, seconds in timings.items())


def estimate_speedup(n_cols: int, k: int, itemsize: int, l2_bytes: int | None,
                     locality_before: float, locality_after: float) -> float:
    """The expected SpMM speed-up of an order (module docstring, step 1); 1.0 when B fits in L2."""
    if l2_bytes and n_cols * k * itemsize <= l2_bytes:
        return 1.0
    if locality_before <= 0:
        return 1.0
    return 1.0 + max(0.0, (locality_before - locality_after) / locality_before)


def perm_path(cache_path: Path, fingerprint: str, method: str) -> Path:
    return cache_path.parent / f"{cache_path.stem}.reorder" / f"{fingerprint[:32]}.{method}.npy"


def save_perm(path: Path, perm: np.ndarray) -> None:
    """Atomically (a temporary file renamed into place), as the cache itself is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.save(buffer, perm, allow_pickle=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(buffer.getvalue())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_perm(path: Path, n: int) -> np.ndarray:
    try:
        perm = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise AutosageError(f"cannot read the stored permutation {path}: {exc}") from None
    return reorder_mod.check_permutation(perm, n)


def _key(graph, op, k, dtype, methods, calls, device_info, software_info):
    settings = {"policy": POLICY_VERSION, "methods": list(methods), "expected_calls": int(calls),
                "guardrail": GUARDRAIL, "estimate_min": ESTIMATE_MIN}
    return cache_mod.make_key(graph, cache_op(op), k, dtype, 1, device=device_info,
                              software=software_info, settings=settings)


def _candidate(graph: CSRGraph, method: str, symmetric, locality_before, k, itemsize,
               l2_bytes, labeller=None) -> tuple[Candidate, np.ndarray]:
    """The candidate of `method`: its order and the locality that order gives, computed from the
    permutation without relabelling the graph (reorder.relabelled_locality): only a measured
    candidate is relabelled (host_relabel, or the caller's `relabel`), and its apply_s is that
    relabel's."""
    started = time.perf_counter()
    xp = None
    if method in reorder_mod.ARRAY_METHODS and labeller is None:
        from ...backends.arrays import device_module
        xp = device_module()
    perm = reorder_mod.order(graph, method, symmetric=symmetric, xp=xp, labeller=labeller)
    ordered = time.perf_counter()
    after = reorder_mod.relabelled_locality(graph, perm)
    estimate = estimate_speedup(graph.n_cols, k, itemsize, l2_bytes, locality_before, after)
    return Candidate(method, ordered - started, 0.0, after, estimate), perm


def host_relabel(graph: CSRGraph, perm: np.ndarray, method: str) -> tuple[CSRGraph, float]:
    """(P A Pᵀ on the host, the seconds it took): `relabel` when the caller has none of its own."""
    started = time.perf_counter()
    reordered = reorder_mod.permute(graph, perm, {"reordered_from": graph.source, "reorder": method})
    return reordered, time.perf_counter() - started


def _from_entry(graph: CSRGraph, entry: dict, cache_path: Path, key_id: str) -> ReorderDecision:
    info = entry.get("reorder") or {}
    method = entry["decision"]["schedule"]
    decision = ReorderDecision(method, str(info.get("reason", "")), float(info.get("locality", 0.0)),
                               int(info.get("expected_calls", 0)), list(info.get("candidates", [])),
                               from_cache=True, key_id=key_id, original=graph)
    if decision.applied:
        decision.perm = load_perm(cache_path.parent / info["perm"], graph.n_rows)
    return decision


def decide(graph: CSRGraph, k: int, *, measure_orders, cache, op: str = "spmm",
           dtype: str = dtypes.DEFAULT, expected_calls: int = DEFAULT_CALLS,
           methods=DEFAULT_METHODS, l2_bytes: int | None = None, features=None,
           device_info: dict | None = None, software_info: dict | None = None,
           retune: bool = False, say=None, labeller=None, relabel=None) -> ReorderDecision:
    """The reordering decision for `op` at width k on `graph` (module docstring). `measure_orders
    (original, reordered, perm, op, k, dtype) -> OrderTimes`; `cache` a DecisionCache or a path;
    `features` the graph's (computed when None); `l2_bytes` the device's L2 (None: not known,
    no shortcut); `device_info`/`software_info` as for tune (this machine's when None); `labeller`
    labelprop's labels computed by the caller (graphs.reorder.labelprop_order); `relabel(graph,
    perm, method) -> (reordered CSRGraph, seconds)`: a measured order applied on the caller's path,
    the host graph to measure and what applying it cost there (default host_relabel; step 3)."""
    from .. import tune as tune_mod

    say = say or (lambda _m: None)
    if op not in OPS:
        raise AutosageError(f"reordering is decided on {', '.join(OPS)}, not {op!r}")
    if expected_calls < 1:
        raise AutosageError(f"expected calls must be at least 1, got {expected_calls}")
    reorder_mod.require_square(graph)
    methods = tuple(methods)
    for method in methods:
        if method not in reorder_mod.METHODS or method == "identity":
            raise AutosageError(f"unknown reordering method {method!r} "
                                f"(known: {', '.join(m for m in reorder_mod.METHODS if m != 'identity')})")
    if isinstance(cache, (str, os.PathLike)) or cache is None:
        cache = cache_mod.DecisionCache(cache)
    device_info, software_info = tune_mod._machine(device_info, software_info)
    key = _key(graph, op, k, dtype, methods, expected_calls, device_info or {}, software_info)
    if not retune:
        found = cache.find(key)
        if found.entry is not None:
            try:
                decision = _from_entry(graph, found.entry, cache.path, key.id)
                say(f"reordering: cached decision ({decision.method})")
                return decision
            except (AutosageError, KeyError, TypeError, ValueError) as exc:
                say(f"reordering: cached decision unusable ({exc}); deciding again")
        elif found.stale:
            say(found.stale)
    decision = _decide(graph, k, measure_orders, op, dtype, expected_calls, methods, l2_bytes,
                       features, say, labeller, relabel or host_relabel)
    decision.key_id = key.id
    _store(cache, key, graph, op, k, dtype, decision)
    return decision


def _decide(graph, k, measure_orders, op, dtype, calls, methods, l2_bytes, features, say,
            labeller=None, relabel=host_relabel) -> ReorderDecision:
    timings = dict.fromkeys(("features_s", "candidates_s", "relabel_s", "measure_s"), 0.0)
    decision = _decide_timed(graph, k, measure_orders, op, dtype, calls, methods, l2_bytes, features,
                             say, labeller, relabel, timings)
    decision.timings = timings
    return decision


def _decide_timed(graph, k, measure_orders, op, dtype, calls, methods, l2_bytes, features, say,
                  labeller, relabel, timings: dict) -> ReorderDecision:
    from ...features import compute_features

    if features is None:
        # the exact symmetry check transposes the graph (more than the rest of the features on a
        # symmetric graph): only the orders that read it (SYMMETRIC_AWARE) need it
        started = time.perf_counter()
        features = compute_features(graph, symmetry=any(
            m in reorder_mod.SYMMETRIC_AWARE and _not_run(m, graph.nnz) is None for m in methods))
        timings["features_s"] = time.perf_counter() - started
    before = float(features.locality)
    itemsize = dtypes.itemsize(dtype)
    b_bytes = graph.n_cols * k * itemsize
    if l2_bytes and b_bytes <= l2_bytes:
        return ReorderDecision("identity", f"B ({b_bytes / 2**20:.1f} MiB) fits in L2 "
                               f"({l2_bytes / 2**20:.0f} MiB): no order changes what is read from memory",
                               before, calls)
    if before <= LOCAL_ENOUGH:
        return ReorderDecision("identity", f"already local (locality {before:.3f} <= {LOCAL_ENOUGH})",
                               before, calls)
    candidates, orders = [], {}
    for method in methods:
        missing = _not_run(method, graph.nnz)
        if missing:
            candidates.append(Candidate(method, 0.0, 0.0, before, 1.0, verdict=f"not run: {missing}"))
            continue
        say(f"reordering: computing {method}")
        started = time.perf_counter()
        cand, perm = _candidate(graph, method, features.symmetric, before, k, itemsize, l2_bytes, labeller)
        timings["candidates_s"] += time.perf_counter() - started
        candidates.append(cand)
        orders[method] = perm
    ranked = sorted((c for c in candidates if c.method in orders), key=lambda c: -c.estimate)
    measured = 0
    for cand in ranked:
        if cand.estimate < ESTIMATE_MIN:
            cand.verdict = f"estimated {cand.estimate:.2f}x < {ESTIMATE_MIN}: not measured"
            continue
        if measured >= MAX_MEASURED:
            cand.verdict = f"not measured: {MAX_MEASURED} better estimates were"
            continue
        perm = orders[cand.method]
        started = time.perf_counter()
        reordered, cand.apply_s = relabel(graph, perm, cand.method)
        orders[cand.method] = (perm, reordered)
        measured_at = time.perf_counter()
        timings["relabel_s"] += measured_at - started
        say(f"reordering: measuring {op} K={k} on the {cand.method} order")
        cand.times = measure_orders(graph, reordered, perm, op, k, dtype)
        timings["measure_s"] += time.perf_counter() - measured_at
        measured += 1
        cand.verdict = _verdict(cand, calls)
    winners = [c for c in ranked if c.verdict == "applies"]
    if not winners:
        return ReorderDecision("identity", "no order earned its cost: " + "; ".join(
            f"{c.method} {c.verdict}" for c in candidates), before, calls, candidates)
    best = max(winners, key=lambda c: c.saving_s(calls))
    for c in winners:
        if c is not best:
            c.verdict = f"measured a gain, but {best.method} saves more"
    perm, reordered = orders[best.method]
    return ReorderDecision(best.method, f"{best.method}: measured {best.times.speedup:.2f}x, saves "
                           f"{best.saving_s(calls):.2f} s over {calls} calls after its "
                           f"{best.cost_s:.2f} s", before, calls, candidates, perm, reordered)


def _not_run(method: str, nnz: int) -> str | None:
    """Why `method` is not computed on a graph of `nnz` nonzeros (its library missing, or predicted
    over MAX_ORDER_S), or None."""
    predicted = ORDER_S_PER_NNZ.get(method, 0.0) * nnz
    if predicted > MAX_ORDER_S:
        return f"predicted to take {predicted:.0f} s on {nnz} nonzeros (over {MAX_ORDER_S:.0f} s)"
    return reorder_mod.available(method)


def _verdict(cand: Candidate, calls: int) -> str:
    t = cand.times
    if not t.verified:
        return f"measured result did not verify (rel. error {t.rel_error:.1e})"
    if not t.after_ms <= GUARDRAIL * t.before_ms:
        return f"measured {t.speedup:.2f}x, not the {1 / GUARDRAIL:.2f}x it needs"
    if cand.saving_s(calls) <= 0:
        return (f"measured {t.speedup:.2f}x, but {calls} calls save less than its "
                f"{cand.cost_s:.2f} s")
    return "applies"


def _store(cache, key, graph: CSRGraph, op, k, dtype, decision: ReorderDecision) -> None:
    info = decision.to_dict()
    if decision.applied:
        path = perm_path(Path(cache.path), graph.fingerprint, decision.method)
        save_perm(path, decision.perm)
        info["perm"] = str(path.relative_to(Path(cache.path).parent))
        info["reordered_fingerprint"] = decision.reordered.fingerprint
    entry = {"graph": {"fingerprint": graph.fingerprint, "source": graph.source,
                       "n_rows": graph.n_rows, "nnz": graph.nnz},
             "op": key.op, "k": int(k), "heads": 1, "dtype": dtype, "settings": key.settings,
             "decision": {"backend": BACKEND, "schedule": decision.method, "params": {},
                          "reason": decision.reason},
             "reorder": info}
    cache.store(key, entry)
