"""Replay recorded decisions: reload each entry's graph from its recorded source, check the
fingerprint, run the decision without probing, verify it against a vendor algorithm and time it.

`dry_run` stops after the fingerprint check, so it needs no GPU: it proves the file is readable,
every graph can be found again and is the same graph, and lists the decisions.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ... import dtypes, ops as op_specs
from ...errors import AutosageError
from ...graphs.csr import replayable_source
from ..probing import probe
from ..probing.measure import GpuMeasurer
from .reorder_decision import is_reorder_entry
from ..tune import plan_for

FAILING = ("failed", "mismatched", "missing", "invalid")
REPLAY_REPEAT, REPLAY_WARMUP = 20, 3


@dataclass
class ReplayOutcome:
    id: str
    graph: str
    op: str
    k: int
    heads: int
    backend: str
    schedule: str
    status: str                       # "ok" | "checked" (dry run) | "skipped" | one of FAILING
    reason: str = ""
    recorded_ms: float | None = None  # the chosen backend's probe time when tuned
    recorded_on: str = ""             # "sample" or "full"
    replayed_ms: float | None = None
    rel_error: float | None = None
    reference: str = ""
    dtype: str = dtypes.DEFAULT

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    def to_dict(self) -> dict:
        return asdict(self)


def graph_label(source: dict) -> str:
    if not source:
        return "?"
    if "dataset" in source:
        return str(source["dataset"])
    if "path" in source:
        return str(source["path"])
    if "generator" in source:
        return f"{source['generator']} seed={source.get('seed', 0)}"
    return json.dumps(source, sort_keys=True)


def located(source: dict, cache_path) -> dict:
    """`source` with a path recorded relative to its cache's folder (`beside_cache`: the graphs
    scheduler.decisions.kinds saves for replay) made absolute."""
    if source.get("beside_cache") and "path" in source:
        from pathlib import Path

        return {**source, "path": str(Path(cache_path).parent / source["path"])}
    return source


def _load_source(source: dict):
    from ...graphs.load import load_source
    return load_source(source)


def _outcome(entry: dict) -> ReplayOutcome:
    d = entry["decision"]
    chosen = d.get("native_ms") if d["backend"] == "native" else d.get("vendor_ms")
    return ReplayOutcome(entry.get("id", "?"), graph_label(entry["graph"].get("source") or {}),
                         entry["op"], int(entry["k"]), int(entry.get("heads", 1)), d["backend"],
                         d["schedule"], "pending", recorded_ms=chosen,
                         recorded_on=(entry.get("probe") or {}).get("graph", ""),
                         dtype=entry_dtype(entry))


def entry_dtype(entry: dict) -> str:
    """The dtype an entry was tuned for; entries from before dtypes were recorded are float32."""
    return str(entry.get("dtype") or dtypes.DEFAULT)


def _reference_vendor(entry: dict) -> str | None:
    """The fastest recorded vendor algorithm other than the decision itself."""
    own = entry["decision"]["schedule"]
    ok = [v for v in entry.get("vendor", []) if v.get("status") == "ok"
          and isinstance(v.get("ms"), (int, float)) and v["name"] != own]
    return min(ok, key=lambda v: v["ms"])["name"] if ok else None


def replay(cache, dry_run: bool = False, measure=None, progress=None, load=None,
           seed: int = 0, dtype: str | None = None, measure_orders=None) -> list[ReplayOutcome]:
    """One outcome per cache entry (oldest first), or per entry of `dtype` when given. Never
    raises for a single bad entry. Reordering decisions (scheduler.decisions.reorder_decision) are re-checked
    by `replay_reorder` with `measure_orders` (an OrderMeasurer on this cache and `measure` when
    None)."""
    say = progress or (lambda _msg: None)
    load = load or _load_source
    graphs: dict[str, object] = {}
    devices: dict[str, object] = {}
    outcomes = []
    for entry in cache.entries():
        if dtype is not None and entry_dtype(entry) != dtype:
            continue
        try:
            out = _outcome(entry)
        except (KeyError, TypeError, ValueError) as exc:
            outcomes.append(ReplayOutcome(str(entry.get("id", "?")), "?", str(entry.get("op", "?")),
                                          0, 0, "?", "?", "invalid", f"malformed entry: {probe.one_line(exc)}"))
            continue
        outcomes.append(out)
        source = located(entry["graph"].get("source") or {}, getattr(cache, "path", "."))
        if not entry.get("replayable", replayable_source(source)):
            out.status = "skipped"
            out.reason = f"not replayable: the graph was built in memory ({graph_label(source)})"
            continue
        if is_reorder_entry(entry):
            if measure_orders is None and not dry_run:
                from ..probing.reorder_measure import OrderMeasurer
                measure_orders = OrderMeasurer(cache, measure)
            say(f"replay {out.graph} reordering for {out.op} K={out.k}: {out.schedule}")
            replay_reorder(entry, out, source, graphs, load, getattr(cache, "path", "."),
                           measure_orders, dry_run)
            continue
        unsupported = _unsupported_dtype(out)
        if unsupported:
            out.status, out.reason = "skipped", unsupported
            continue
        src_key = json.dumps(source, sort_keys=True)
        say(f"replay {out.graph} {out.op} K={out.k}: {out.schedule}")
        graph = _graph_of(source, graphs, load)
        if isinstance(graph, AutosageError):
            out.status, out.reason = "missing", f"graph not found: {graph}"
            continue
        recorded = entry["graph"].get("fingerprint")
        if graph.fingerprint != recorded:
            out.status = "mismatched"
            out.reason = f"graph fingerprint {graph.fingerprint[:12]} != recorded {str(recorded)[:12]}"
            continue
        if dry_run:
            out.status, out.reason = "checked", "graph found, fingerprint matches"
            continue
        measure = measure or GpuMeasurer()
        if src_key not in devices:
            devices[src_key] = measure.to_device(graph)
        _replay_one(measure, devices[src_key], entry, out, seed)
    return outcomes


def _unsupported_dtype(out: ReplayOutcome) -> str | None:
    """Why this version cannot run the entry's dtype, or None."""
    try:
        op_specs.require_dtype(out.op, out.dtype)
    except AutosageError as exc:
        return str(exc)
    return None


def _replay_one(measure, dgraph, entry: dict, out: ReplayOutcome, seed: int) -> None:
    stage = "prepare"
    try:
        inputs = measure.inputs(dgraph, out.op, out.k, out.heads, seed, out.dtype)
        plan = plan_for(dgraph, entry["decision"], out.k, out.heads, measure=measure, dtype=out.dtype,
                        op=out.op)
        stage = "run"
        result = measure.run(plan, inputs)
        stage = "verify"
        ref_name = _reference_vendor(entry)
        if ref_name is None:
            ref, out.reference = measure.reference(out.op, dgraph, inputs, dtype=out.dtype), "float64 reference"
        else:
            ref_plan = measure.prepare_vendor(dgraph, ref_name, out.k, out.heads, None, out.dtype)
            ref, out.reference = measure.run(ref_plan, inputs), ref_name
        out.rel_error = measure.rel_error(result, ref)
        longest = int(dgraph.host.row_degrees().max(initial=0))
        bound = op_specs.case_tolerance(out.op, out.dtype, out.k, longest)
        if not out.rel_error <= bound:
            out.status = "failed"
            out.reason = f"mismatch rel_err={out.rel_error:.2e} vs {out.reference}"
            return
        stage = "time"
        stats = measure.time(plan, inputs, result, repeat=REPLAY_REPEAT, warmup=REPLAY_WARMUP)
        out.replayed_ms = float(stats.median_ms)
        out.status, out.reason = "ok", f"verified against {out.reference}"
    except Exception as exc:   # one entry's failure is an outcome; the others still replay
        out.status, out.reason = "failed", f"{stage}: {probe.one_line(exc)}"


def _graph_of(source: dict, graphs: dict, load):
    """The graph of `source`, loaded once per replay (an AutosageError when it cannot be)."""
    src_key = json.dumps(source, sort_keys=True)
    if src_key not in graphs:
        try:
            graphs[src_key] = load(source) if source else AutosageError("no recorded graph source")
        except AutosageError as exc:
            graphs[src_key] = exc
    return graphs[src_key]


def replay_reorder(entry: dict, out: ReplayOutcome, source: dict, graphs: dict, load, cache_path,
                   measure_orders, dry_run: bool) -> None:
    """Re-check a reordering decision: the original graph is the recorded one, the stored
    permutation is a permutation of it and gives the recorded reordered graph (dry run: stop
    here); then both orders are measured again, and an applied order that no longer measures
    faster than the original, or no longer verifies, fails."""
    from pathlib import Path

    from ...graphs import reorder as reorder_mod
    from .reorder_decision import load_perm

    info = entry.get("reorder") or {}
    times = [c.get("times") for c in info.get("candidates", []) if isinstance(c, dict)
             and c.get("method") == out.schedule and c.get("times")]
    out.recorded_ms = times[0].get("after_ms") if times else None
    graph = _graph_of(source, graphs, load)
    if isinstance(graph, AutosageError):
        out.status, out.reason = "missing", f"graph not found: {graph}"
        return
    if graph.fingerprint != entry["graph"].get("fingerprint"):
        out.status = "mismatched"
        out.reason = (f"graph fingerprint {graph.fingerprint[:12]} != recorded "
                      f"{str(entry['graph'].get('fingerprint'))[:12]}")
        return
    if out.schedule == "identity":
        out.status, out.reason = ("checked" if dry_run else "ok"), f"not reordered: {info.get('reason', '')}"
        return
    try:
        perm = load_perm(Path(cache_path).parent / str(info.get("perm", "")), graph.n_rows)
        reordered = reorder_mod.permute(graph, perm)
    except (AutosageError, KeyError) as exc:
        out.status, out.reason = "missing", f"permutation: {probe.one_line(exc)}"
        return
    if reordered.fingerprint != info.get("reordered_fingerprint"):
        out.status, out.reason = "mismatched", "the stored permutation gives another reordered graph"
        return
    if dry_run:
        out.status, out.reason = "checked", "graph found, permutation gives the recorded reordered graph"
        return
    try:
        t = measure_orders(graph, reordered, perm, entry["op"].removeprefix("reorder-"), out.k, out.dtype)
    except Exception as exc:   # one entry's failure is an outcome; the others still replay
        out.status, out.reason = "failed", f"measure: {probe.one_line(exc)}"
        return
    out.replayed_ms, out.rel_error = t.after_ms, t.rel_error
    if not t.verified:
        out.status, out.reason = "failed", f"reordered result does not verify (rel. error {t.rel_error:.1e})"
    elif not t.after_ms < t.before_ms:
        out.status = "failed"
        out.reason = f"reordering no longer gains: {t.after_ms:.4g} ms vs {t.before_ms:.4g} ms"
    else:
        out.status, out.reason = "ok", f"reordered {t.speedup:.2f}x faster ({t.before_ms:.4g} ms before)"
