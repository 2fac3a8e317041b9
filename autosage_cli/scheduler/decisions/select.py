"""The guardrail: choose our kernel only when it is verified and clearly faster than the vendor.

A native candidate wins only if it matched the vendor output on the probe graph and its time is at
most `guardrail` (default 0.95) x the best vendor algorithm's; otherwise the best vendor algorithm
runs. The 5% margin absorbs probe noise and the sample-to-full-graph gap, so a tie goes to the
library everyone already trusts. Every decision carries a one-line reason.

When the vendors could be timed only on the sample (policy.py: the family check), the guardrail
is the sample's: the natives that pass it there, one of each family (`family_bests`), are re-timed
on the whole graph, and the fastest of those wins (`decide_checked`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ...errors import AutosageError

DEFAULT_GUARDRAIL = 0.95


@dataclass(frozen=True)
class Decision:
    backend: str                 # "native" or a vendor name ("cusparse-alg2", ...)
    schedule: str                # schedule name (native) or the vendor name
    reason: str
    native_ms: float | None      # best verified native time on the probe graph
    vendor_ms: float | None      # best vendor time on the probe graph
    speedup: float | None        # best vendor time / chosen time
    params: dict = field(default_factory=dict)   # the schedule's knobs (native)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Decision":
        return cls(d["backend"], d["schedule"], d.get("reason", ""), d.get("native_ms"),
                   d.get("vendor_ms"), d.get("speedup"), dict(d.get("params") or {}))


def _ms(x: float) -> str:
    return f"{x:.3g} ms"


def _why_no_native(natives) -> str:
    if not natives:
        return "no native candidate supports this input"
    failed = [r for r in natives if r.status == "failed"]
    mismatched = [r for r in failed if r.reason.startswith("mismatch")]
    if len(mismatched) == len(natives):
        return "all native candidates failed verification"
    if len(failed) == len(natives):
        return f"all native candidates failed ({len(mismatched)} verification, " \
               f"{len(failed) - len(mismatched)} compile/launch)"
    skipped = sum(r.status == "skipped" for r in natives)
    return f"no native candidate was verified and timed ({len(failed)} failed, {skipped} skipped)"


def decide(candidates, vendor, guardrail: float = DEFAULT_GUARDRAIL) -> Decision:
    """Decision from the probe records (probe.ProbeRecord or anything with name, status, ms,
    params): `candidates` are the native ones, `vendor` the vendor algorithms."""
    if not 0 < guardrail <= 1:
        raise AutosageError(f"guardrail must be in (0, 1], got {guardrail}")
    natives = [r for r in candidates if r.status == "ok" and r.ms is not None]
    vendors = [r for r in vendor if r.status == "ok" and r.ms is not None]
    # Ties go to the earlier record: candidates come in estimate order, vendors in registry order.
    best_n = min(natives, key=lambda r: r.ms) if natives else None
    best_v = min(vendors, key=lambda r: r.ms) if vendors else None

    if best_v is None:
        if best_n is None:
            raise AutosageError("neither a native candidate nor a vendor algorithm ran on this input: "
                                + _why_no_native(candidates))
        return Decision("native", best_n.name,
                        f"native {best_n.name} {_ms(best_n.ms)}: no vendor algorithm ran "
                        f"(verified against the float64 reference)",
                        best_n.ms, None, None, dict(best_n.params))
    if best_n is None:
        return Decision(best_v.name, best_v.name, f"{best_v.name} {_ms(best_v.ms)}: "
                        + _why_no_native(candidates), None, best_v.ms, 1.0)
    speedup = best_v.ms / best_n.ms if best_n.ms > 0 else float("inf")
    if best_n.ms <= guardrail * best_v.ms:
        return Decision("native", best_n.name,
                        f"native {best_n.name} {_ms(best_n.ms)} <= {guardrail:g} x "
                        f"{best_v.name} {_ms(best_v.ms)} ({speedup:.2f}x)",
                        best_n.ms, best_v.ms, speedup, dict(best_n.params))
    return Decision(best_v.name, best_v.name,
                    f"{best_v.name} {_ms(best_v.ms)}; no native candidate within guardrail: best native "
                    f"{best_n.name} {speedup:.2f}x (needs >= {1 / guardrail:.2f}x)",
                    best_n.ms, best_v.ms, 1.0)


def _passing(natives, vendors, guardrail: float) -> list:
    """The verified, timed natives within `guardrail` x the best verified vendor (all of them when
    no vendor ran), fastest first."""
    ok = sorted((r for r in natives if r.status == "ok" and r.ms is not None), key=lambda r: r.ms)
    bar = min((r.ms for r in vendors if r.status == "ok" and r.ms is not None), default=None)
    return [r for r in ok if bar is None or r.ms <= guardrail * bar]


def family_bests(natives, vendors, guardrail: float, limit: int) -> list:
    """The fastest native of each family (`params["family"]`) among those passing the guardrail,
    fastest first, at most `limit`."""
    bests: dict = {}
    for r in _passing(natives, vendors, guardrail):
        bests.setdefault((r.params or {}).get("family", r.name), r)
    return list(bests.values())[:limit]


def decide_checked(checked, sample_natives, vendors, guardrail: float = DEFAULT_GUARDRAIL) -> Decision:
    """Decision from a family check: `checked` are natives timed on the whole graph, `sample_natives`
    the same natives' records on the sample (each passed the guardrail there) and `vendors` the
    sample's. The fastest checked native wins; its ratio to the vendors is the sample's. Without
    one verified on the whole graph, the sample decides (`decide`)."""
    full = [r for r in checked if r.status == "ok" and r.ms is not None]
    on_sample = {r.name: r for r in sample_natives}
    if not full:
        return decide(sample_natives, vendors, guardrail)
    best = min(full, key=lambda r: r.ms)
    mine = on_sample.get(best.name)
    best_v = min((r for r in vendors if r.status == "ok" and r.ms is not None), key=lambda r: r.ms,
                 default=None)
    others = ", ".join(f"{r.name} {_ms(r.ms)}" for r in full if r is not best)
    reason = f"native {best.name} {_ms(best.ms)} on the whole graph (the sample's best per family: {others})"
    if best_v is None or mine is None or mine.ms is None:
        return Decision("native", best.name, reason + "; no vendor ran on the sample", best.ms, None,
                        None, dict(best.params))
    speedup = best_v.ms / mine.ms if mine.ms > 0 else float("inf")
    return Decision("native", best.name,
                    reason + f"; on the sample {_ms(mine.ms)} <= {guardrail:g} x {best_v.name} "
                    f"{_ms(best_v.ms)} ({speedup:.2f}x)", best.ms, best_v.ms, speedup, dict(best.params))
