"""The torch reordering path (torch.label_propagation, torch.relabel, at.reorder of a Graph) on CPU
tensors: the same labels and permutations as graphs.reorder's host path, P A Pᵀ equal to SciPy's
A[perm][:, perm], locality recovered on shuffled blocks, and the generated-graph disk cache
(graphs.generated). The CUDA side is tests/test_reorder_device_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.features import locality  # noqa: E402
from autosage_cli.graphs import generated, label_propagation as host_lp, reorder  # noqa: E402
from autosage_cli.graphs.csr import canonical_csr  # noqa: E402
from autosage_cli.graphs.synthetic import generate  # noqa: E402
from graph_shapes import hurtful_shapes  # noqa: E402
from autosage_cli.torch import label_propagation as tlp, relabel  # noqa: E402

BLOCKS = {"n": 6000, "nnz": 90_000, "q50": 12, "q90": 30, "q99": 60, "max": 200,
          "locality": 0.8, "block": 256}
SHUFFLED = generate("power-law", {**BLOCKS, "shuffle": 1})


def _tensors(g):
    return relabel.csr_tensors(g, "cpu")


def _loc(g):
    return locality(g, np.diff(g.indptr))


def _small_graphs():
    """Shapes that hurt (graph_shapes: empty rows, self-loops, one long row, n = 1, weights), no
    edges, and shuffled blocks."""
    return {**hurtful_shapes(weighted=True), "no-edges": canonical_csr(sp.csr_matrix((5, 5))),
            "blocks": SHUFFLED}


SMALL = _small_graphs()


@pytest.mark.parametrize("n", [1, 10, 1000, 2**20 + 7, 3 * 10**6])
def test_the_moving_vertices_match_the_hosts_hash(n):
    for round_ in (0, 3, 17):
        host = host_lp._moving(n, round_, np)
        np.testing.assert_array_equal(tlp.moving(n, round_, "cpu").numpy(), host)
    if n >= 1000:
        assert abs(host.mean() - 0.75) < 0.02


@pytest.mark.parametrize("high", [3, 1000, 2**62])
def test_pair_counts_are_exact(high):
    """Few distinct keys (long runs in one slot) and keys spread over 62 bits (every level's hash)."""
    gen = torch.Generator().manual_seed(int(high % 1000))
    pool = torch.randint(0, high, (max(2, min(high, 700)),), generator=gen, dtype=torch.int64)
    keys = pool[torch.randint(0, pool.numel(), (20_000,), generator=gen)]
    _, inverse, counts = np.unique(keys.numpy(), return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(tlp.pair_counts(keys).numpy(), counts[inverse])


def test_pair_counts_resolve_keys_that_lose_their_slot(monkeypatch):
    """A hash of 2 bits: nearly every key loses its slot at first, so the retry levels decide."""
    real = tlp._slots
    monkeypatch.setattr(tlp, "_slots", lambda keys, level, bits: real(keys, level, min(bits, 2 + level)))
    keys = torch.arange(300, dtype=torch.int64).repeat_interleave(torch.arange(300) % 4 + 1)
    expected = (torch.arange(300) % 4 + 1).repeat_interleave(torch.arange(300) % 4 + 1)
    torch.testing.assert_close(tlp.pair_counts(keys), expected)


@pytest.mark.parametrize("name", list(SMALL))
def test_torch_label_propagation_gives_the_hosts_labels(name):
    """torch.label_propagation.propagate itself (not the host dispatch of relabel on CPU tensors)
    on CPU tensors: the very labels of the NumPy sorts."""
    g = SMALL[name]
    _, row, col, _ = _tensors(g)
    labels = tlp.propagate(row, col, g.n_rows)
    np.testing.assert_array_equal(labels.numpy(), host_lp.propagate(g.indptr, g.indices, g.n_rows))
    np.testing.assert_array_equal(tlp.cluster_order(labels).numpy(),
                                  reorder.clustered.cluster_order(labels.numpy()))


@pytest.mark.parametrize("name", list(SMALL))
def test_a_graphs_labels_from_its_own_tensors_are_its_host_csrs(name):
    # at.reorder(graph, "auto")'s labeller: the Graph's tensors where they are, the host CSR's labels
    g = SMALL[name]
    graph = at.Graph.from_csr_graph(g)
    np.testing.assert_array_equal(relabel.graph_labels(graph, graph.host_csr(weighted=False)),
                                  host_lp.propagate(g.indptr, g.indices, g.n_rows))


@pytest.mark.parametrize("name", [n for n, g in SMALL.items() if g.n_rows == g.n_cols])
def test_the_device_relabel_measures_the_hosts_relabelling(name):
    # at.reorder(graph, "auto")'s relabel: the Graph relabelled where it is, its host copy the very
    # graph (fingerprint) the host's relabelling gives, which the decision cache records
    from autosage_cli.torch.reordered import DeviceRelabel

    g = SMALL[name]
    graph = at.Graph.from_csr_graph(g)
    host = graph.host_csr(weighted=True)
    perm = np.random.default_rng(1).permutation(g.n_rows)
    relabel_device = DeviceRelabel(graph)
    measured, seconds = relabel_device(host, perm, "labelprop")
    assert measured.fingerprint == reorder.permute(host, perm).fingerprint and seconds > 0
    assert relabel_device.graph_of(perm) is relabel_device.done[0][1]     # kept, not made again


def test_a_graph_with_duplicate_edges_votes_as_its_host_csr():
    row, col = torch.tensor([0, 0, 0, 1, 2, 2, 3]), torch.tensor([1, 1, 1, 0, 3, 3, 2])
    graph = at.Graph.from_coo(row, col, None, (4, 4), keep_duplicates=True)
    host = graph.host_csr(weighted=False)      # its pattern without the duplicates
    assert (host.nnz, graph.nnz) == (4, 7)
    np.testing.assert_array_equal(host.indices, [1, 0, 3, 2])
    np.testing.assert_array_equal(relabel.graph_labels(graph, host),
                                  host_lp.propagate(host.indptr, host.indices, host.n_rows))


@pytest.mark.parametrize("method", relabel.DEVICE_METHODS)
@pytest.mark.parametrize("name", list(SMALL))
def test_tensor_orders_are_the_hosts_permutations(name, method):
    g = SMALL[name]
    rowptr, row, col, _ = _tensors(g)
    perm = relabel.order(rowptr, row, col, method).numpy()
    np.testing.assert_array_equal(np.sort(perm), np.arange(g.n_rows))   # a permutation
    np.testing.assert_array_equal(perm, reorder.order(g, method))


@pytest.mark.parametrize("name", list(SMALL))
def test_the_relabelled_csr_is_p_a_pt(name):
    g = SMALL[name]
    perm = np.random.default_rng(1).permutation(g.n_rows)
    rowptr, row, col, weight = relabel.permute_csr(*_tensors(g), torch.from_numpy(perm))
    expected = g.to_scipy()[perm][:, perm].tocsr()
    expected.sort_indices()
    np.testing.assert_array_equal(rowptr.numpy(), expected.indptr)
    np.testing.assert_array_equal(col.numpy(), expected.indices)
    np.testing.assert_array_equal(row.numpy(), np.repeat(np.arange(g.n_rows), np.diff(expected.indptr)))
    values = np.ones(g.nnz, dtype=np.float32) if weight is None else weight.numpy()
    np.testing.assert_array_equal(values, expected.data.astype(np.float32))
    # the host's relabel is the same CSR
    host = reorder.permute(g, perm)
    np.testing.assert_array_equal(host.indices, col.numpy())


def test_labelprop_recovers_shuffled_blocks_on_tensors():
    """A block-community graph with ids shuffled: the tensor path's order brings each block back
    together (locality near the unshuffled graph's), and relabelled_locality predicts it exactly."""
    natural = generate("power-law", BLOCKS)
    rowptr, row, col, _ = _tensors(SHUFFLED)
    perm = tlp.cluster_order(tlp.propagate(row, col, SHUFFLED.n_rows))
    after = reorder.permute(SHUFFLED, perm.numpy())
    assert _loc(SHUFFLED) > 0.3
    assert _loc(after) < 1.3 * _loc(natural) and _loc(after) < 0.4 * _loc(SHUFFLED), (_loc(after), _loc(natural))
    assert reorder.relabelled_locality(SHUFFLED, perm.numpy()) == pytest.approx(_loc(after), rel=1e-12)


def test_permutation_checks_on_tensors():
    assert torch.equal(relabel.check_permutation(torch.tensor([2, 0, 1]), 3), torch.tensor([2, 0, 1]))
    for bad, match in ((torch.tensor([0, 0, 1]), "not a permutation"), (torch.tensor([0, 1, 3]), "out of range"),
                       (torch.tensor([0, 1]), "must have 3 entries"), (torch.tensor([0.0, 1.0, 2.0]), "integers")):
        with pytest.raises(AutosageError, match=match):
            relabel.check_permutation(bad, 3)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = at.GCNConv(8, 16), at.GCNConv(16, 3)

    def forward(self, x, g):
        return self.b(torch.relu(self.a(x, g)), g)


@pytest.mark.parametrize("method", ["labelprop", "hubsort", "rcm"])
def test_reordering_a_graph_keeps_outputs_and_options(method):
    """at.reorder of a Graph (what the training suite does): P A Pᵀ of its own tensors with its
    options and its self-loop count; SpMM and a GCN give the original results in the user's order."""
    looped = SMALL["loops"]
    user = at.Graph.from_csr_graph(looped, tune=False)
    rg = at.reorder(user, method)
    assert rg.applied and rg.graph.tune is False and rg.cost_s >= 0
    assert rg.graph._canon_loops == looped.n_rows == user._canon_loops
    x = torch.randn(looped.n_rows, 8, dtype=torch.float64)
    torch.testing.assert_close(rg.to_user(at.spmm(rg.graph, rg.to_internal(x))), at.spmm(user, x))
    torch.manual_seed(0)
    net = Net().double()
    torch.testing.assert_close(at.Reordered(net, rg)(x), net(x, user), rtol=1e-10, atol=1e-10)


def test_a_named_method_on_a_csr_graph_builds_no_canonical_graph_twice(monkeypatch):
    """The relabelled CSR is canonical by construction: no Graph.from_coo build for it."""
    calls = []
    real = at.Graph.from_coo.__func__
    monkeypatch.setattr(at.Graph, "from_coo", classmethod(lambda cls, *a, **k: calls.append(1) or real(cls, *a, **k)))
    rg = at.reorder(SHUFFLED, "labelprop")
    assert calls == [] and rg.graph.weight is not None     # the generated values are kept
    np.testing.assert_array_equal(rg.perm.numpy(), reorder.order(SHUFFLED, "labelprop"))


# ---- graphs.generated: large generated graphs kept on disk

@pytest.fixture
def graph_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSAGE_GRAPH_CACHE_DIR", str(tmp_path / "graphs"))
    monkeypatch.setattr(generated, "CACHE_MIN_NNZ", 1000)
    return tmp_path / "graphs"


def test_a_generated_graph_round_trips_through_the_cache(graph_cache, monkeypatch):
    from autosage_cli.graphs import synthetic

    first = generate("power-law", {**BLOCKS, "shuffle": 1}, seed=2)
    assert len(list(graph_cache.glob("power-law-*.npz"))) == 1
    monkeypatch.setattr(synthetic, "_generated", lambda *a: pytest.fail("generated again, not loaded"))
    again = generate("power-law", {**BLOCKS, "shuffle": 1}, seed=2)
    assert again.fingerprint == first.fingerprint and again.source == first.source
    np.testing.assert_array_equal(again.indices, first.indices)


def test_a_changed_parameter_seed_or_code_misses_the_cache(graph_cache, monkeypatch):
    base = generate("power-law", BLOCKS)
    other = generate("power-law", {**BLOCKS, "locality": 0.7})
    reseeded = generate("power-law", BLOCKS, seed=1)
    assert len({base.fingerprint, other.fingerprint, reseeded.fingerprint}) == 3
    assert len(list(graph_cache.glob("*.npz"))) == 3
    monkeypatch.setattr(generated, "code_hash", lambda: "edited-generators")
    assert generated.load(generated.key_of("power-law", dict(base.source["params"]), 0), {}) is None


def test_a_damaged_entry_is_generated_again_and_a_disabled_cache_writes_nothing(graph_cache, monkeypatch):
    base = generate("power-law", BLOCKS)
    (path,) = graph_cache.glob("*.npz")
    path.write_bytes(path.read_bytes()[:1000])             # truncated
    assert generate("power-law", BLOCKS).fingerprint == base.fingerprint
    monkeypatch.setenv("AUTOSAGE_GRAPH_CACHE", "0")
    generate("power-law", {**BLOCKS, "max": 199})
    assert len(list(graph_cache.glob("*.npz"))) == 1
