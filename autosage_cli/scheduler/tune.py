"""Tuning, end to end: cache lookup -> features -> estimate (rank) -> probe top-k on a degree-
preserving sample -> guardrail -> store. A cache hit runs no probe and says so. `plan_for` turns a
decision (fresh or cached) into a runnable Plan without probing; the API and `autosage replay` use it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import cache as cache_mod, dtypes, ops as op_specs
from ..errors import AutosageError
from ..graphs.csr import replayable_source
from ..kernels import compile as kcompile, schedule as schedule_mod
from ..ops.cost import roofline
from . import estimate, tune_features
from .probing import phases, policy, probe, sample
from .tune_features import features_version  # noqa: F401  (the CLI's graph memo checks it)
from .probing.measure import GpuMeasurer
from .decisions.plans import (plan_for, schedule_of_decision)  # noqa: F401  (a decision to a plan; API and replay)
from .probing.probe_run import decide_outcome, run_probe
from .decisions.select import DEFAULT_GUARDRAIL, Decision

DEFAULT_TOP_K = 12      # the most candidates a probe times; the budget may allow fewer (policy.py)
# Bumped when the way a decision is reached changes (sampling, screening, confirmation): a decision
# cached under another policy is re-tuned, with a message saying so.
POLICY_VERSION = 5


def validate_options(op: str, k: int, heads: int = 1, top_k: int = DEFAULT_TOP_K,
                     budget_ms: float = probe.DEFAULT_BUDGET_MS,
                     guardrail: float = DEFAULT_GUARDRAIL, dtype: str = dtypes.DEFAULT) -> None:
    """AutosageError (one line) for the first bad option; needs no GPU."""
    spec = op_specs.get(op)
    if k is None or int(k) < 1:
        raise AutosageError(f"--width (K) must be >= 1, got {k}")
    op_specs.check_heads(op, heads)
    if int(top_k) < 1:
        raise AutosageError(f"--top-k must be >= 1, got {top_k}")
    if not budget_ms > 0:
        raise AutosageError(f"--budget-ms must be > 0, got {budget_ms}")
    if not 0 < guardrail <= 1:
        raise AutosageError(f"--guardrail must be in (0, 1], got {guardrail}")
    spec.require_dtype(dtype)


@dataclass
class TuneResult:
    decision: Decision
    cache_hit: bool
    candidates: list[dict]          # every ranked native schedule: estimate, probe ms, error, status
    vendor: list[dict]              # every vendor algorithm on the probe graph
    timings: dict                   # fingerprint_ms, features_ms, estimate_ms, sample_ms, compile_ms
                                    # (modules_prebuilt: loaded from install-time cubins, modules_compiled),
                                    # probe_ms (without compile_ms), probe_gpu_ms, its split
                                    # probe_<phase>_ms (phases.PHASES, then probe_other_ms),
                                    # tune_ms (total less fingerprint and features), total_ms;
                                    # a cache hit: lookup_ms, total_ms
    entry: dict                     # the cache entry (stored, or found)
    key_id: str | None = None
    cache_path: str | None = None
    messages: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return self.decision.reason

    @property
    def probes_run(self) -> int:
        return 0 if self.cache_hit else sum(1 for c in self.candidates + self.vendor
                                            if c.get("status") in ("ok", "failed"))

    def to_json(self) -> dict:
        e = self.entry
        return cache_mod.jsonable({
            "decision": self.decision.to_dict(), "reason": self.reason, "cache_hit": self.cache_hit,
            "candidates": self.candidates, "vendor": self.vendor, "timings": self.timings,
            "graph": e.get("graph"), "op": e.get("op"), "k": e.get("k"), "heads": e.get("heads"),
            "dtype": e.get("dtype"), "probe": e.get("probe"), "reference": e.get("reference"),
            "cache": self.cache_path, "key": self.key_id, "messages": self.messages,
            "probes_run": self.probes_run})


def _key(graph, op, k, heads, dtype, device_info, software_info, settings):
    return cache_mod.make_key(graph, op, k, dtype, heads, device=device_info or {}, software=software_info,
                              settings=settings)


def recall(graph, op: str, k: int, heads: int = 1, *, cache, top_k: int = DEFAULT_TOP_K,
           budget_ms: float = probe.DEFAULT_BUDGET_MS, guardrail: float = DEFAULT_GUARDRAIL,
           full: bool = False, dtype: str = dtypes.DEFAULT, sample_nnz: int | None = None,
           progress=None, device_info: dict | None = None,
           software_info: dict | None = None) -> TuneResult | None:
    """The cached decision `tune` would return for these arguments, or None (a miss or a stale
    entry: then `tune` decides, and says why). `graph` needs only `fingerprint` (a
    graphs.memo.GraphSummary will do), so a hit never loads the graph."""
    validate_options(op, k, heads, top_k, budget_ms, guardrail, dtype)
    t0 = time.perf_counter()
    device_info, software_info = _machine(device_info, software_info)
    settings = decision_settings(top_k, budget_ms, guardrail, sample_nnz, full)
    key = _key(graph, op, k, heads, dtype, device_info, software_info, settings)
    found = cache.find(key)
    if found.entry is None:
        return None
    return _cache_hit(found.entry, key, cache, (time.perf_counter() - t0) * 1e3,
                      progress or (lambda _msg: None))


def _environment():
    from .. import environment
    return environment.device_info(), environment.software_info()


def machine() -> tuple[dict | None, dict]:
    """This machine's device and software descriptions, as a tune's cache key records them."""
    return _machine(None, None)


def _machine(device_info: dict | None, software_info: dict | None) -> tuple[dict | None, dict]:
    """This machine's device and software descriptions where not given; the software always
    carries the hash of the cuda/ sources (a changed kernel must re-tune)."""
    if device_info is None or software_info is None:
        dev, soft = _environment()
        device_info = device_info if device_info is not None else dev
        software_info = software_info if software_info is not None else soft
    if software_info.get("cuda_sources") is None:
        from ..cuda_sources import sources_hash
        software_info = {**software_info, "cuda_sources": sources_hash()}
    return device_info, software_info


def _features_dict(features) -> dict:
    to_dict = getattr(features, "to_dict", None)
    return to_dict() if callable(to_dict) else dict(vars(features))


def _not_probed(schedule, est_ms: float, rank: int, top_k: int) -> dict:
    return probe.ProbeRecord(name=schedule.name, backend="native", estimate_ms=est_ms, status="skipped",
                             reason=f"not probed: estimate rank {rank}, top-k {top_k}",
                             params=schedule.params()).to_dict()


def tune(graph, op: str, k: int, heads: int = 1, *, cache=None, top_k: int = DEFAULT_TOP_K,
         budget_ms: float = probe.DEFAULT_BUDGET_MS, guardrail: float = DEFAULT_GUARDRAIL,
         full: bool = False, progress=None, measure=None, dtype: str = dtypes.DEFAULT, seed: int = 0,
         sample_nnz: int | None = None, device_info: dict | None = None,
         software_info: dict | None = None, features=None, device_graph=None,
         retune: bool = False) -> TuneResult:
    """Decide how to run `op` on `graph` at width k (d for attention) with `heads`.

    `cache` is a cache.DecisionCache (None: no caching); `retune` ignores a cached entry (and
    replaces it). `measure` is the probe's Measurer (the GPU one by default). `device_info`/
    `software_info` default to this machine's; `features` to compute_features(graph);
    `device_graph` is `graph` already on the device (the bench has it), else it is copied."""
    validate_options(op, k, heads, top_k, budget_ms, guardrail, dtype)
    say = progress or (lambda _msg: None)
    t0, built_before = time.perf_counter(), len(kcompile.compiled_log())
    measure = measure if measure is not None else _gpu_measurer()
    device_info, software_info = _machine(device_info, software_info)
    settings = decision_settings(top_k, budget_ms, guardrail, sample_nnz, full)
    t = time.perf_counter()
    key = _key(graph, op, k, heads, dtype, device_info, software_info, settings)
    fingerprint_ms = (time.perf_counter() - t) * 1e3   # hashes the whole graph unless already known
    messages: list[str] = []
    cache_path = str(cache.path) if cache is not None else None

    hit = _lookup(cache, key, retune, t0, say, messages)
    if hit is not None:
        return hit

    op_specs.check_graph_values(op, graph, dtype)
    features, features_ms, device_graph = tune_features.for_tune(graph, features, device_graph, measure, say)

    t = time.perf_counter()
    dev = roofline.device_model(device_info)
    ranked = estimate.rank(features, op, k, heads, dev, dtype=dtype)
    if not ranked:
        messages.append(f"no registered {op} schedule supports K={k}, heads={heads} in {dtype}")
    vendor_names = measure.vendor_names(op)
    target = sample.default_target_nnz(graph) if sample_nnz is None else int(sample_nnz)
    vendor_ms = estimate.estimate_vendor_ms(features, op, k, heads, dev, dtype)
    pplan = policy.plan_probe(ranked, top_k, budget_ms, vendor_ms,
                              len(vendor_names), full_forced=full,
                              whole_is_sample=_whole_graph_reason(graph, target))
    estimate_ms = (time.perf_counter() - t) * 1e3
    say(pplan.why)

    t = time.perf_counter()
    clock = phases.PhaseClock()
    with clock.timing_imports():    # a vendor's first use of torch or nvmath is timed as imports
        outcome = run_probe(graph, device_graph, op_specs.Case(op, k, heads, dtype), pplan, vendor_names, target,
                             (budget_ms, guardrail), measure, seed, say, clock)
    split = _probe_split(outcome, clock, (time.perf_counter() - t) * 1e3, built_before)

    if outcome.overrun_ms > 0:
        messages.append(_overrun_note(budget_ms, outcome.overrun_ms))
    decision = decide_outcome(outcome, guardrail)
    say(f"decision: {decision.schedule} ({decision.reason})")
    probed = {r.name for r in outcome.natives + outcome.sample_natives}
    candidates = [r.to_dict() for r in outcome.natives + outcome.sample_natives] + [
        _not_probed(s, ms, i + 1, len(pplan.candidates)) for i, (s, ms) in enumerate(ranked)
        if s.name not in probed]
    vendor = [r.to_dict() for r in outcome.vendors]
    total_ms = (time.perf_counter() - t0) * 1e3
    # tune_ms: the tuning itself, without hashing the graph and computing its features, which a
    # caller that has them (the benchmark: once per graph) does not pay per tune.
    timings = {"fingerprint_ms": fingerprint_ms, "features_ms": features_ms, "estimate_ms": estimate_ms,
               **split, "tune_ms": total_ms - fingerprint_ms - features_ms, "total_ms": total_ms}
    entry = {
        "graph": {"fingerprint": graph.fingerprint, "source": dict(graph.source),
                  "n_rows": graph.n_rows, "n_cols": graph.n_cols, "nnz": graph.nnz},
        "replayable": replayable_source(graph.source),
        "op": op, "k": int(k), "dtype": dtype, "heads": int(heads), "settings": settings,
        "decision": decision.to_dict(), "reason": decision.reason,
        "candidates": candidates, "vendor": vendor, "reference": outcome.reference,
        "probe": _probe_info(outcome, pplan, budget_ms, top_k, guardrail),
        "features": _features_dict(features), "timings": timings, "tuned_at": cache_mod.now_iso(),
    }
    if cache is not None:
        records = [dict(r, role="native") for r in candidates if r.get("status") != "skipped"]
        entry = cache.store(key, entry, probe_records=records + [dict(r, role="vendor") for r in vendor])
    return TuneResult(decision, False, candidates, vendor, timings, entry, key.id, cache_path, messages)


def _probe_split(outcome, clock, wall_ms: float, built_before: int) -> dict:
    """The probe's timings: sampling, compiling (and the modules this tune built after the first
    `built_before` of the process's log: kernels.compile.module_counts), the rest (probe_ms), the
    GPU time the budget counted and the rest's phases (phases.PhaseClock.timings)."""
    probe_ms = wall_ms - outcome.compile_ms
    return {"sample_ms": outcome.sample_ms, "compile_ms": outcome.compile_ms, **kcompile.module_counts(built_before),
            "probe_ms": probe_ms,
            "probe_gpu_ms": outcome.spent_ms, **clock.timings(probe_ms - outcome.sample_ms)}


def _overrun_note(budget_ms: float, overrun_ms: float) -> str:
    return (f"probe overran its {budget_ms:g} ms budget by {overrun_ms:.0f} ms of GPU time "
            f"(every verified candidate and vendor is screened with one timed launch)")


def _gpu_measurer():
    from ..capability import require_gpu
    require_gpu("tuning")
    return GpuMeasurer()


def _lookup(cache, key, retune: bool, t0: float, say, messages: list) -> TuneResult | None:
    """The cached decision (a hit ends the tune), or None with why an entry was not used noted."""
    if cache is not None and not retune:
        found = cache.find(key)
        if found.entry is not None:
            return _cache_hit(found.entry, key, cache, (time.perf_counter() - t0) * 1e3, say)
        if found.stale:
            messages.append(found.stale)
            say(found.stale)
    elif retune:
        messages.append("--retune: the cached decision (if any) is ignored and replaced")
    return None


def _probe_info(outcome, pplan, budget_ms: float, top_k: int, guardrail: float) -> dict:
    """What the entry records about the probe: where it ran, its plan, budget and spending."""
    return {**outcome.info, "plan": pplan.to_dict(), "budget_ms": budget_ms, "top_k": top_k,
            "guardrail": guardrail, "spent_ms": outcome.spent_ms, "floor_ms": outcome.floor_ms,
            "overrun_ms": outcome.overrun_ms, "min_repeats": probe.MIN_REPEATS,
            "screen_ratio": probe.SCREEN_RATIO}


def _whole_graph_reason(graph, target: int) -> str | None:
    if not sample.probes_whole_graph(graph, target):
        return None
    return (f"small graph: a sample of {target} nonzeros would hold >= "
            f"{sample.WHOLE_GRAPH_SHARE:.0%} of the graph")


def decision_settings(top_k: int, budget_ms: float, guardrail: float, sample_nnz: int | None,
                      full: bool) -> dict:
    """Every setting that can change a decision, as the cache key records it: a cached decision
    made under other settings is stale (and says which setting changed)."""
    return {"top_k": int(top_k), "budget_ms": float(budget_ms), "guardrail": float(guardrail),
            "sample_nnz": None if sample_nnz is None else int(sample_nnz), "full": bool(full),
            "policy": POLICY_VERSION, "space": schedule_mod.space_version()}


def _cache_hit(e: dict, key, cache, lookup_ms: float, say) -> TuneResult:
    say(f"cache hit ({cache.path}): no probe run")
    return TuneResult(Decision.from_dict(e["decision"]), True, e.get("candidates", []),
                      e.get("vendor", []), {"lookup_ms": lookup_ms, "total_ms": lookup_ms},
                      e, key.id, str(cache.path), ["cache hit: no probe run"])


def vendor_default(op: str) -> Decision:
    """The decision when tuning is off and nothing is cached: the op's untuned vendor entry
    (what framework users get), unverified and unprobed, and said so."""
    name = op_specs.untuned_vendor(op)
    return Decision(name, name, f"{name}: no cached decision and tuning is off (tune=False)",
                    None, None, None)


def lookup_or_tune(graph, op: str, k: int, heads: int = 1, *, cache=None, tune: bool = True,
                   **tune_kwargs) -> TuneResult:
    """For the API: the cached decision for this input, tuning (and storing) on a miss; with
    tune=False a miss gives the vendor default instead (nothing stored). `cache` is a
    DecisionCache or a path; None means the default cache file."""
    if cache is None or isinstance(cache, (str, bytes)) or hasattr(cache, "__fspath__"):
        cache = cache_mod.DecisionCache(cache)
    if tune:
        return run_tune(graph, op, k, heads, cache=cache, **tune_kwargs)
    dtype = tune_kwargs.get("dtype", dtypes.DEFAULT)
    validate_options(op, k, heads, dtype=dtype)
    device_info, software_info = _machine(tune_kwargs.get("device_info"), tune_kwargs.get("software_info"))
    key = cache_mod.make_key(graph, op, k, dtype, heads,
                             device=device_info or {}, software=software_info)
    found = cache.find(key)
    if found.entry is not None:
        e = found.entry
        return TuneResult(Decision.from_dict(e["decision"]), True, e.get("candidates", []),
                          e.get("vendor", []), {}, e, key.id, str(cache.path), ["cache hit: no probe run"])
    decision = vendor_default(op)
    return TuneResult(decision, False, [], [], {}, {"decision": decision.to_dict()}, key.id,
                      str(cache.path), [m for m in (found.stale,) if m])


run_tune = tune   # `tune` is also lookup_or_tune's flag
