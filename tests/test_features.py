"""Graph features against hand-computed values, and each measure on graphs where its answer is known."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.features import GraphFeatures, compute_features, locality
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
    # Same row and column counts, different pattern: passes the bincount pre-check, fails the full one.
    cyc = _graph([[0, 1, 0], [0, 0, 1], [1, 0, 0]])
    assert compute_features(cyc).symmetric is False
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


def test_to_dict_layout_and_round_trip():
    f = compute_features(generate("uniform", {"n": 100, "degree": 3}))
    doc = json.loads(json.dumps(f.to_dict()))
    assert list(doc)[:4] == ["n_rows", "n_cols", "nnz", "degree"]
    assert set(doc["degree"]) == {"mean", "min", "max", "q50", "q90", "q99", "cv"}
    assert {"skew", "empty_rows", "heavy_share", "locality", "symmetric"} <= set(doc)
    assert GraphFeatures.from_dict(doc) == f
