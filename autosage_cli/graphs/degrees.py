"""Degree sequences calibrated to a target row count, nonzero count and degree quantiles.

Real GNN graphs are summarised by a few numbers (reddit has q50/q90/q99 ≈ 230/1198/3805,
max ≈ 21.7k, mean ≈ 492). A degree sequence that hits all of them at once is built from a quantile
function Q(p):

- knots (0, d_min), (0.5, q50), (0.9, q90), (0.99, q99) joined in log space, each segment bent by one
  shared exponent gamma: log Q = log q_k + (log q_k+1 − log q_k) · t**gamma, t the position inside the
  segment. gamma = 1 is log-linear; gamma > 1 sags the segments and lowers the mean;
- above the last knot a Pareto tail q_last · ((1 − p_last) / (1 − p))**alpha whose exponent puts the
  largest of the n samples exactly at d_max. (Log-linear interpolation up to the max instead gives
  products-like a mean of 92 where the target is 50.5: the top 1 % would hold half the edges.)

gamma is solved by bisection so the mean is nnz / n with every quantile knot unchanged; the n degrees
are Q at the stratified points (k + 0.5) / n, so the sequence's empirical quantiles are the knots, and
they are rounded with largest remainders so they sum to nnz exactly.
"""
from __future__ import annotations

import numpy as np

from ..errors import AutosageError

# gamma is searched in [1/GAMMA_RANGE, GAMMA_RANGE]; beyond that the segments are steps.
GAMMA_RANGE = 64.0
BODY_POINTS_PER_SEGMENT = 4096  # midpoint rule for the body mean during the bisection


def _knots(d_min: float, quantiles: dict[float, float]) -> tuple[np.ndarray, np.ndarray]:
    ps = sorted(quantiles)
    kp = np.array([0.0, *ps], dtype=np.float64)
    kq = np.array([d_min, *(quantiles[p] for p in ps)], dtype=np.float64)
    return kp, kq


def _body(p: np.ndarray, kp: np.ndarray, log_q: np.ndarray, gamma: float) -> np.ndarray:
    """Q(p) for p <= kp[-1]: log-space segments bent by gamma."""
    seg = np.clip(np.searchsorted(kp, p, side="right") - 1, 0, len(kp) - 2)
    t = (p - kp[seg]) / (kp[seg + 1] - kp[seg])
    return np.exp(log_q[seg] + (log_q[seg + 1] - log_q[seg]) * np.power(t, gamma))


def _tail(p: np.ndarray, p_last: float, q_last: float, alpha: float) -> np.ndarray:
    return q_last * np.power((1.0 - p_last) / (1.0 - p), alpha)


def tail_exponent(n: int, p_last: float, q_last: float, d_max: float) -> float:
    """alpha so that the tail reaches d_max at the top stratified point 1 − 0.5/n."""
    p_top = 1.0 - 0.5 / n
    if p_top <= p_last or d_max <= q_last:
        return 0.0
    return float(np.log(d_max / q_last) / np.log((1.0 - p_last) / (1.0 - p_top)))


def quantile_curve(p: np.ndarray, n: int, d_min: float, quantiles: dict[float, float], d_max: float,
                   gamma: float) -> np.ndarray:
    """Q(p) as described in the module docstring, clipped to [d_min, d_max]."""
    kp, kq = _knots(d_min, quantiles)
    alpha = tail_exponent(n, kp[-1], kq[-1], d_max)
    p = np.asarray(p, dtype=np.float64)
    out = np.empty_like(p)
    body = p <= kp[-1]
    out[body] = _body(p[body], kp, np.log(kq), gamma)
    out[~body] = _tail(p[~body], kp[-1], kq[-1], alpha)
    return np.clip(out, d_min, d_max)


def _mean_for_gamma(gamma: float, kp: np.ndarray, log_q: np.ndarray) -> float:
    """The body's contribution to the mean, by the midpoint rule on each segment."""
    total = 0.0
    mid = (np.arange(BODY_POINTS_PER_SEGMENT) + 0.5) / BODY_POINTS_PER_SEGMENT
    for k in range(len(kp) - 1):
        width = kp[k + 1] - kp[k]
        if width <= 0:
            continue
        vals = np.exp(log_q[k] + (log_q[k + 1] - log_q[k]) * np.power(mid, gamma))
        total += width * float(vals.mean())
    return total


def solve_gamma(n: int, nnz: int, d_min: float, quantiles: dict[float, float], d_max: float) -> float:
    """The bend that makes the mean nnz / n; AutosageError when no bend can."""
    kp, kq = _knots(d_min, quantiles)
    log_q = np.log(kq)
    alpha = tail_exponent(n, kp[-1], kq[-1], d_max)
    # The tail does not depend on gamma: its mean over the stratified points above the last knot.
    k = np.arange(n, dtype=np.float64)
    p = (k + 0.5) / n
    tail_p = p[p > kp[-1]]
    tail_sum = float(np.clip(_tail(tail_p, kp[-1], kq[-1], alpha), d_min, d_max).sum())
    body_count = n - tail_p.size
    target_body = nnz - tail_sum  # what the body points must sum to

    def body_sum(gamma: float) -> float:
        # The body integral scaled to the stratified points that fall in it.
        return _mean_for_gamma(gamma, kp, log_q) / kp[-1] * body_count

    lo, hi = 1.0 / GAMMA_RANGE, GAMMA_RANGE
    most, least = body_sum(lo), body_sum(hi)
    if not least <= target_body <= most:
        mean_lo = (least + tail_sum) / n
        mean_hi = (most + tail_sum) / n
        raise AutosageError(
            f"no degree sequence with these quantiles has mean {nnz / n:.4g} (nnz/n); "
            f"reachable means are {mean_lo:.4g} to {mean_hi:.4g}")
    for _ in range(60):  # body_sum falls as gamma grows
        mid = float(np.sqrt(lo * hi))
        if body_sum(mid) > target_body:
            lo = mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi))


def round_to_sum(values: np.ndarray, total: int) -> np.ndarray:
    """Integers close to `values` summing to `total` (largest-remainder rounding)."""
    base = np.floor(values).astype(np.int64)
    short = int(total - base.sum())
    if short > 0:
        frac = values - base
        order = np.argsort(-frac, kind="stable")
        base[order[:min(short, base.size)]] += 1
        short -= min(short, base.size)
        if short > 0:  # cannot happen while sum(values) == total; keep the contract anyway
            base[-1] += short
    elif short < 0:
        frac = values - base
        order = np.argsort(frac, kind="stable")
        take = order[base[order] > 0][:-short]
        base[take] -= 1
    return base


def calibrated_degrees(n: int, nnz: int, quantiles: dict[float, float], d_max: float,
                       d_min: float = 1.0) -> np.ndarray:
    """Sorted (ascending) int64 degrees: n of them, summing to nnz, with the given quantiles and max."""
    validate_targets(n, nnz, quantiles, d_max, d_min)
    gamma = solve_gamma(n, nnz, d_min, quantiles, d_max)
    p = (np.arange(n, dtype=np.float64) + 0.5) / n
    values = quantile_curve(p, n, d_min, quantiles, d_max, gamma)
    # The bisection integrates the body by the midpoint rule; rescaling removes its last few parts per
    # million, and the clip keeps the max a hard bound.
    np.minimum(values * (nnz / values.sum()), d_max, out=values)
    return round_to_sum(values, nnz)


def validate_targets(n: int, nnz: int, quantiles: dict[float, float], d_max: float,
                     d_min: float) -> None:
    if n <= 0:
        raise AutosageError(f"n must be positive, got {n}")
    if d_min < 1:
        raise AutosageError(f"min degree must be at least 1 for a power-law sequence, got {d_min}")
    chain = [("min", d_min)] + [(f"q{round(p * 100):d}", q) for p, q in sorted(quantiles.items())] \
        + [("max", d_max)]
    for (name_a, a), (name_b, b) in zip(chain, chain[1:]):
        if a > b:
            raise AutosageError(f"degree targets must not decrease: {name_a}={a:g} > {name_b}={b:g}")
    if d_max > n:
        raise AutosageError(f"max degree {d_max:g} exceeds the {n} columns")
    if not n * d_min <= nnz <= n * d_max:
        raise AutosageError(f"nnz={nnz} is impossible with n={n}, min degree {d_min:g} and "
                            f"max degree {d_max:g}")
