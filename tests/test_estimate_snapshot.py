"""The cost model's ranking pinned (CPU): a digest of `estimate.rank` over several graphs' features,
every op, K in (1, 2, 4, 8, 16, 64, 256), every dtype and two device models. Reorganising where a
family's schedules, space rules, cost hook or plan layout live must not move a single estimate;
a change that means to move them updates these digests deliberately, with the reason."""
from __future__ import annotations

import hashlib

import pytest

from autosage_cli import dtypes
from autosage_cli.graphs.synthetic import generate
from autosage_cli.kernels import schedule as sched
from autosage_cli.scheduler.estimate import rank
from autosage_cli.ops.cost.roofline import H200, device_model

from scheduler_fakes import HUB_200K, REDDIT_LIKE, UNIFORM_1M, features_of

WIDTHS = (1, 2, 4, 8, 16, 64, 256)
HEADS = {"spmm": 1, "sddmm": 1, "attention": 4}
DEVICES = (H200, device_model({"name": "small L2", "sms": 78, "l2_bytes": 40 * 2**20}))
# Small generated graphs (their real degree quantiles) next to the fakes of the benchmark's shapes.
GENERATED = {
    "power-law": ("power-law", {"n": 4000, "nnz": 60_000, "q50": 8, "q90": 30, "q99": 120, "max": 900,
                                "locality": 0.5, "block": 256}),
    "hub": ("hub", {"n": 3000, "hubs": 3, "hub_degree": 1500, "background": 0.5}),
    "banded": ("banded", {"n": 2000, "bandwidth": 3}),
}

# Per op: sha256 (16 hex digits) of every (graph, device, dtype, K) case's ranked names and
# estimates (to 9 significant digits), in order.
RANK_SNAPSHOT = {
    "spmm": "0ae1c800ddf938c9",   # split's short-chunk variants (64/64, 32/32; half 64/64) join the ranking
    "sddmm": "e34788ce69e74b68",
    "attention": "54d8a9d1dec4632f",
}


def _graph_features() -> dict:
    out = {"uniform-1m": UNIFORM_1M, "hub-200k": HUB_200K, "reddit-like": REDDIT_LIKE}
    for name, (kind, params) in GENERATED.items():
        out[name] = features_of(generate(kind, params, seed=1))
    return out


def rank_digest(op: str) -> str:
    lines = []
    for graph, features in _graph_features().items():
        for device in DEVICES:
            for dtype in dtypes.DTYPES:
                for k in WIDTHS:
                    ranked = rank(features, op, k, HEADS[op], device, dtype=dtype)
                    # 9 significant digits, equal estimates by name: the features of a generated
                    # graph differ in their last bits between CPUs (NumPy's vectorised sums), which
                    # moved exact reprs and the order of tied schedules
                    cases = sorted((float(f"{ms:.9g}"), s.name) for s, ms in ranked)
                    lines.append(f"{graph} {device.name} {dtype} K={k}: "
                                 + " ".join(f"{name}={ms!r}" for ms, name in cases))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


@pytest.mark.parametrize("op", sched.OPS)
def test_the_ranking_of_every_case_matches_the_snapshot(op):
    assert rank_digest(op) == RANK_SNAPSHOT[op]
