"""graphs.reorder on the CPU: every method is a permutation, relabelling is P A Pᵀ exactly (SciPy
agrees, the inverse undoes it, SpMM commutes with it), and each method does what it promises."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.errors import AutosageError
from autosage_cli.features import compute_features
from autosage_cli.bench import reordering
from autosage_cli.graphs import reorder
from autosage_cli.graphs.csr import canonical_csr
from autosage_cli.graphs.synthetic import generate


def _random_graph(n=300, density=0.03, seed=1, symmetric=False):
    rng = np.random.default_rng(seed)
    m = sp.random(n, n, density=density, random_state=rng, format="csr", dtype=np.float64)
    m.data = rng.uniform(0.5, 1.5, m.nnz)
    # a few hub rows so the degree-based methods have something to sort
    hubs = sp.csr_matrix((np.ones(4 * n // 2), (np.repeat([3, 50, 51, 200], n // 2),
                                                np.tile(np.arange(0, n, 2), 4))), shape=(n, n))
    m = m + hubs
    return canonical_csr(m + m.T if symmetric else m)


GRAPHS = {
    "random": _random_graph(),
    "symmetric": _random_graph(symmetric=True, seed=2),
    "power-law": generate("power-law", {"n": 2000, "nnz": 30000, "q50": 8, "q90": 30, "q99": 90,
                                        "max": 400}, seed=3),
    "with-empty-rows": canonical_csr(sp.csr_matrix(([1.0, 2.0, 3.0], ([0, 0, 4], [4, 2, 0])), shape=(6, 6))),
}


def skip_missing(method):
    """Skip, saying why, where the method's optional library (the reorder extra) is missing."""
    missing = reorder.available(method)
    if missing:
        pytest.skip(f"{method} {missing}")


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("method", reorder.METHODS)
def test_every_method_is_a_permutation_that_relabels_exactly(name, method):
    skip_missing(method)
    graph = GRAPHS[name]
    perm = reorder.order(graph, method)
    assert perm.dtype == np.int64 and perm.shape == (graph.n_rows,)
    np.testing.assert_array_equal(np.sort(perm), np.arange(graph.n_rows))
    result = reorder.permute(graph, perm)
    # perm[new] = old: the reordered graph is A[perm][:, perm], as SciPy computes it
    expected = canonical_csr(graph.to_scipy()[perm][:, perm])
    assert result.fingerprint == expected.fingerprint
    back = reorder.permute(result, reorder.inverse(perm))
    assert back.fingerprint == graph.fingerprint


@pytest.mark.parametrize("method", ["rcm", "hubsort", "degree"])
def test_spmm_on_the_reordered_graph_is_the_original_spmm_permuted(method):
    graph = GRAPHS["power-law"]
    perm = reorder.order(graph, method)
    b = np.random.default_rng(0).standard_normal((graph.n_cols, 16))
    c = graph.to_scipy() @ b
    c_new = reorder.permute(graph, perm).to_scipy() @ b[perm]
    np.testing.assert_allclose(c_new, c[perm], rtol=1e-5, atol=1e-4)
    assert not np.allclose(c_new, c)   # the test would notice an order that did nothing


def test_rcm_recovers_a_shuffled_band():
    banded = generate("banded", {"n": 5000, "bandwidth": 4})
    shuffled = generate("banded", {"n": 5000, "bandwidth": 4, "shuffle": 1})
    before = reordering.spread(shuffled)
    assert before.bandwidth > 1000 and before.locality > 0.2
    after = reordering.spread(reorder.permute(shuffled, reorder.order(shuffled, "rcm")))
    # a band of half-width 4 comes back to half-width at most 8 (RCM's worst is ~2x on a path-like band)
    assert after.bandwidth <= 8, after
    assert after.locality < 1e-3 and after.locality <= 2 * reordering.spread(banded).locality


def test_rcm_sees_both_directions_of_a_directed_graph():
    """A path stored in one direction only (i -> i+1), shuffled: RCM on A alone would see no
    neighbours from the far end; on A ∪ Aᵀ it walks the path, bandwidth 1."""
    n = 400
    rng = np.random.default_rng(5)
    ids = rng.permutation(n)
    path = sp.csr_matrix((np.ones(n - 1), (ids[:-1], ids[1:])), shape=(n, n))
    graph = canonical_csr(path)
    after = reordering.spread(reorder.permute(graph, reorder.order(graph, "rcm")))
    assert after.bandwidth == 1


@pytest.mark.parametrize("method", ["hubsort", "hubcluster"])
def test_hub_orders_put_every_hub_before_every_other_row(method):
    graph = GRAPHS["power-law"]
    degrees = graph.row_degrees()
    hub = degrees > degrees.mean()
    perm = reorder.order(graph, method)
    hubs = int(hub.sum())
    assert 0 < hubs < graph.n_rows
    assert hub[perm[:hubs]].all() and not hub[perm[hubs:]].any()
    assert np.all(np.diff(perm[hubs:]) > 0)                      # non-hubs in their original order
    if method == "hubsort":
        assert np.all(np.diff(degrees[perm[:hubs]]) <= 0)        # hubs by degree, descending
        assert not np.all(np.diff(perm[:hubs]) > 0)              # ... which is not their id order here
    else:
        assert np.all(np.diff(perm[:hubs]) > 0)                  # hubs in their original order


def test_degree_order_is_descending_and_stable():
    graph = GRAPHS["random"]
    perm = reorder.order(graph, "degree")
    d = graph.row_degrees()[perm]
    assert np.all(np.diff(d) <= 0)
    ties = np.flatnonzero(np.diff(d) == 0)
    assert ties.size and np.all(perm[ties + 1] > perm[ties])     # equal degrees: original order


def test_spread_matches_the_features_and_a_direct_computation():
    graph = GRAPHS["random"]
    s = reordering.spread(graph)
    assert s.locality == compute_features(graph).locality
    coo = graph.to_scipy().tocoo()
    assert s.bandwidth == int(np.abs(coo.col - coo.row).max())
    spans = [(r.indices.max() - r.indices.min()) / graph.n_cols for r in graph.to_scipy() if r.nnz]
    assert s.row_span == pytest.approx(np.mean(spans))


def test_the_report_times_and_records_the_method():
    graph = GRAPHS["symmetric"]
    result, perm, report = reordering.reorder(graph, "rcm")
    assert report.method == "rcm" and report.order_s >= 0 and report.apply_s >= 0
    assert report.before == reordering.spread(graph) and report.after == reordering.spread(result)
    assert result.source == {"reordered_from": graph.source, "reorder": "rcm"}
    assert set(report.to_dict()) == {"method", "order_s", "apply_s", "before", "after"}


def test_chunked_relabel_on_several_threads_equals_one_chunk(monkeypatch):
    graph = GRAPHS["power-law"]
    perm = reorder.order(graph, "degree")
    whole = reorder.permute(graph, perm, workers=1)
    monkeypatch.setattr(reorder, "GATHER_CHUNK", 97)   # hundreds of chunks, rows split unevenly
    assert reorder.permute(graph, perm, workers=4).fingerprint == whole.fingerprint


def test_refusals():
    rect = canonical_csr(sp.csr_matrix(np.ones((2, 3))))
    with pytest.raises(AutosageError, match="non-square graph \\(2x3\\)"):
        reorder.order(rect, "rcm")
    graph = GRAPHS["with-empty-rows"]
    with pytest.raises(AutosageError, match="unknown reordering method 'nested'"):
        reorder.order(graph, "nested")
    with pytest.raises(AutosageError, match="must have 6 entries"):
        reorder.permute(graph, np.arange(5))
    with pytest.raises(AutosageError, match="not a permutation"):
        reorder.permute(graph, np.array([0, 1, 2, 3, 4, 4]))
    with pytest.raises(AutosageError, match="out of range"):
        reorder.permute(graph, np.array([0, 1, 2, 3, 4, 6]))
    with pytest.raises(AutosageError, match="integers"):
        reorder.permute(graph, np.arange(6.0))


@pytest.mark.parametrize("name", GRAPHS)
def test_rcm_skips_the_union_only_for_a_symmetric_pattern(name, monkeypatch):
    graph = GRAPHS[name]
    assert reordering.is_symmetric(graph) == bool(compute_features(graph).symmetric)
    plain = reorder.order(graph, "rcm")
    seen = []
    real = reorder.symmetric_pattern
    monkeypatch.setattr(reorder, "symmetric_pattern", lambda g, s=None: seen.append(s) or real(g, s))
    _, perm, _ = reordering.reorder(graph, "rcm")
    assert seen == [reordering.is_symmetric(graph)]
    np.testing.assert_array_equal(perm, plain)   # the union of a symmetric pattern is itself


def test_cluster_order_groups_labels_in_order_of_first_member():
    from autosage_cli.graphs.clustered import cluster_order

    labels = np.array([7, 3, 7, 3, 9, 7])
    # cluster 7 starts at 0, 3 at 1, 9 at 4; members keep their order
    np.testing.assert_array_equal(cluster_order(labels), [0, 2, 5, 1, 3, 4])
    assert cluster_order(np.array([], dtype=np.int64)).shape == (0,)


@pytest.mark.parametrize("method", ["metis", "community", "labelprop"])
def test_clustered_orders_recover_shuffled_blocks(method, monkeypatch):
    """A block-community graph with its ids shuffled: the clustered orders bring each block's
    rows back together (locality near the unshuffled graph's), which rcm and hubsort do not."""
    from autosage_cli.features import locality
    from autosage_cli.graphs import clustered

    skip_missing(method)
    monkeypatch.setattr(clustered, "PART_NODES", 256)   # METIS parts the size of the blocks
    params = {"n": 8192, "nnz": 120_000, "q50": 12, "q90": 30, "q99": 60, "max": 200,
              "locality": 0.8, "block": 256}
    natural = generate("power-law", params)
    shuffled = generate("power-law", {**params, "shuffle": 1})

    def loc(g):
        return locality(g, np.diff(g.indptr))

    after = loc(reorder.permute(shuffled, reorder.order(shuffled, method)))
    assert after < 1.3 * loc(natural), (after, loc(natural))
    assert loc(reorder.permute(shuffled, reorder.order(shuffled, "rcm"))) > 2 * loc(natural)


@pytest.mark.parametrize("method", ["metis", "community"])
def test_a_missing_library_is_one_line_naming_the_extra(method, monkeypatch):
    import sys

    from autosage_cli.graphs import clustered

    library = clustered.LIBRARIES[method][0]
    monkeypatch.setitem(sys.modules, library, None)    # what an import finds when it is not installed
    monkeypatch.setattr(clustered, "library_available", lambda m: m != method)
    with pytest.raises(AutosageError, match=f"needs the {library} package.*autosage\\[reorder\\]"):
        reorder.order(GRAPHS["symmetric"], method)
    assert "autosage[reorder]" in reorder.available(method)


@pytest.mark.parametrize("n", [10, 2**31])   # the composite-key sort, and the lexsort beyond it
def test_label_propagation_votes_for_the_most_frequent_then_the_smallest_label(n):
    from autosage_cli.graphs.label_propagation import _by_vote

    vertex, label = np.array([0, 0, 1, 1, 1]), np.array([5, 3, 2, 7, 9])
    counts = np.array([2, 2, 1, 3, 3])
    v, lab = _by_vote(vertex, label, counts, n, np)
    assert list(zip(v.tolist(), lab.tolist())) == [(0, 3), (0, 5), (1, 7), (1, 9), (1, 2)]


def test_label_propagation_finds_two_cliques_joined_by_one_edge():
    from autosage_cli.graphs.label_propagation import propagate

    block = np.ones((6, 6)) - np.eye(6)
    m = sp.block_diag([block, block]).tolil()
    m[0, 11] = m[11, 0] = 1
    g = canonical_csr(sp.csr_matrix(m))
    labels = propagate(g.indptr, g.indices, g.n_rows)
    assert len(set(labels[:6].tolist())) == 1 and len(set(labels[6:].tolist())) == 1
    assert labels[0] != labels[6]
