"""Timing the probe's verified plans: the screen, the survivors, the repeats the budget buys.

A plan reaches this module verified and open (probe.py): every one gets ONE timed launch right
after its verification run, which warms it up (a vendor whose verification run is already far
behind gets none: `screened_cold`); the survivors of the screen more, planned from that launch
within the budget (`time_all`). Every batch is charged to the budget in measured GPU ms and to
the phase clock's timing phase of its group.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import one_line
from .phases import PhaseClock

SCREEN_RATIO = 1.3          # a plan this much slower than the fastest of its group after one timed
                            # launch is not timed again (one launch's noise is a few %, not 30%)
MIN_REPEATS = 3             # every plan that survives the screen is timed at least this often...
MAX_REPEAT = 10             # ...and at most this often, as the budget allows (20 at 02a7334: the
                            # extra repeats then spent the whole 1 s budget on 100M-edge graphs,
                            # 0.8 s at K=16 where the screen and minimum took ~0.15 s)
WARMUP = 1                  # per timed batch; the verification run before it paid one-time costs
SECOND_LOOK_MS = 0.1        # when the fastest of a group launches in under this, a plan about to be
                            # screened out is timed MIN_REPEATS times more first: one launch of a
                            # few-microsecond kernel is not a measurement (H200, 1a1c611: bcsstk16
                            # SDDMM K=4, the best schedule read 20.4 us on its screening launch and
                            # 5.1 us over ten; the choice lost 0.84x), and the look costs < 1 ms
COLD_SCREEN_RATIO = 3.0     # a vendor whose verification run (cold: it pays the first launch's
                            # costs) takes this much longer than the fastest vendor's timed launch
                            # is not launched again: cuSPARSE's ALG1 at K=128 (8x ALG2), the
                            # gather-dot SDDMM (20-30x) cost a full-graph launch each for nothing


class Budget:
    def __init__(self, total_ms: float):
        self.total, self.spent = float(total_ms), 0.0

    @property
    def left(self) -> float:
        return self.total - self.spent


@dataclass
class Live:
    """A verified plan waiting to be timed, and its timing batches (median, p20, p80, repeats)."""
    rec: object                 # its probe.ProbeRecord
    plan: object
    batches: list = field(default_factory=list)
    cold: bool = False          # screened out at its verification run: its one time is that run's

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


def time_all(measure, items: list[Live], inputs, out, budget: Budget, clock: PhaseClock) -> float:
    """Screen, then time the survivors, then spend what is left of the budget.

    1. Screen: every item has had ONE timed launch right after its verification run (its warm-up);
       one that has not (none, in the probe's own use) gets a warm-up and that launch here. Where
       the kernels take microseconds, a plan about to be screened out gets a second look first.
    2. Survivors, the items within SCREEN_RATIO of the fastest of their group (natives, vendors),
       get MIN_REPEATS - 1 more (after a warm-up), planned from their measured launch: the fastest
       first while they fit what is left of the budget, the fastest native and the fastest vendor
       (the guardrail's two sides) whatever it costs. The rest keep their one launch, marked as
       screened out. On the whole graph of a large input a launch takes milliseconds: timing a
       candidate that is 1.3x behind three more times buys nothing but budget.
    3. What is left of the budget buys the survivors more repeats (up to MAX_REPEAT), shared equally.
    Returns the GPU time of 1 and 2 (the guaranteed minimum)."""
    for it in items:
        if not it.batches:
            batch(measure, it, inputs, out, 1, budget, verify_run=True, clock=clock)
    _second_look(measure, [it for it in items if it.batches], inputs, out, budget, clock)
    survivors = _affordable(_survivors([it for it in items if it.batches]), budget)
    for it in survivors:
        batch(measure, it, inputs, out, MIN_REPEATS - 1, budget, clock=clock)
    floor_ms = budget.spent
    timed = _worth_more_repeats([it for it in survivors if it.batches])
    for i, it in enumerate(timed):
        share = max(budget.left, 0.0) / (len(timed) - i)
        extra = min(MAX_REPEAT - MIN_REPEATS, int(share // max(it.median, 1e-6)) - WARMUP)
        if extra >= 1:
            batch(measure, it, inputs, out, extra, budget, clock=clock)
    for it in items:
        if it.batches:
            rec = it.rec
            rec.ms, rec.p20_ms, rec.p80_ms, rec.repeats = merge_batches(it.batches)
            rec.status = "ok"
    return floor_ms


def _affordable(survivors: list[Live], budget: Budget) -> list[Live]:
    """The survivors (in their order) whose MIN_REPEATS - 1 more launches and warm-up fit what is
    left of the budget, taken fastest first; the fastest of each group always. The others get
    their reason."""
    launches = MIN_REPEATS - 1 + WARMUP
    fastest: dict[bool, Live] = {}
    for it in sorted(survivors, key=lambda it: it.median):
        fastest.setdefault(it.rec.backend == "native", it)
    kept = {id(it) for it in fastest.values()}
    left = budget.left - sum(launches * it.median for it in fastest.values())
    for it in sorted(survivors, key=lambda it: it.median):
        native = it.rec.backend == "native"
        if id(it) in kept:
            continue
        if launches * it.median <= left:
            kept.add(id(it))
            left -= launches * it.median
            continue
        it.rec.reason = (f"screened out: {it.median / fastest[native].median:.2f}x the fastest of its "
                         f"group after one timed launch, and {MIN_REPEATS} timings of it would not fit "
                         f"the {budget.total:g} ms budget")
    return [it for it in survivors if id(it) in kept]


def _worth_more_repeats(timed: list[Live]) -> list[Live]:
    """The natives and the fastest vendor after MIN_REPEATS: the guardrail compares with the best
    vendor time, so more repeats of a slower vendor cannot change a decision."""
    vendors = [it for it in timed if it.rec.backend != "native"]
    fastest = min(vendors, key=lambda it: merge_batches(it.batches)[0], default=None)
    return [it for it in timed if it.rec.backend == "native" or it is fastest]


def _group_leads(timed: list[Live]) -> dict[bool, float]:
    """The fastest screening launch of each group (True: natives), plans cold-screened left out."""
    best: dict[bool, float] = {}
    for it in timed:
        if not it.cold:
            native = it.rec.backend == "native"
            best[native] = min(best.get(native, float("inf")), it.batches[0][0])
    return best


def _second_look(measure, timed: list[Live], inputs, out, budget: Budget, clock: PhaseClock) -> None:
    """In a group whose fastest launch is under SECOND_LOOK_MS, every plan beyond SCREEN_RATIO of it
    is timed MIN_REPEATS more times and its screening time becomes the merged batches' median.
    Until none is left: a look can lower its group's lead (a plan whose one launch read high may be
    the fastest), which puts plans beyond the ratio that were within it, and each gets its look too
    (H200, 8f9f638, facebook_combined SpMM K = 256: split.g32.v4.s64c64a, the fastest schedule of
    the H100's exhaustive run, was within the ratio on its one launch and screened out at 1.30x of
    the lead the looks had lowered)."""
    looked: set[int] = set()
    while True:
        lead = _group_leads(timed)
        due = [it for it in timed if not it.cold and id(it) not in looked
               and lead[it.rec.backend == "native"] < SECOND_LOOK_MS
               and it.batches[0][0] > SCREEN_RATIO * lead[it.rec.backend == "native"]]
        if not due:
            return
        for it in due:
            looked.add(id(it))
            batch(measure, it, inputs, out, MIN_REPEATS, budget, clock=clock)
            if it.batches:
                it.batches[:] = [merge_batches(it.batches)]


def _survivors(timed: list[Live]) -> list[Live]:
    """The items within SCREEN_RATIO of the fastest screened item of their group (native or vendor);
    the others get their reason."""
    best = _group_leads(timed)
    keep = []
    for it in timed:
        if it.cold:
            continue      # its reason says so already
        lead = best[it.rec.backend == "native"]
        if it.batches[0][0] <= SCREEN_RATIO * lead:
            keep.append(it)
        else:
            launches = "one timed launch" if it.batches[0][3] == 1 else f"{it.batches[0][3]} timed launches"
            it.rec.reason = f"screened out: {it.batches[0][0] / lead:.2f}x the fastest of its group after {launches}"
    return keep


def batch(measure, it: Live, inputs, out, repeat: int, budget: Budget, verify_run: bool = False,
          warmup: int = WARMUP, clock: PhaseClock | None = None) -> None:
    """One timed batch (`warmup` + `repeat` launches), charged to the budget (with the verification
    run before it, the first time) and to the clock's timing phase of its group. A failure marks
    the record and drops its batches."""
    if it.rec.status == "failed":
        return
    clock = clock if clock is not None else PhaseClock()
    try:
        with clock.phase("native_timing" if it.rec.backend == "native" else "vendor_timing"):
            stats = measure.time(it.plan, inputs, out, repeat=repeat, warmup=warmup)
    except Exception as exc:
        it.rec.status, it.rec.reason = "failed", f"time: {one_line(exc)}"
        it.batches.clear()
        return
    budget.spent += stats.median_ms * (stats.repeats + warmup + (1 if verify_run else 0))
    it.batches.append((float(stats.median_ms), float(stats.p20_ms), float(stats.p80_ms), int(stats.repeats)))


def screened_cold(item: Live, cold_ms, live: list[Live], budget: Budget) -> bool:
    """Whether `item`'s verification run (`cold_ms`, None when the measurer does not time it) is
    COLD_SCREEN_RATIO behind the fastest vendor timed so far; then that run is its one time."""
    timed = [it.median for it in live if it.batches and not it.cold]
    if cold_ms is None or not timed or not cold_ms > COLD_SCREEN_RATIO * min(timed):
        return False
    item.cold = True
    item.batches.append((float(cold_ms), float(cold_ms), float(cold_ms), 1))
    item.rec.reason = (f"screened out at its verification run: {cold_ms / min(timed):.2f}x the fastest "
                       f"vendor's timed launch")
    budget.spent += cold_ms
    return True
