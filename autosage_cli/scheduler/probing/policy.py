"""Where the probe runs, and how many candidates it times: the whole graph whenever that fits the
budget, else a sample whose best few are confirmed on the whole graph.

Why the whole graph first. On the H200 (scripts/scale_study.py: every schedule timed on the full
graph and on the 4% sample, 62 SpMM/SDDMM cases on graphs of 16M-124M nonzeros) the sample's ranking
was the problem, not the estimate's: the sample keeps the heaviest rows, and a kernel that gives one
group to a row then waits on that hub in a launch 25x shorter than the full graph's, where it would
have overlapped thousands of other rows. Choosing from the sample landed within 5% of the exhaustive
best in 71% of those cases (worst 2.2x); taking the estimate's top 12 and timing them on the whole
graph reached it in all 62. Re-timing the sample's best 3 on the whole graph did not rescue the
sample (82%): the right schedule was rarely among them. So the sample is kept only for inputs where
timing the top candidates on the whole graph would cost more than the budget (attention with many
heads on 100M-edge graphs), and its best few are confirmed on the whole graph when that fits.

When even that does not fit, the vendors are what make it expensive: at H = 8 on a 124M-edge
graph a cuSPARSE composition runs 0.2-1.2 s a launch, our kernels 40-80 ms. The sample still
decides the guardrail (ours against the vendors, a 10-30x gap there), but the sample's bias is by
family: on the H200 (attention, d = 64, H = 8, products-like) it put a row-per-group `fused`
kernel 2-3x behind a `fused_split` one that the whole graph ran 1.1x slower, so the sample's
choice lost 7-9%. So the sample's best of each family (up to FAMILY_CHECK) is re-timed on the
whole graph without vendors, verified against the float64 reference, when that costs at most
FAMILY_CHECK_FACTOR x the budget: one launch of each family tells them apart.

Cost of a whole-graph probe, predicted before anything runs. The estimate's absolute times ran
0.6-0.85x the measured full-graph times in that study, so a launch is predicted at
estimate x NATIVE_CALIBRATION; vendors at their rough estimate x VENDOR_CALIBRATION. Every vendor
and every native candidate pays a screening pass of two launches (verify, then one timed launch
the verification run warms up) and the survivors of its screen MIN_REPEATS - 1 more after a
warm-up. The probe then plans the survivors' timings from their measured launch, within what is
left of the budget (probe._affordable), so the prediction only decides how many candidates run.

The budget against the 1 s cold-tune target (features + probe per (op, K) on 100M-edge graphs,
H200, 02a7334): features ~0.2-0.26 s; the probe's host work (preparing, verifying, picking the
reference) ~0.1-0.4 s; so ~0.6 s of timed GPU work (probe.DEFAULT_BUDGET_MS), where 1 s was spent
in full by every case up to K=128 (the budget's leftover bought up to 20 repeats a plan).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import estimate

NATIVE_CALIBRATION = 1.6      # measured full-graph ms / estimate_ms, upper quartile, H200 study
VENDOR_CALIBRATION = 2.0      # the vendor estimate is rougher (no per-algorithm model)
SCREEN_LAUNCHES = 2           # verify + one timed launch, every candidate (the verify run warms it up)
VENDOR_SCREEN_LAUNCHES = 2    # verify + one timed launch, every vendor (the verify run warms it up)
SURVIVORS = 3                 # natives expected to pass the screen...
VENDOR_SURVIVORS = 2          # ...and vendors (cuSPARSE's default is one of its algorithms)
SURVIVOR_LAUNCHES = 3         # a survivor's second batch: warm-up + MIN_REPEATS - 1 timed launches
CONFIRM_LAUNCHES = SCREEN_LAUNCHES + SURVIVOR_LAUNCHES
MIN_FULL_CANDIDATES = 4       # fewer than this on the whole graph: sample instead
CONFIRM = 3                   # sample path: the sample's best natives re-timed on the whole graph
FAMILY_CHECK = 3              # sample only: the most families whose sample best is re-timed...
FAMILY_CHECK_FACTOR = 4.0     # ...when that costs at most this x the budget (the decision is cached:
                              # a few launches once against every later run of a 7-9% slower kernel)
REFERENCE_LAUNCHES = 3        # the float64 reference's cost, in launches of the fastest candidate


@dataclass
class ProbePlan:
    """What the probe will do: `where` is "full" (the candidates timed on the whole graph) or
    "sample" (timed on a sample; the best `confirm` natives and every vendor then re-timed on the
    whole graph, 0 when even that does not fit; then the sample's best of up to `check_families`
    families are re-timed there without vendors)."""
    where: str
    candidates: list                 # [(Schedule, estimate_ms)] in estimate order
    confirm: int
    predicted_ms: float              # predicted GPU time of the whole-graph part
    why: str
    check_families: int = 0

    def to_dict(self) -> dict:
        return {"where": self.where, "candidates": len(self.candidates), "confirm": self.confirm,
                "check_families": self.check_families,
                "predicted_full_ms": round(self.predicted_ms, 3), "why": self.why}


def native_launch_ms(est_ms: float) -> float:
    return est_ms * NATIVE_CALIBRATION


def vendor_cost_ms(vendor_est_ms: float, n_vendors: int) -> float:
    launches = n_vendors * VENDOR_SCREEN_LAUNCHES + min(VENDOR_SURVIVORS, n_vendors) * SURVIVOR_LAUNCHES
    return launches * vendor_est_ms * VENDOR_CALIBRATION


def full_probe_cost_ms(chosen, vendor_est_ms: float, n_vendors: int) -> float:
    """Predicted GPU ms of timing `chosen` [(Schedule, est)] and every vendor on the whole graph."""
    if not chosen:
        return vendor_cost_ms(vendor_est_ms, n_vendors)
    screen = sum(SCREEN_LAUNCHES * native_launch_ms(ms) for _, ms in chosen)
    fastest = min(ms for _, ms in chosen)
    survivors = min(SURVIVORS, len(chosen)) * SURVIVOR_LAUNCHES * native_launch_ms(fastest)
    return vendor_cost_ms(vendor_est_ms, n_vendors) + screen + survivors


def confirm_cost_ms(ranked, vendor_est_ms: float, n_vendors: int) -> float:
    """Predicted GPU ms of re-timing CONFIRM natives (priced at the slowest of the estimate's top
    CONFIRM, with every launch of a survivor) and every vendor on the whole graph."""
    head = ranked[:CONFIRM]
    if not head:
        return vendor_cost_ms(vendor_est_ms, n_vendors)
    per = max(native_launch_ms(ms) for _, ms in head)
    return vendor_cost_ms(vendor_est_ms, n_vendors) + len(head) * CONFIRM_LAUNCHES * per


def family_bests(ranked, limit: int = FAMILY_CHECK) -> list:
    """The best-estimated (Schedule, est) of each family in `ranked`, in estimate order, at most `limit`."""
    bests: dict = {}
    for s, ms in ranked:
        bests.setdefault(s.family, (s, ms))
    return list(bests.values())[:limit]


def family_check_cost_ms(ranked) -> float:
    """Predicted GPU ms of re-timing one schedule of each of the families `family_bests` picks on
    the whole graph: its screen, the survivors' launches at the fastest, and the float64 reference."""
    head = family_bests(ranked)
    if not head:
        return 0.0
    fastest = native_launch_ms(min(ms for _, ms in head))
    screen = sum(SCREEN_LAUNCHES * native_launch_ms(ms) for _, ms in head)
    return screen + (min(SURVIVORS, len(head)) * SURVIVOR_LAUNCHES + REFERENCE_LAUNCHES) * fastest


def plan_probe(ranked, top_k: int, budget_ms: float, vendor_est_ms: float, n_vendors: int,
               full_forced: bool = False, whole_is_sample: str | None = None) -> ProbePlan:
    """The probe for `ranked` [(Schedule, est)] (fastest first): the most candidates, up to
    `top_k` (estimate.shortlist's picks), whose whole-graph probe fits `budget_ms`; a sample when
    fewer than MIN_FULL_CANDIDATES fit. `full_forced` (tune --full) takes the top k on the whole
    graph whatever it costs; so does `whole_is_sample` (the reason a sample would save nothing:
    it would hold most of a small graph)."""
    shortlist = estimate.shortlist(ranked, top_k)
    cost = full_probe_cost_ms(shortlist, vendor_est_ms, n_vendors)
    if full_forced or whole_is_sample:
        why = "--full: the top-k timed on the whole graph" if full_forced else whole_is_sample
        return ProbePlan("full", shortlist, 0, cost, why)
    # The largest n whose shortlist (the candidates that would run) fits the budget.
    chosen = next((c for c in (estimate.shortlist(ranked, n) for n in range(len(shortlist), 0, -1))
                   if full_probe_cost_ms(c, vendor_est_ms, n_vendors) <= budget_ms), [])
    fits = len(chosen)
    if fits >= min(MIN_FULL_CANDIDATES, len(shortlist)) and fits > 0:
        cost = full_probe_cost_ms(chosen, vendor_est_ms, n_vendors)
        why = (f"whole graph: {fits} candidates fit the {budget_ms:g} ms budget "
               f"(predicted {cost:.0f} ms)")
        return ProbePlan("full", chosen, 0, cost, why)
    confirm = confirm_cost_ms(ranked, vendor_est_ms, n_vendors)
    if confirm <= budget_ms:
        return ProbePlan("sample", shortlist, CONFIRM, confirm,
                         f"sample: the whole graph would cost ~{cost:.0f} ms for {len(shortlist)} "
                         f"candidates; the sample's best {CONFIRM} are confirmed on it (~{confirm:.0f} ms)")
    why = f"confirming on the whole graph would cost ~{confirm:.0f} ms (> {budget_ms:g} ms budget)"
    families = len(family_bests(shortlist))
    check = family_check_cost_ms(shortlist)
    if families >= 2 and check <= FAMILY_CHECK_FACTOR * budget_ms:
        return ProbePlan("sample", shortlist, 0, check,
                         f"sample: {why}; the sample's best of each of {families} families is "
                         f"re-timed on the whole graph without vendors (~{check:.0f} ms)", families)
    return ProbePlan("sample", shortlist, 0, confirm, f"sample only: {why}")
