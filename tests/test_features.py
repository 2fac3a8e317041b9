"""Graph features against hand-computed values, and each measure on graphs where its answer is known."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.features import (GraphFeatures, compute_features, diagonal_sums, locality,
                                   symmetry_prefilter, transpose_matches)
from autosage_cli.graphs.csr import canonical_csr
from autosage_cli.graphs.synthetic import generate


def _graph(dense):
    return canonical_csr(sp.csr_matrix(np.asarray(dense, dtype=float)))


def test_hand_computed_small_graph():
    # degrees 2, 0, 1, 3 ; |col - row| sums: row0 |1-0|+|3-0| = 4, row2 |0-2| = 2, row3 3+2+0 = 5
    g = _graph([[0, 1, 0, 1],
                [0, 0, 0, 0],
                [1, 0, 0, 0],
                [1, 1, 0, 1]])
    f = compute_features(g)
    d = np.array([2, 0, 1, 3])
    assert (f.n_rows, f.n_cols, f.nnz) == (4, 4, 6)
    assert f.degree_mean == 1.5 and f.degree_min == 0 and f.degree_max == 3
    assert f.degree_q50 == pytest.approx(np.quantile(d, 0.5))
    assert f.degree_q99 == pytest.approx(np.quantile(d, 0.99))
    assert f.degree_cv == pytest.approx(d.std() / d.mean())
    assert f.skew == pytest.approx(np.quantile(d, 0.99) / 1.5)
    assert f.empty_rows == 1
    assert f.heavy_share == pytest.approx(3 / 6)  # only the degree-3 row is above q99 = 2.97
    assert f.locality == pytest.approx((4 + 2 + 5) / 6 / 4)
    assert f.symmetric is False


def test_symmetry_is_structural():
    sym = _graph([[0, 2, 0], [5, 0, 1], [0, 1, 1]])  # pattern symmetric, values not
    assert compute_features(sym).symmetric is True
    cyc = _graph([[0, 1, 0], [0, 0, 1], [1, 0, 0]])  # 2 above the diagonal, 1 below
    assert compute_features(cyc).symmetric is False
    # The 4-cycle 0→2→1→3→0: equal row and column counts, Σ col = Σ row, 2 above and 2 below, so
    # every cheap condition passes and only the transpose check sees it.
    four = _graph([[0, 0, 1, 0], [0, 0, 0, 1], [0, 1, 0, 0], [1, 0, 0, 0]])
    assert symmetry_prefilter(four, diagonal_sums(four, four.row_degrees())) is None
    assert compute_features(four).symmetric is False
    assert compute_features(four, symmetry=False).symmetric is None
    assert compute_features(_graph([[1, 1, 0]])).symmetric is False  # not square


def test_symmetry_of_generated_graphs():
    assert compute_features(generate("banded", {"n": 500, "bandwidth": 4})).symmetric is True
    assert compute_features(generate("uniform", {"n": 500, "degree": 4})).symmetric is False


def test_empty_graph():
    f = compute_features(canonical_csr(sp.csr_matrix((3, 3))))
    assert f.nnz == 0 and f.empty_rows == 3 and f.degree_max == 0
    assert f.skew == 0 and f.heavy_share == 0 and f.locality == 0 and f.degree_cv == 0
    assert f.symmetric is True


def test_locality_separates_banded_from_random():
    banded = compute_features(generate("banded", {"n": 20_000, "bandwidth": 4}))
    random = compute_features(generate("uniform", {"n": 20_000, "degree": 9}))
    assert banded.locality < 1e-3
    assert random.locality == pytest.approx(1 / 3, abs=0.01)


def test_skew_and_heavy_share_see_hubs():
    hub_graph = generate("hub", {"n": 20_000, "hubs": 4, "hub_degree": 5000, "background": 2})
    hub = compute_features(hub_graph)
    flat = compute_features(generate("uniform", {"n": 20_000, "degree": 2}))
    d = hub_graph.row_degrees()
    assert hub.heavy_share == pytest.approx(d[d > np.quantile(d, 0.99)].sum() / hub.nnz)
    assert hub.heavy_share > 20_000 / hub.nnz  # the four hubs and then some
    assert flat.heavy_share == 0 and flat.skew == 1 and flat.degree_cv == 0
    assert hub.degree_max >= 5000 and hub.degree_cv > 5


def test_locality_chunks_line_up_with_rows():
    # Tiny chunks put chunk boundaries everywhere; the sum must not change.
    g = generate("power-law", {"n": 3000, "nnz": 60_000, "q50": 10, "q90": 40, "q99": 150, "max": 800})
    degrees = g.row_degrees()
    rows = np.repeat(np.arange(g.n_rows), degrees)
    direct = np.abs(g.indices.astype(np.int64) - rows).mean() / g.n_cols
    assert locality(g, degrees, chunk=1000) == pytest.approx(direct)
    assert locality(g, degrees) == pytest.approx(direct)
    # Exact integers, so neither the chunking nor the thread count changes a bit of any sum.
    exact = int(np.abs(g.indices.astype(np.int64) - rows).sum())
    signed = int((g.indices.astype(np.int64) - rows).sum())
    below = int(np.count_nonzero(g.indices < rows))
    above = int(np.count_nonzero(g.indices > rows))
    for chunk, workers in ((1000, 1), (1000, 3), (7, 2), (1 << 20, None)):
        sums = diagonal_sums(g, degrees, chunk=chunk, workers=workers)
        assert (sums.abs_sum, sums.signed_sum, sums.below, sums.above) == (exact, signed, below, above)
        assert locality(g, degrees, chunk=chunk, workers=workers) == exact / g.nnz / g.n_cols


def test_locality_of_a_rectangular_graph():
    g = _graph([[0, 0, 0, 0, 1], [1, 0, 0, 0, 0]])  # |4 - 0| + |0 - 1|
    assert compute_features(g).locality == pytest.approx(5 / 2 / 5)
    assert compute_features(g).symmetric is False


def _symmetric_pair(n=3000, seed=0):
    """A symmetric pattern, and a copy with the 4-cycle a→c→b→d→a added on four ids no edge
    touches (a < b < c < d): every row's degree still equals its column's count, Σ col = Σ row and
    2 entries sit above the diagonal and 2 below, so only the full check can tell. The ids are
    spread out so the cycle crosses row blocks."""
    base = generate("uniform", {"n": n, "degree": 4}, seed=seed).to_scipy().tocoo()
    a, b, c, d = n // 10, 4 * n // 10, 6 * n // 10, 9 * n // 10
    keep = ~(np.isin(base.row, [a, b, c, d]) | np.isin(base.col, [a, b, c, d]))
    half = sp.coo_matrix((base.data[keep], (base.row[keep], base.col[keep])), shape=(n, n))
    cycle = sp.coo_matrix((np.ones(4), ([a, b, c, d], [c, d, b, a])), shape=(n, n))
    return canonical_csr(half + half.T), canonical_csr(half + half.T + cycle)


def test_full_symmetry_check_over_row_blocks():
    sym, twisted = _symmetric_pair()
    assert symmetry_prefilter(twisted, diagonal_sums(twisted, twisted.row_degrees())) is None
    for blocks in (1, 2, 3, 7, 50):
        for workers in (1, 3):
            assert transpose_matches(sym, sym.row_degrees(), blocks=blocks, workers=workers) is True
            assert transpose_matches(twisted, twisted.row_degrees(), blocks=blocks,
                                     workers=workers) is False
    assert compute_features(sym).symmetric is True
    assert compute_features(twisted).symmetric is False
    assert compute_features(sym, symmetry=False).symmetric is None
    assert compute_features(twisted, symmetry=False).symmetric is None


def test_full_symmetry_check_sees_unequal_counts():
    # Row degrees 2, 1, 1 but column counts 1, 2, 1: the transposes' counts decide.
    g = _graph([[0, 1, 1], [1, 0, 0], [0, 1, 0]])
    assert transpose_matches(g, g.row_degrees(), blocks=2) is False
    assert transpose_matches(_graph([[1, 1], [1, 0]]), np.array([2, 1]), blocks=2) is True
    assert transpose_matches(_graph([[1, 1, 0]]), np.array([2])) is False  # not square


def test_symmetry_false_keeps_every_other_field():
    for g in (generate("power-law", {"n": 3000, "nnz": 60_000, "q50": 10, "q90": 40, "q99": 150,
                                     "max": 800}),
              _symmetric_pair(1000)[0]):
        full = compute_features(g)
        quick = compute_features(g, symmetry=False, workers=1)
        assert quick.symmetric in (None, full.symmetric)
        assert {**full.to_dict(), "symmetric": None} == {**quick.to_dict(), "symmetric": None}
        assert compute_features(g, workers=3) == full


def test_to_dict_layout_and_round_trip():
    f = compute_features(generate("uniform", {"n": 100, "degree": 3}))
    doc = json.loads(json.dumps(f.to_dict()))
    assert list(doc)[:4] == ["n_rows", "n_cols", "nnz", "degree"]
    assert set(doc["degree"]) == {"mean", "min", "max", "q50", "q90", "q99", "cv"}
    assert {"skew", "empty_rows", "heavy_share", "locality", "symmetric"} <= set(doc)
    assert GraphFeatures.from_dict(doc) == f
    unknown = compute_features(_symmetric_pair(500)[0], symmetry=False)
    assert unknown.symmetric is None
    assert GraphFeatures.from_dict(json.loads(json.dumps(unknown.to_dict()))) == unknown
