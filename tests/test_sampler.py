"""The mini-batch suite's neighbour sampler (autosage_cli.torch.sampler) on a hand-made graph, on
CPU tensors: seeds first, ids in range, every edge a real one, the fanout per node and hop,
repeats with replacement, nodes without neighbours, determinism under a seed, uniform draws."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the sampler needs it")

from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.torch.sampler import NeighborSampler, seed_batches  # noqa: E402

# Edges j -> i, row i listing its sources j (autosage_cli.torch.Graph's orientation):
#   0 <- 1, 2, 3;  1 <- 4;  2 <- 0, 5;  3 <- (none);  4 <- 0, 1, 2, 3;  5 <- 6;  6 <- 3;  7 <- (none)
SOURCES = {0: [1, 2, 3], 1: [4], 2: [0, 5], 3: [], 4: [0, 1, 2, 3], 5: [6], 6: [3], 7: []}


def hand_graph():
    rowptr, col = [0], []
    for i in range(len(SOURCES)):
        col += SOURCES[i]
        rowptr.append(len(col))
    return torch.tensor(rowptr), torch.tensor(col)


def sampler(fanouts=(3, 2), seed=0):
    rowptr, col = hand_graph()
    return NeighborSampler(rowptr, col, fanouts, torch.Generator().manual_seed(seed))


def hop_of_nodes(batch):
    """Local id -> the hop that added it (0: the seeds)."""
    hops, at = {}, 0
    for hop, count in enumerate(batch.num_sampled_nodes):
        hops.update({i: hop for i in range(at, at + count)})
        at += count
    return hops


def test_seeds_come_first_and_every_edge_is_a_graph_edge_in_local_ids():
    batch = sampler().sample(torch.tensor([4, 0]))
    n_id = batch.n_id.tolist()
    assert n_id[:2] == [4, 0] and batch.batch_size == 2
    assert len(set(n_id)) == len(n_id) and all(0 <= v < len(SOURCES) for v in n_id)
    src, dst = batch.edge_index
    assert batch.edge_index.shape[0] == 2 and int(batch.edge_index.max()) < batch.num_nodes
    assert all(n_id[s] in SOURCES[n_id[d]] for s, d in zip(src.tolist(), dst.tolist()))
    assert sum(batch.num_sampled_nodes) == batch.num_nodes
    assert sum(batch.num_sampled_edges) == src.numel()
    # each hop's new nodes come in increasing global id, after the seeds
    hops = hop_of_nodes(batch)
    for hop in range(1, len(batch.num_sampled_nodes)):
        ids = [n_id[i] for i, h in hops.items() if h == hop]
        assert ids == sorted(ids)


@pytest.mark.parametrize("fanouts", [(3, 2), (5, 1, 4)])
def test_each_node_draws_its_hops_fanout_and_a_node_without_neighbours_none(fanouts):
    batch = sampler(fanouts).sample(torch.tensor([0, 3, 7]))
    n_id, hops = batch.n_id.tolist(), hop_of_nodes(batch)
    drawn = torch.bincount(batch.edge_index[1], minlength=batch.num_nodes).tolist()
    for local, count in enumerate(drawn):
        hop = hops[local]                       # a node is expanded in the hop after it joined
        expected = fanouts[hop] if hop < len(fanouts) and SOURCES[n_id[local]] else 0
        assert count == expected, (n_id[local], hop, count)
    assert drawn[1] == drawn[2] == 0            # seeds 3 and 7 have no neighbours


def test_draws_are_with_replacement_so_edges_repeat():
    # node 1's only neighbour is 4: three draws give the same edge three times
    batch = sampler((3,)).sample(torch.tensor([1]))
    assert batch.n_id.tolist() == [1, 4]
    assert batch.edge_index.tolist() == [[1, 1, 1], [0, 0, 0]]


def test_draws_are_uniform_over_a_nodes_neighbours():
    batch = sampler((4000,)).sample(torch.tensor([4]))
    picked = batch.n_id[batch.edge_index[0]].tolist()
    counts = [picked.count(j) for j in SOURCES[4]]
    assert sum(counts) == 4000 and all(850 < c < 1150 for c in counts), counts


def test_the_same_seed_gives_the_same_batches_and_another_seed_others():
    def batches(seed):
        s = sampler((3, 2), seed)
        return [s.sample(seeds) for seeds in seed_batches(8, 3, 5, torch.Generator().manual_seed(seed))]

    first, again, other = batches(0), batches(0), batches(1)
    for a, b in zip(first, again):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert any(not torch.equal(a.edge_index, b.edge_index) or not torch.equal(a.n_id, b.n_id)
               for a, b in zip(first, other))


def test_the_sampler_is_ready_for_the_next_batch():
    """The global -> local map is reset after a batch: a second batch is sampled as if first."""
    s = sampler((2, 2))
    s.sample(torch.tensor([0, 4]))
    again = s.sample(torch.tensor([2]))
    fresh = sampler((2, 2))
    fresh.sample(torch.tensor([0, 4]))           # the same draws before, so the same state
    assert torch.equal(again.n_id, fresh.sample(torch.tensor([2])).n_id)
    assert again.n_id[0] == 2 and int(s._local.max()) == -1


def test_seed_batches_are_distinct_within_a_batch_and_cover_an_epoch():
    batches = list(seed_batches(10, 4, 5, torch.Generator().manual_seed(3)))
    assert [b.numel() for b in batches] == [4] * 5
    assert all(len(set(b.tolist())) == 4 for b in batches)
    assert not set(batches[0].tolist()) & set(batches[1].tolist())      # one epoch's permutation
    assert [b.numel() for b in seed_batches(3, 1024, 2)] == [3, 3]      # capped at the graph


@pytest.mark.parametrize("call, message", [
    (lambda: sampler().sample(torch.tensor([1, 1])), "every seed must be distinct"),
    (lambda: sampler().sample(torch.tensor([8])), "out of range"),
    (lambda: sampler((3, 0)), "fanouts must be one or more integers >= 1"),
    (lambda: list(seed_batches(5, 0, 1)), "batch size must be >= 1"),
])
def test_bad_input_is_refused(call, message):
    with pytest.raises(AutosageError, match=message):
        call()
