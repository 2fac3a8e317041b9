"""Label propagation's CUDA kernels (cuda/util_labelprop.cu through torch/cuda_label_propagation.py)
on a device: the very labels of torch's scatter rounds (label_propagation.propagate_scatter, on the
same device) and of the host's NumPy sorts (graphs.label_propagation.propagate), round by round and
to the end, on graphs with every shape the kernels treat apart: empty rows, self-loops, isolated
vertices, pairs stored both ways, vertices at each table's limit (256, 257, 2048, 2049 votes), hubs
of 25k votes (global tables), a shuffled block graph, and edges in no particular order; with 32- and
64-bit row pointers. relabel.order(..., "labelprop") gives the permutation it gave before. The CPU
side (vote lists, tables, the round driver) is tests/test_label_propagation_kernel.py."""
from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.graphs import label_propagation as host_lp, reorder
from autosage_cli.graphs.csr import canonical_csr
from autosage_cli.graphs.synthetic import generate
from graph_shapes import hurtful_shapes

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

BOUNDARY_VOTES = (256, 257, 2048, 2049)   # kernels/util_labelprop.py: WARP_MAX_VOTES, BLOCK_MAX_VOTES


def hubs_graph(seed: int = 0):
    """50k vertices: a random directed background on the first 40k with self-loops on every fifth
    and 30% of its edges stored both ways; 5k isolated vertices; 1k vertices with empty rows that
    only receive edges; vertices with exactly BOUNDARY_VOTES votes (and one of 255 votes plus a
    self-loop); three hubs with 20k out-edges, 5k of them stored both ways, linked to each other."""
    rng = np.random.default_rng(seed)
    n, base = 50_000, 40_000
    src = rng.integers(0, base, 300_000)
    dst = rng.integers(0, base, 300_000)
    back = rng.random(src.size) < 0.3
    rows, cols = [src, dst[back]], [dst, src[back]]
    loops = np.arange(0, base, 5)
    rows.append(loops)
    cols.append(loops)
    receivers = np.arange(45_000, 46_000)                        # empty rows, votes from their column
    rows.append(rng.integers(0, base, 4 * receivers.size))
    cols.append(np.repeat(receivers, 4))
    for i, votes in enumerate(BOUNDARY_VOTES):                    # row only: votes = row length
        rows.append(np.full(votes, 46_000 + i))
        cols.append(rng.choice(base, votes, replace=False))
    rows.append(np.full(256, 46_010))                             # 255 votes and a self-loop: 257
    cols.append(np.append(rng.choice(base, 255, replace=False), 46_010))
    hubs = np.arange(49_990, 49_993)
    for hub in hubs:
        out = rng.choice(base, 20_000, replace=False)
        rows += [np.full(out.size, hub), out[:5_000], hubs[hubs != hub]]
        cols += [out, np.full(5_000, hub), np.full(2, hub)]
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return canonical_csr(sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr())


def small_graphs():
    return {**hurtful_shapes(), "loops-only": canonical_csr(sp.eye(6, format="csr"))}


BUILDERS = {
    "hubs": hubs_graph,
    "power-law-shuffled": lambda: generate("power-law", {
        "n": 100_000, "nnz": 2_000_000, "q50": 12, "q90": 40, "q99": 300, "max": 20_000, "locality": 0.8,
        "block": 2048, "shuffle": 1}),
    "blocks-shuffled": lambda: generate("power-law", {
        "n": 100_000, "nnz": 1_500_000, "q50": 10, "q90": 30, "q99": 100, "max": 1000, "locality": 0.8,
        "block": 1024, "shuffle": 1}),
    "hub-200k": lambda: generate("hub-200k"),
}


@pytest.fixture(scope="module", params=list(BUILDERS))
def case(request):
    """(name, CSRGraph, (rowptr, row, col) on the GPU, the host's labels)."""
    from autosage_cli.torch import relabel

    g = BUILDERS[request.param]()
    rowptr, row, col, _ = relabel.csr_tensors(g, "cuda")
    kernel_labels(row[:3], col[:3], g.n_rows)   # the module built before anything is timed
    return request.param, g, (rowptr, row, col), host_lp.propagate(g.indptr, g.indices, g.n_rows)


def kernel_labels(row, col, n, **kwargs):
    """The kernels' labels, strictly: a fallback to the scatters (a warning) fails the test."""
    from autosage_cli.torch import cuda_label_propagation as clp

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels = clp.propagate(row, col, n, **kwargs)
    assert labels is not None, "the kernels did not take the graph"
    assert labels.is_cuda and labels.dtype == torch.int64
    return labels.cpu().numpy()


def test_the_kernels_labels_are_the_scatters_and_the_hosts(case):
    from autosage_cli.torch import label_propagation as tlp

    name, g, (_, row, col), expected = case
    torch.cuda.synchronize()
    started = time.perf_counter()
    got = kernel_labels(row, col, g.n_rows)
    kernel_s = time.perf_counter() - started
    np.testing.assert_array_equal(got, expected)
    torch.cuda.synchronize()
    started = time.perf_counter()
    scatter = tlp.propagate_scatter(row, col, g.n_rows)
    torch.cuda.synchronize()
    scatter_s = time.perf_counter() - started
    np.testing.assert_array_equal(scatter.cpu().numpy(), expected)
    print(f"{name}: {g.nnz:,} edges, kernels {kernel_s * 1e3:.1f} ms, scatters {scatter_s * 1e3:.1f} ms")


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_every_round_is_the_hosts(case, rounds):
    """The first rounds alone (round 0 votes over all-distinct labels: the hubs' tables full of
    distinct keys), and every round to the cap with no early stop."""
    name, g, (_, row, col), _ = case
    np.testing.assert_array_equal(kernel_labels(row, col, g.n_rows, max_rounds=rounds),
                                  host_lp.propagate(g.indptr, g.indices, g.n_rows, max_rounds=rounds))
    if rounds == 3 and name == "hubs":
        np.testing.assert_array_equal(kernel_labels(row, col, g.n_rows, settled=0.0),
                                      host_lp.propagate(g.indptr, g.indices, g.n_rows, settled=0.0))


def test_64_bit_row_pointers_give_the_same_labels_and_leave_the_tables_empty(case):
    from autosage_cli.torch import cuda_label_propagation as clp

    name, g, (_, row, col), expected = case
    lists = clp.vote_lists(row, col, g.n_rows)
    tabs = clp.tables(lists.votes)
    for index in ("int", "long long"):
        one_round = clp.KernelRound(lists, tabs, g.n_rows, row.device, index=index)
        one_round.build()
        labels = clp.run_rounds(g.n_rows, row.device, one_round, host_lp.MAX_ROUNDS, host_lp.SETTLED)
        np.testing.assert_array_equal(labels.cpu().numpy(), expected)
        # every global table emptied by the rounds that read it (the next call's tables start so)
        assert bool((tabs.keys == -1).all()) and bool((tabs.counts == 0).all()), index
    if name == "hubs":
        votes = lists.votes.cpu().numpy()
        np.testing.assert_array_equal(votes[46_000:46_004], BOUNDARY_VOTES)
        assert tabs.keys.numel() > 0 and votes.max() >= 25_000


def test_edges_in_no_order_give_the_same_labels(case):
    name, g, (_, row, col), expected = case
    order = torch.randperm(row.numel(), device=row.device, generator=torch.Generator(row.device).manual_seed(1))
    np.testing.assert_array_equal(kernel_labels(row[order], col[order], g.n_rows), expected)


def test_the_labelprop_order_is_the_one_it_was(case):
    from autosage_cli.torch import label_propagation as tlp, relabel

    _, g, (rowptr, row, col), _ = case
    perm = relabel.order(rowptr, row, col, "labelprop")
    assert perm.is_cuda
    before = tlp.cluster_order(tlp.propagate_scatter(row, col, g.n_rows))
    assert torch.equal(perm, before)
    # graphs.reorder.order(g, "labelprop") on the host: the clusters of the host's labels
    np.testing.assert_array_equal(perm.cpu().numpy(), reorder.clustered.cluster_order(case[3]))


def test_cuda_tensors_take_the_kernels(monkeypatch):
    from autosage_cli.torch import label_propagation as tlp, relabel

    def refuse(*args, **kwargs):
        raise AssertionError("CUDA tensors ran the scatter rounds")

    g = hubs_graph(seed=1)
    _, row, col, _ = relabel.csr_tensors(g, "cuda")
    monkeypatch.setattr(tlp, "propagate_scatter", refuse)
    np.testing.assert_array_equal(tlp.propagate(row, col, g.n_rows).cpu().numpy(),
                                  host_lp.propagate(g.indptr, g.indices, g.n_rows))


@pytest.mark.parametrize("name", list(small_graphs()))
def test_small_shapes(name):
    from autosage_cli.torch import relabel

    g = small_graphs()[name]
    rowptr, row, col, _ = relabel.csr_tensors(g, "cuda")
    np.testing.assert_array_equal(kernel_labels(row, col, g.n_rows),
                                  host_lp.propagate(g.indptr, g.indices, g.n_rows))
    np.testing.assert_array_equal(relabel.order(rowptr, row, col, "labelprop").cpu().numpy(),
                                  reorder.order(g, "labelprop"))


def test_a_graph_without_edges_keeps_its_labels():
    from autosage_cli.torch import label_propagation as tlp

    empty = torch.zeros(0, dtype=torch.int64, device="cuda")
    assert torch.equal(tlp.propagate(empty, empty, 7), torch.arange(7, device="cuda"))


def test_the_commands_labeller_gives_the_hosts_order(case):
    """`autosage reorder --method labelprop` (and the benchmark's and the decision's reorderings) on a
    GPU: the labels by torch's kernels from the host CSR, the order the host's."""
    from autosage_cli.commands.reorder import device_labeller
    from autosage_cli.torch import relabel

    _, g, _, expected = case
    labeller = device_labeller()
    assert labeller is relabel.csr_labels
    np.testing.assert_array_equal(labeller(g), expected)
    np.testing.assert_array_equal(reorder.order(g, "labelprop", labeller=labeller),
                                  reorder.clustered.cluster_order(expected))
