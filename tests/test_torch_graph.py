"""autosage_cli.torch.Graph on the CPU: canonical order, edge-order maps, transpose, builders,
derived graphs, bad input."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.graphs.csr import canonical_csr  # noqa: E402
from autosage_cli.torch import Graph  # noqa: E402
from autosage_cli.torch.norm import gcn_graph, mean_graph, with_self_loops  # noqa: E402
from torch_helpers import random_edge_index  # noqa: E402


def _scipy_of(edge_index, n, weight=None):
    w = np.ones(edge_index.shape[1]) if weight is None else weight.numpy()
    return sp.coo_matrix((w, (edge_index[1].numpy(), edge_index[0].numpy())), shape=(n, n)).tocsr()


def test_importing_autosage_does_not_import_torch():
    code = "import sys, autosage_cli, autosage_cli.api; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("seed", [0, 1])
def test_canonical_csr_matches_scipy_and_maps_user_order(seed):
    n = 40
    ei = random_edge_index(n, seed)
    w = torch.rand(ei.shape[1], generator=torch.Generator().manual_seed(seed)) + 0.5
    g = Graph.from_edge_index(ei, n, edge_weight=w)
    ref = canonical_csr(_scipy_of(ei, n, w))
    assert g.nnz == ref.nnz < ei.shape[1]  # the duplicates were merged
    np.testing.assert_array_equal(g.rowptr.numpy(), ref.indptr)
    np.testing.assert_array_equal(g.col.numpy(), ref.indices)
    np.testing.assert_allclose(g.weight.numpy(), ref.values, rtol=1e-6)
    # every user edge lands on the canonical edge with its (row, col)
    u2c = g.user_to_canon
    assert torch.equal(g.row[u2c], ei[1]) and torch.equal(g.col[u2c], ei[0])
    # to_canonical sums duplicates; to_user reads back the canonical value
    np.testing.assert_allclose(g.to_canonical(w.double()).numpy(), ref.values, rtol=1e-6)
    assert torch.equal(g.to_user(g.weight), g.weight[u2c])


def test_canonical_input_keeps_identity_order_and_no_weights():
    ei = torch.tensor([[1, 2, 0, 2], [0, 0, 1, 2]])  # already sorted by (target, source)
    g = Graph.from_edge_index(ei, 3)
    assert g.user_to_canon is None and g.weight is None
    x = torch.arange(4.0)
    assert g.to_user(x) is x and g.to_canonical(x) is x


def test_duplicates_without_weights_count_twice():
    ei = torch.tensor([[1, 1, 2], [0, 0, 0]])
    g = Graph.from_edge_index(ei, 3)
    assert g.nnz == 2
    assert g.weight.tolist() == [2.0, 1.0]


@pytest.mark.parametrize("weighted", [False, True])
def test_transpose_is_the_canonical_transpose(weighted):
    n = 30
    ei = random_edge_index(n, 3, duplicates=False)
    w = torch.rand(ei.shape[1]) + 0.5 if weighted else None
    g = Graph.from_edge_index(ei, n, edge_weight=w)
    t = g.T
    ref = canonical_csr(_scipy_of(ei, n, w).T.tocsr())
    np.testing.assert_array_equal(t.rowptr.numpy(), ref.indptr)
    np.testing.assert_array_equal(t.col.numpy(), ref.indices)
    if weighted:
        np.testing.assert_allclose(t.weight.numpy(), ref.values, rtol=1e-6)
    assert t.T is g and g.T is t
    # t_perm: edge e of the transpose is edge t_perm[e] of the graph, and back
    assert torch.equal(t.row, g.col[g.t_perm]) and torch.equal(t.col, g.row[g.t_perm])
    assert torch.equal(g.t_perm[t.t_perm], torch.arange(g.nnz))


def test_with_weights_shares_the_transposed_structure():
    g = Graph.from_edge_index(random_edge_index(25, 4), 25)
    h = g.with_weights(torch.rand(g.nnz))
    assert h.t_perm is g.t_perm
    assert torch.equal(h.T.weight, h.weight[g.t_perm])


def test_builders_agree():
    n = 20
    ei = random_edge_index(n, 5, duplicates=False)
    w = torch.rand(ei.shape[1]) + 0.5
    a = Graph.from_edge_index(ei, n, edge_weight=w)
    m = _scipy_of(ei, n, w)
    b = Graph.from_scipy(m)
    c = Graph.from_csr_graph(canonical_csr(m))
    csr = torch.sparse_csr_tensor(torch.from_numpy(m.indptr).long(), torch.from_numpy(m.indices).long(),
                                  torch.from_numpy(m.data).float(), (n, n), check_invariants=True)
    d = Graph.from_sparse_csr(csr)
    for other in (b, c, d):
        assert torch.equal(other.rowptr, a.rowptr) and torch.equal(other.col, a.col)
        assert torch.allclose(other.weight, a.weight)
    assert Graph.coerce(m).nnz == a.nnz and Graph.coerce(a) is a


def test_host_csr_is_weighted_or_pattern():
    g = Graph.from_edge_index(torch.tensor([[1, 2], [0, 0]]), 3, edge_weight=torch.tensor([2.0, 3.0]))
    assert g.host_csr().values.tolist() == [2.0, 3.0]
    assert g.host_csr(weighted=False).values.tolist() == [1.0, 1.0]
    assert g.host_csr().fingerprint != g.host_csr(weighted=False).fingerprint


def test_self_loops_and_normalised_graphs():
    ei = torch.tensor([[1, 2, 0, 1], [0, 0, 1, 1]])  # node 1 has a loop; nodes 0, 2 do not
    g = Graph.from_edge_index(ei, 3)
    looped, keep = with_self_loops(g)
    assert keep.tolist() == [True, True, True, False] and looped.nnz == g.nnz + 2
    assert with_self_loops(g)[0] is looped  # built once
    # mean: row i holds 1 / in-degree(i); node 2 has no in-edges
    m = mean_graph(g)
    assert torch.allclose(m.weight, torch.tensor([0.5, 0.5, 0.5, 0.5], dtype=torch.float64))
    ng = gcn_graph(g)
    assert gcn_graph(g) is ng and ng.nnz == looped.nnz
    dense = torch.zeros(3, 3, dtype=torch.float64)
    dense[ng.row, ng.col] = ng.weight
    a = torch.tensor([[1.0, 1, 1], [1, 1, 0], [0, 0, 1]], dtype=torch.float64)  # A + I for the missing loops
    d = a.sum(1).rsqrt()
    assert torch.allclose(dense, d[:, None] * a * d[None, :])


@pytest.mark.parametrize("make, message", [
    (lambda: Graph.from_edge_index(torch.zeros(3, 4, dtype=torch.long), 5), r"edge_index: expected a \(2, E\)"),
    (lambda: Graph.from_edge_index(torch.zeros(2, 4), 5), "expected integer ids"),
    (lambda: Graph.from_edge_index(torch.tensor([[0, 7], [1, 2]]), 5), "index out of range"),
    (lambda: Graph.from_edge_index(torch.tensor([[0], [1]]), 2, edge_weight=torch.tensor([float("nan")])),
     "NaN or Inf"),
    (lambda: Graph.from_edge_index(torch.tensor([[0], [1]]), 2, edge_weight=torch.ones(2)),
     "edge weights: expected shape"),
    (lambda: Graph.coerce("graph.txt"), "expected a Graph"),
    (lambda: Graph.from_edge_index(torch.tensor([[0], [1]]), 2).to_canonical(torch.ones(3)),
     "expected 1 entries"),
])
def test_bad_input_names_the_problem(make, message):
    with pytest.raises(AutosageError, match=message):
        make()


def test_structure_stats_are_the_degree_histograms_quantiles():
    """Graph.structure_stats (what kinds match graphs on): per side, the quantiles as the lower edge
    of their quarter-octave bin, the exact largest degree and the empty count, against NumPy."""
    import numpy as np

    def expected(d):
        bins = np.clip((np.log2(d + 1.0) * 4).astype(np.int64), 0, 255)
        cumulative = np.cumsum(np.bincount(bins, minlength=256))
        quantiles = [int(round(2 ** (int(np.searchsorted(cumulative, int(q * (len(d) - 1)) + 1)) / 4) - 1))
                     for q in (0.5, 0.9, 0.99)]
        return quantiles + [int(d.max()), int((d == 0).sum())]

    rng = np.random.default_rng(1)
    for n, e in [(37, 80), (3000, 20000), (5, 0)]:
        src = torch.from_numpy(rng.zipf(1.7, e).clip(1, n) - 1) if e else torch.zeros(0, dtype=torch.long)
        dst = torch.from_numpy(rng.integers(0, n, e)) if e else torch.zeros(0, dtype=torch.long)
        g = Graph.from_edge_index(torch.stack([src, dst]), n)
        stats, names = g.structure_stats(), ("q50", "q90", "q99", "max", "empty")
        assert [stats["rows"][k] for k in names] == expected(g.rowptr.diff().numpy())
        assert [stats["cols"][k] for k in names] == expected(np.bincount(g.col.numpy(), minlength=n))
        assert g.T.structure_stats()["rows"] == stats["cols"]


@pytest.mark.parametrize("keep_duplicates", [False, True])
def test_the_stats_read_back_with_the_build_are_the_structure_stats(keep_duplicates):
    """from_coo reads the structure's stats back with its own checks (one transfer); they must
    equal what structure_stats computes from the finished CSR (hubs, empty rows, duplicates)."""
    gen = torch.Generator().manual_seed(4)
    row = torch.cat([torch.randint(0, 60, (400,), generator=gen), torch.full((90,), 7)])
    col = torch.cat([torch.randint(0, 45, (400,), generator=gen), torch.randint(0, 45, (90,), generator=gen)])
    row = torch.where(row % 6 == 5, (row + 1) % 60, row)      # rows 5, 11, ... stay empty
    g = Graph.from_coo(row, col, None, (60, 45), keep_duplicates=keep_duplicates)
    built = g.structure_stats()
    g._stats = None
    assert g.structure_stats() == built
    hub = int((row == 7).sum()) if keep_duplicates else int(torch.unique(col[row == 7]).numel())
    assert built["rows"]["empty"] == 10 and built["rows"]["max"] == hub


@pytest.mark.parametrize("loops", [False, True])
@pytest.mark.parametrize("duplicates", [False, True])
def test_loops_swapped_in_equal_the_sorted_self_loop_graph(duplicates, loops):
    """with_self_loops on a square graph swaps its loops for one per node in the canonical CSR (no
    sort, no read-back): the same Graph as from_coo of the user edges that are not loops, then one
    loop per node — structure, duplicate counts, the user-to-canonical map and the stats (known
    from g's build); with duplicates, its graph of every listing is from_coo's with
    keep_duplicates."""
    from autosage_cli.torch.norm import user_edges

    edges = random_edge_index(40, seed=6, duplicates=duplicates)
    edges = edges[:, edges[0] != edges[1]]
    if loops:                                      # some nodes with one loop, one with three
        edges = torch.cat([edges, torch.tensor([[3, 3, 3, 9, 17], [3, 3, 3, 9, 17]])], 1)
    edges = edges[:, torch.randperm(edges.shape[1], generator=torch.Generator().manual_seed(1))]
    g = Graph.from_edge_index(edges, 40)
    assert (g.self_loop_edges() == 5) == loops and g.has_duplicates == (duplicates or loops)
    row, col = user_edges(g)
    kept = row != col
    nodes = torch.arange(40)
    sorted_graph = Graph.from_coo(torch.cat([row[kept], nodes]), torch.cat([col[kept], nodes]), None, g.shape)
    swapped, keep = with_self_loops(g)
    assert torch.equal(keep, kept)
    for name in ("rowptr", "row", "col"):
        assert torch.equal(getattr(swapped, name), getattr(sorted_graph, name)), name
    assert (swapped.weight is None) == (sorted_graph.weight is None)
    if swapped.weight is not None:
        assert torch.equal(swapped.weight, sorted_graph.weight)
    assert torch.equal(swapped.user_to_canon, sorted_graph.user_to_canon)
    assert swapped.structure_stats() == sorted_graph.structure_stats()
    assert swapped.self_loop_edges() == 40
    listed = Graph.from_coo(torch.cat([row[kept], nodes]), torch.cat([col[kept], nodes]), None, g.shape,
                            keep_duplicates=True)
    multi = swapped.with_duplicates()
    for name in ("rowptr", "row", "col"):
        assert torch.equal(getattr(multi, name), getattr(listed, name)), name
    assert multi.weight is None and (multi._coalesced() or multi) is swapped
    values = torch.arange(multi.nnz)
    assert torch.equal(multi.to_user(values), listed.to_user(values))


@pytest.mark.parametrize("weighted", [False, True])
def test_listings_from_the_build_equal_from_coo_keeping_duplicates(weighted):
    """with_duplicates out of the build's own sort equals from_coo with keep_duplicates (edges,
    weights, the user order), and is matched on its coalesced graph's features."""
    edges = random_edge_index(30, seed=2, duplicates=True)
    weight = torch.rand(edges.shape[1], generator=torch.Generator().manual_seed(3)) if weighted else None
    g = Graph.from_edge_index(edges, 30, edge_weight=weight)
    assert g.has_duplicates
    multi = g.with_duplicates()
    listed = Graph.from_coo(edges[1], edges[0], weight, (30, 30), keep_duplicates=True)
    for name in ("rowptr", "row", "col"):
        assert torch.equal(getattr(multi, name), getattr(listed, name)), name
    assert (multi.weight is None) == (not weighted)
    if weighted:
        assert torch.equal(multi.weight, listed.weight)
    values = torch.arange(multi.nnz)
    assert torch.equal(multi.to_user(values), listed.to_user(values))
    stats = multi.structure_stats()
    assert stats["rows"] == g.structure_stats()["rows"] and stats["checksum"] != g.structure_stats()["checksum"]


def test_a_batch_and_its_self_loop_graph_are_freed_without_the_collector():
    """A mini-batch Graph with duplicates and its self-loop graph (which knows how to make its graph
    of every listing from the batch's) hold no reference cycle: dropping the batch frees both at
    once, without waiting for the garbage collector."""
    import gc
    import weakref

    g = Graph.from_edge_index(random_edge_index(30, seed=8, duplicates=True), 30)
    looped = with_self_loops(g)[0]
    assert g.has_duplicates and looped.has_duplicates and looped._make_listings is not None
    refs = [weakref.ref(g), weakref.ref(looped)]
    del g, looped
    gc.disable()
    try:
        assert [r() is None for r in refs] == [True, True]
    finally:
        gc.enable()


def test_a_batch_and_every_graph_derived_from_it_are_freed_without_the_collector():
    """What a training step derives from a batch (GCN's and SAGE's normalised graphs, transposes,
    attention's graph of every listing and its transpose) holds no reference cycle: dropping the
    batch frees all of them at once."""
    import gc
    import weakref

    from autosage_cli.torch.norm import gcn_graph, mean_graph

    gc.collect()
    gc.disable()
    try:
        g = Graph.from_edge_index(random_edge_index(30, seed=8, duplicates=True), 30)
        made = [g, g.T, mean_graph(g), mean_graph(g).T, gcn_graph(g), gcn_graph(g).T, g.with_duplicates(),
                g.with_duplicates().T, with_self_loops(g)[0].with_duplicates().T]
        assert made[1].T is g and made[5].T is made[4]
        refs = [weakref.ref(x) for x in made]
        del g, made
        assert [r() is None for r in refs] == [True] * len(refs)
    finally:
        gc.enable()


def test_derived_graphs_outliving_their_batch_work_out_their_structure_themselves():
    """A normalised graph kept without its batch (held weakly by it) still runs: its transpose,
    stats and host CSR are its own; a graph of every listing without its coalesced graph tunes on
    its pattern without duplicates."""
    import numpy as np

    from autosage_cli.torch.norm import mean_graph

    edges = random_edge_index(30, seed=9, duplicates=True)
    g = Graph.from_edge_index(edges, 30)
    mean, multi = mean_graph(g), g.with_duplicates()
    stats, t_rowptr, host = g.structure_stats(), g.T.rowptr.clone(), g.host_csr(weighted=False)
    del g
    assert mean._structure_of is None and multi._coalesced() is None
    assert mean.structure_stats() == stats and torch.equal(mean.T.rowptr, t_rowptr)
    assert mean.T.T is mean
    alone = multi.host_csr(weighted=False)
    assert np.array_equal(alone.indptr, host.indptr) and np.array_equal(alone.indices, host.indices)


def test_work_lists_of_a_graph_of_every_listing_read_its_own_rows():
    """A plan's host work lists (dgraph.host.indptr / indices) walk the rows its kernels walk: for
    a graph of every listing its own CSR, not the coalesced graph's that its tunes read."""
    import numpy as np

    from autosage_cli.torch.host import HostOnDemand

    g = Graph.from_edge_index(random_edge_index(30, seed=8, duplicates=True), 30)
    multi = g.with_duplicates()
    assert multi.nnz > g.nnz
    host = HostOnDemand(multi, False)
    assert np.array_equal(host.indptr, multi.rowptr.numpy()) and np.array_equal(host.indices, multi.col.numpy())
    assert host.csr().nnz == g.nnz and host.indptr.dtype == host.csr().indptr.dtype
    plain = HostOnDemand(g, False)
    assert plain.indptr is plain.csr().indptr
