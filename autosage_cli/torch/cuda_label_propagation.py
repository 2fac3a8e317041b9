"""Label propagation on CUDA tensors by the kernels of cuda/util_labelprop.cu (kernels/util_labelprop.py):
graphs.label_propagation.propagate's labels exactly (same votes, ties, hashed three quarters,
stopping rule), a round being two launches and one read-back of two counts.

Why: torch.label_propagation's scatter rounds count every (vertex, neighbour's label) pair in one
hash table for the whole graph: scatter_reduce and index_add over 2 x nnz int64 keys (a 2^29-slot
table on products-like-shuffled's 124M edges), several full passes over multi-GB arrays and a
read-back a round; the whole reordering of that graph (2.4M vertices) took 0.55 s on the H200.
Here each vertex counts its own votes in a table of its own (shared memory, or for the few hubs
global memory), reading each edge's neighbour id once as int32 and its label from a 4n-byte array
that stays in L2.

The design, once per call (`vote_lists`, `tables`), then per round (`run_rounds`):
  * a vertex's votes are the labels of A's row and of Aᵀ's row (self-loops skipped in the kernel),
    so no 2 x nnz symmetric list is built: A's rows as given when the edges come in row order (the
    Graph's canonical order; one check), else sorted; Aᵀ's rows by one stable sort of the int32
    columns; row pointers by binary search. Vertex ids are int32 (n < 2^31 - 1), row pointers
    int32 where nnz allows.
  * by its number of votes a vertex is counted by a warp (at most 256, its table in the warp's
    shared memory), a block (at most 2048, the block's shared memory) or a block with a global
    table of its own (a power of two at or above 2 x votes, allocated once: at most
    MAX_TABLE_SLOTS slots, else the scatter rounds run instead).
  * a round reads `labels` and writes `next` (double-buffered: every vertex votes with the old
    labels) and counts the vertices whose vote differs from their label; when that is at most
    SETTLED x n the round's winners are dropped and `labels` is the result (the reference decides
    before it applies), else the buffers swap.

Launches go to torch's current stream with the tensors' addresses (as torch/cuda_heads.py).
"""
from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import torch

from ..graphs.label_propagation import MAX_ROUNDS, SETTLED
from ..kernels import util_labelprop as kernel

INT32_MAX = 2**31 - 1
MAX_TABLE_SLOTS = 1 << 28    # the hubs' global tables: 2 GiB (int32 label and count a slot)


class TableOverflow(RuntimeError):
    """A vote table could not hold its vertex's votes: the tables were sized wrongly (a bug)."""


class VoteLists(NamedTuple):
    """Every vertex's votes: A's rows (rowptr, cols) and Aᵀ's rows (rowptr_t, rows_t: the rows of
    the edges of each column), ids int32, row pointers int64; `votes` = both rows' lengths."""
    rowptr: torch.Tensor
    cols: torch.Tensor
    rowptr_t: torch.Tensor
    rows_t: torch.Tensor
    votes: torch.Tensor


class Tables(NamedTuple):
    """The vertices of more than kernel.WARP_MAX_VOTES votes (`large`, int32) and the global slots
    of those of more than kernel.BLOCK_MAX_VOTES: large[i]'s are offsets[i] .. offsets[i + 1]
    (none when equal) of keys (EMPTY) and counts (0), int32."""
    large: torch.Tensor
    offsets: torch.Tensor
    keys: torch.Tensor
    counts: torch.Tensor


def vote_lists(row: torch.Tensor, col: torch.Tensor, n: int) -> VoteLists:
    """The VoteLists of the edges (row[e], col[e]) of an n-vertex pattern on their device (CPU
    tensors too: the tests check them there). One read-back (the id range and whether the rows
    are in order); AutosageError for an id outside 0..n-1, which the kernels would read past."""
    from ..errors import AutosageError

    checks = torch.stack([row.min().long(), row.max().long(), col.min().long(), col.max().long(),
                          (row[1:] >= row[:-1]).all().long()])
    row_min, row_max, col_min, col_max, in_order = checks.tolist()
    if min(row_min, col_min) < 0 or max(row_max, col_max) >= n:
        raise AutosageError(f"label propagation: a vertex id outside 0..{n - 1} "
                            f"(rows {row_min}..{row_max}, columns {col_min}..{col_max})")
    row32 = row.to(torch.int32).contiguous()
    col32 = col.to(torch.int32).contiguous()
    if in_order:
        row_keys, cols = row32, col32
    else:
        row_keys, order = torch.sort(row32, stable=True)
        cols = col32.index_select(0, order)
        del order
    ids = torch.arange(n + 1, dtype=torch.int32, device=row.device)
    rowptr = torch.searchsorted(row_keys, ids)
    del row_keys
    col_keys, order = torch.sort(col32, stable=True)
    rows_t = row32.index_select(0, order)
    del order
    rowptr_t = torch.searchsorted(col_keys, ids)
    return VoteLists(rowptr, cols, rowptr_t, rows_t, rowptr.diff() + rowptr_t.diff())


def tables(votes: torch.Tensor) -> Tables | None:
    """The Tables for vertices of `votes` votes, or None when the hubs' global tables would take
    more than MAX_TABLE_SLOTS slots. Two read-backs (how many large vertices, how many slots)."""
    large = (votes > kernel.WARP_MAX_VOTES).nonzero().squeeze(1)
    many = votes.index_select(0, large)
    hub = many > kernel.BLOCK_MAX_VOTES
    slots = torch.where(hub, kernel.global_slots(torch.where(hub, many, 1)), 0)
    offsets = torch.zeros(large.numel() + 1, dtype=torch.int64, device=votes.device)
    torch.cumsum(slots, 0, out=offsets[1:])
    total = int(offsets[-1])
    if total > MAX_TABLE_SLOTS:
        return None
    keys = torch.full((total,), kernel.EMPTY, dtype=torch.int32, device=votes.device)
    counts = torch.zeros(total, dtype=torch.int32, device=votes.device)
    return Tables(large.to(torch.int32), offsets, keys, counts)


Round = Callable[[torch.Tensor, torch.Tensor, int], tuple]


def run_rounds(n: int, device, one_round: Round, max_rounds: int, settled: float) -> torch.Tensor:
    """The labels (int32) after the rounds: one_round(labels, next, round) writes every next[v]
    and returns (vertices whose vote differs from their label, tables that overflowed)."""
    labels = torch.arange(n, dtype=torch.int32, device=device)
    following = torch.empty_like(labels)
    for round_ in range(max_rounds):
        changed, overflowed = one_round(labels, following, round_)
        if overflowed:
            raise TableOverflow(f"label propagation: {overflowed} vote tables overflowed in round {round_}")
        # settled: counted over every vertex's vote, before the moving mask (as the reference)
        if changed <= settled * n:
            break
        labels, following = following, labels
    return labels


class KernelRound:
    """one_round for run_rounds: the kernels' round on torch's current stream, then a read-back of
    its two counts. Holds every tensor whose address it passes. `index`: the row pointers' type,
    "int" where the edges allow, else "long long" (a test passes "long long" to run that module)."""

    def __init__(self, lists: VoteLists, tabs: Tables, n: int, device: torch.device, index: str | None = None):
        self.index = index or ("int" if int(lists.rows_t.numel()) <= INT32_MAX else "long long")
        kind = torch.int32 if self.index == "int" else torch.int64
        self.n, self.n_large, self.device = n, int(tabs.large.numel()), device
        self.counters = torch.zeros(2, dtype=torch.int64, device=device)   # read as unsigned 64-bit
        self.tensors = {"rowptr": lists.rowptr.to(kind), "cols": lists.cols,
                        "rowptr_t": lists.rowptr_t.to(kind), "rows_t": lists.rows_t,
                        "large": tabs.large, "offsets": tabs.offsets, "table_keys": tabs.keys,
                        "table_counts": tabs.counts, "counters": self.counters}
        self.p = {name: t.data_ptr() for name, t in self.tensors.items()}

    def build(self) -> None:
        """The kernels' module (compiled or loaded on first use), on the device."""
        from .cuda import _on_torch_stream

        with _on_torch_stream(self.device):
            kernel.module(self.index)

    def __call__(self, labels: torch.Tensor, following: torch.Tensor, round_: int) -> tuple:
        from .cuda import _on_torch_stream, _stream

        self.counters.zero_()
        with _on_torch_stream(self.device):
            kernel.labelprop_round({**self.p, "labels": labels.data_ptr(), "next": following.data_ptr()},
                                   self.n, self.n_large, round_, self.index, _stream(self.device).ptr)
        return tuple(self.counters.tolist())


def propagate(row: torch.Tensor, col: torch.Tensor, n: int, max_rounds: int = MAX_ROUNDS,
              settled: float = SETTLED) -> torch.Tensor | None:
    """Labels (int64, on row's CUDA device) of the n x n pattern with edges (row[e], col[e]), n >= 1
    and at least one edge: graphs.label_propagation.propagate's. None where the kernels do not
    take the graph (n >= 2^31 - 1; the hubs' tables past MAX_TABLE_SLOTS) or their module could
    not be built (a warning says why): the caller runs the scatter rounds then. TableOverflow if a
    table overflowed (never expected: the labels would be wrong)."""
    if n >= INT32_MAX:
        return None
    lists = vote_lists(row, col, n)
    tabs = tables(lists.votes)
    if tabs is None:
        return None
    one_round = KernelRound(lists, tabs, n, row.device)
    try:
        one_round.build()
    except Exception as exc:   # a failure is an outcome: the scatter rounds give the same labels
        from ..errors import one_line

        warnings.warn(f"label propagation's kernels are not usable ({one_line(exc)}); "
                      "running torch's scatter rounds", RuntimeWarning, stacklevel=2)
        return None
    return run_rounds(n, row.device, one_round, max_rounds, settled).to(torch.int64)
