"""Uniform neighbour sampling for mini-batch training, in torch (GPU or CPU tensors alike).

`NeighborSampler(rowptr, col, fanouts)` holds a full graph in CSR in the orientation of
`autosage_cli.torch.Graph`: row i lists the sources j of the edges j -> i. `sample(seeds)` builds
one batch hop by hop: every node of the frontier (the seeds, then the nodes the previous hop added)
draws `fanout` of its in-neighbours uniformly *with replacement*, so a node may be drawn twice and
the batch then holds that edge twice (as PyG's samplers with replace=True give it); a node without
neighbours draws none. The batch (PyG's NeighborLoader convention) is

  n_id        the global ids of every node reached, the seeds first (local ids 0..batch_size-1),
              then each hop's new nodes in increasing global id;
  edge_index  (2, E) source -> target edges over all hops, in local ids;
  batch_size  the number of seeds: every layer runs on the whole subgraph and the loss is taken on
              the first batch_size outputs;
  num_sampled_nodes, num_sampled_edges
              per hop, as PyG's batches carry them: the seeds and each hop's new nodes, and each
              hop's edges (its frontier nodes with neighbours x its fanout), in order.

Randomness comes from the `generator` (a torch.Generator on the graph's device), so a seeded
sampler gives the same batches again. `seed_batches` draws the seeds themselves: distinct within a
batch, an epoch's permutation of all nodes cut into batches.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import AutosageError


@dataclass
class Batch:
    """One sampled subgraph: global ids (seeds first), local edges (source -> target), seeds,
    and the nodes and edges each hop added."""
    n_id: torch.Tensor
    edge_index: torch.Tensor
    batch_size: int
    num_sampled_nodes: tuple = ()
    num_sampled_edges: tuple = ()

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.numel())


class NeighborSampler:
    """Seeded uniform sampling with replacement over a CSR graph (see the module's docstring)."""

    def __init__(self, rowptr: torch.Tensor, col: torch.Tensor, fanouts, generator=None):
        if rowptr.dim() != 1 or rowptr.numel() < 1:
            raise AutosageError("rowptr: expected a 1-D tensor of n + 1 offsets")
        self.fanouts = tuple(int(f) for f in fanouts)
        if not self.fanouts or min(self.fanouts) < 1:
            raise AutosageError(f"fanouts must be one or more integers >= 1, got {fanouts!r}")
        self.rowptr, self.col = rowptr.to(torch.int64), col
        self.num_nodes = rowptr.numel() - 1
        self.generator = generator
        # global -> local id of the batch being sampled, -1 elsewhere; reset after every batch,
        # so a batch costs its own nodes, not a pass over the whole graph
        self._local = torch.full((self.num_nodes,), -1, dtype=torch.int64, device=rowptr.device)

    def sample(self, seeds: torch.Tensor) -> Batch:
        local, device = self._local, self.rowptr.device
        seeds = seeds.to(device=device, dtype=torch.int64)
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self.num_nodes):
            raise AutosageError(f"seeds: node id out of range [0, {self.num_nodes})")
        count = seeds.numel()
        local[seeds] = torch.arange(count, device=device)
        if not torch.equal(local[seeds], torch.arange(count, device=device)):
            local[seeds] = -1
            raise AutosageError("seeds: every seed must be distinct (they become local ids 0..batch-1)")
        nodes, sources, targets, edge_counts, frontier = [seeds], [], [], [], seeds
        for fanout in self.fanouts:
            start = self.rowptr[frontier]
            degree = self.rowptr[frontier + 1] - start
            has = degree > 0
            frontier, start, degree = frontier[has], start[has], degree[has]
            # float64 draws: floor(u * degree) stays uniform for degrees far beyond 2^24
            u = torch.rand((frontier.numel(), fanout), dtype=torch.float64, device=device,
                           generator=self.generator)
            pick = (u * degree[:, None]).long().minimum(degree[:, None] - 1)
            drawn = self.col[start[:, None] + pick].reshape(-1).to(torch.int64)
            new = torch.unique(drawn[local[drawn] < 0])       # sorted: deterministic local ids
            local[new] = torch.arange(count, count + new.numel(), device=device)
            count += new.numel()
            sources.append(local[drawn])
            edge_counts.append(int(drawn.numel()))
            targets.append(local[frontier].repeat_interleave(fanout))
            nodes.append(new)
            frontier = new
        n_id = torch.cat(nodes)
        local[n_id] = -1
        edge_index = torch.stack([torch.cat(sources), torch.cat(targets)])
        return Batch(n_id, edge_index, int(seeds.numel()), tuple(int(t.numel()) for t in nodes),
                     tuple(edge_counts))


def seed_batches(num_nodes: int, batch_size: int, count: int, generator=None, device=None):
    """`count` batches of distinct seeds: consecutive slices of a random permutation of the nodes,
    a new permutation when one is used up (an epoch); batch_size is capped at num_nodes."""
    size = min(int(batch_size), int(num_nodes))
    if size < 1:
        raise AutosageError(f"batch size must be >= 1, got {batch_size}")
    perm, at = None, num_nodes
    for _ in range(count):
        if at + size > num_nodes:
            perm, at = torch.randperm(num_nodes, generator=generator, device=device), 0
        yield perm[at:at + size]
        at += size
