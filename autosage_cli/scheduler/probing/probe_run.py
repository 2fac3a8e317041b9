"""Where the probe runs, carried out: the policy's plan (policy.py) for one case, on the whole
graph, on a sample confirmed with the vendors on the whole graph, or on a sample whose best of each
family is re-timed on the whole graph without vendors (the family check); and the guardrail on
what it measured (select.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import probe, sample
from ..decisions.select import Decision, decide, decide_checked, family_bests


@dataclass
class Outcome:
    """The probe's records: `natives` and `vendors` are those the decision is made from (on the
    whole graph when it was timed there), `sample_natives` the sample's when it was confirmed
    (those not re-timed). After a family check `vendors` are the sample's, and `checked_on_sample`
    holds the sample's records of the natives re-timed on the whole graph (their guardrail)."""
    natives: list
    vendors: list
    sample_natives: list
    reference: str
    spent_ms: float
    floor_ms: float
    overrun_ms: float
    sample_ms: float
    info: dict
    compile_ms: float = 0.0     # building the probed candidates' kernels (wall ms)
    checked_on_sample: list = field(default_factory=list)


def run_probe(graph, device_graph, case, pplan, vendor_names, target, limits, measure,
               seed, say, clock) -> Outcome:
    """Run the probe `pplan` describes for `case` (ops.Case) within `limits` (budget ms,
    guardrail): the candidates on the whole graph, or on a sample and then its best `pplan.confirm`
    natives with every vendor on the whole graph, or (`pplan.check_families`) the sample's best
    native of each family without vendors. `clock` (phases.PhaseClock) collects where the time
    went, uploads included."""
    op, k, heads, dtype = case.op, case.k, case.heads, case.dtype
    budget_ms, guardrail = limits
    whole = {"graph": "full", "rows": graph.n_rows, "nnz": graph.nnz, "why": pplan.why}
    dgraph = device_graph

    def on_whole(cands, budget, vendors=vendor_names):
        nonlocal dgraph
        if dgraph is None:
            with clock.phase("upload"):
                dgraph = measure.to_device(graph)
        return probe.probe_candidates(dgraph, op, k, heads, cands, vendors, budget, measure=measure,
                                      seed=seed, progress=say, where="full", dtype=dtype, clock=clock)

    if pplan.where == "full":
        r = on_whole(pplan.candidates, budget_ms)
        return Outcome(r.natives, r.vendors, [], r.reference, r.spent_ms,
                        r.floor_ms, r.overrun_ms, 0.0, whole, r.compile_ms)
    t = time.perf_counter()
    say("sampling windows of whole rows")
    probe_graph, _rows = sample.sample_rows(graph, target, seed)
    sample_ms = (time.perf_counter() - t) * 1e3
    s_info = probe_graph.source["sample"]
    info = {"graph": "sample", **{f: s_info[f] for f in ("rows", "nnz", "target_nnz", "window", "seed")},
            "why": pplan.why}
    with clock.phase("upload"):
        sample_dgraph = measure.to_device(probe_graph)
    rs = probe.probe_candidates(sample_dgraph, op, k, heads, pplan.candidates, vendor_names,
                                budget_ms, measure=measure, seed=seed, progress=say, where="sample",
                                dtype=dtype, clock=clock)
    best = sorted((r for r in rs.natives if r.ok), key=lambda r: r.ms)[:pplan.confirm]
    vendors, checked = vendor_names, {}
    if pplan.check_families and not best:
        best = family_bests(rs.natives, rs.vendors, guardrail, pplan.check_families)
        vendors, checked = (), {"vendors_on": "sample"}   # the guardrail stays the sample's
    if len(best) < (2 if checked else 1):     # one family alone has nothing to tell apart
        return Outcome(rs.natives, rs.vendors, [], rs.reference, rs.spent_ms,
                        rs.floor_ms, rs.overrun_ms, sample_ms, info, rs.compile_ms)
    by_name = {s.name: (s, est) for s, est in pplan.candidates}
    confirm = [by_name[r.name] for r in best]
    say(f"confirming the sample's best {len(confirm)} on the whole graph"
        + ("" if vendors else ", one of each family, without vendors"))
    rf = on_whole(confirm, max(budget_ms - rs.spent_ms, 0.0), vendors)
    confirmed = {r.name for r in rf.natives}
    rest = [r for r in rs.natives if r.name not in confirmed]
    return Outcome(rf.natives, rf.vendors if vendors else rs.vendors, rest, rf.reference,
                    rs.spent_ms + rf.spent_ms, rs.floor_ms + rf.floor_ms,
                    max(0.0, rs.spent_ms + rf.spent_ms - budget_ms), sample_ms,
                    {**info, "confirmed_on": "full", "confirmed": len(confirm), **checked},
                    rs.compile_ms + rf.compile_ms, best if checked else [])


def decide_outcome(outcome, guardrail: float) -> Decision:
    """The guardrail on the probe's records; after a family check, on the sample's vendors."""
    if outcome.info.get("vendors_on") == "sample":
        return decide_checked(outcome.natives, outcome.checked_on_sample, outcome.vendors, guardrail)
    return decide(outcome.natives, outcome.vendors, guardrail)
