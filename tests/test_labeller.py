"""labelprop's labels computed by the caller (graphs.reorder's `labeller`): the commands hand the
host reorderings torch's labels (on CUDA its kernels'); here on the CPU, where torch runs the
scatter rounds, they are the host's labels, so the order is the same; and a labeller's labels are
what the order clusters, in the reordering report, the benchmark's reordered rows and the
reordering decision alike."""
from __future__ import annotations

import numpy as np
import pytest

from autosage_cli.bench import reordering
from autosage_cli.graphs import clustered, label_propagation, reorder
from autosage_cli.graphs.synthetic import generate

torch = pytest.importorskip("torch", reason="torch is not installed: its labeller needs it")

from autosage_cli.torch import relabel  # noqa: E402


@pytest.fixture(scope="module")
def graph():
    return generate("power-law", {"n": 3000, "nnz": 30_000, "q50": 6, "q90": 20, "q99": 60, "max": 300,
                                  "locality": 0.8, "block": 256, "shuffle": 1})


def test_torch_labels_are_the_hosts(graph):
    np.testing.assert_array_equal(relabel.csr_labels(graph, "cpu"),
                                  label_propagation.propagate(graph.indptr, graph.indices, graph.n_rows))


def test_the_order_clusters_the_labellers_labels(graph):
    calls = []

    def labeller(g):
        calls.append(g)
        return relabel.csr_labels(g, "cpu")
    assert np.array_equal(reorder.order(graph, "labelprop", labeller=labeller), reorder.order(graph, "labelprop"))
    assert calls == [graph]
    odd = np.arange(graph.n_rows) % 7              # other labels: another order, the labeller's
    np.testing.assert_array_equal(reorder.order(graph, "labelprop", labeller=lambda g: odd),
                                  clustered.cluster_order(odd))


def test_the_report_and_the_decision_take_the_labeller(graph, tmp_path):
    from autosage_cli.scheduler.decisions import reorder_decision

    seen = []

    def labeller(g):
        seen.append("labels")
        return relabel.csr_labels(g, "cpu")
    reordered, perm, report = reordering.reorder(graph, "labelprop", labeller)
    assert seen == ["labels"] and report.method == "labelprop"
    np.testing.assert_array_equal(perm, reorder.order(graph, "labelprop"))
    cand, cand_perm = reorder_decision._candidate(graph, "labelprop", None, 0.3, 64, 4, None, labeller)
    assert seen == ["labels", "labels"] and cand.method == "labelprop"
    np.testing.assert_array_equal(cand_perm, perm)


def test_without_cuda_the_commands_keep_the_array_modules_sorts():
    from autosage_cli.commands.reorder import device_labeller

    assert (device_labeller() is None) == (not torch.cuda.is_available())
