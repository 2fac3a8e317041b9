"""Host-side row lists and splits, built once per input (NumPy only; plans upload them).

`partition_rows(indptr, split, chunk)` separates rows with more than `split` nonzeros ("heavy") from
the rest and cuts each heavy row into chunks of `chunk` nonzeros:

  light_rows       every row with at most `split` nonzeros (empty rows included: their output is
                   written as zeros), ordered by degree bin (floor(log2(degree + 1))), longest bin
                   first, ascending ids within a bin. Longest-first keeps the tail short; bins keep
                   the rows of one warp similar in length (little divergence); ascending ids inside
                   a bin keep the output writes and the community locality of ids.
  heavy_rows       rows above `split`, ascending.
  chunk_row/start  one entry per chunk; the chunks of a heavy row are consecutive and cover its
                   nonzeros exactly once (a chunk ends at min(start + chunk, indptr[row + 1])).
  chunk_owner      the index h (into heavy_rows) of each chunk's row.
  heavy_chunk_ptr  heavy row h owns chunks heavy_chunk_ptr[h] .. heavy_chunk_ptr[h + 1].

`longest_first(indptr, threshold)` gives the rows above `threshold` nonzeros and the others (every
row when threshold is None), each in degree_bin_order: the row lists of the persistent parreduce
SpMM (heavy rows by warps, light rows by groups).

Both orders are one filter of `degree_order(indptr)`, every row longest bin first: a graph's plans
compute it once (dgraph.derived) and pass it as `order`, so a split plan's partition and a
persistent plan's row lists cost one O(rows) pass each, not a sort per (split, chunk) or threshold.

`edge_windows(indptr, width)` gives the rows each window of `width` consecutive nonzeros touches
(the stream SpMM family: a block per window, whatever rows its nonzeros belong to), and
`crossing_rows(indptr, width)` the rows that reach into more than one window.

`row_chunks(indptr, chunk)` cuts *every* non-empty row into chunks (SDDMM: outputs are per edge, so
chunks need no reduction and empty rows need no work). All arrays are int32 (the native kernels take
int32 indices; callers refuse int64 graphs first).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class RowPartition:
    split: int
    chunk: int
    light_rows: np.ndarray
    heavy_rows: np.ndarray
    chunk_row: np.ndarray
    chunk_start: np.ndarray
    chunk_owner: np.ndarray
    heavy_chunk_ptr: np.ndarray

    @property
    def n_chunks(self) -> int:
        return int(self.chunk_row.shape[0])


def degree_bin_order(rows: np.ndarray, degrees: np.ndarray) -> np.ndarray:
    """`rows` reordered by degree bin, longest first; stable (ascending ids) within a bin."""
    bins = np.floor(np.log2(degrees[rows].astype(np.float64) + 1.0)).astype(np.int8)  # 0..63
    # a stable sort of 1-byte keys is NumPy's radix sort: O(rows), not a comparison sort
    return rows[np.argsort(-bins, kind="stable")]


def degree_order(indptr: np.ndarray) -> np.ndarray:
    """Every row (int64 ids) in degree_bin_order: what the row lists of every threshold filter."""
    indptr = np.asarray(indptr, dtype=np.int64)
    return degree_bin_order(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))


def _ordered(order: np.ndarray | None, keep: np.ndarray, degrees: np.ndarray) -> np.ndarray:
    """The rows where `keep` holds, in degree_bin_order: filtered from `order` (degree_order of
    the same graph) when given, which keeps its order, else sorted here."""
    if order is None:
        return degree_bin_order(np.flatnonzero(keep), degrees)
    return order[keep[order]]


def chunk_rows(indptr: np.ndarray, rows: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut each of `rows` into chunks of `chunk` nonzeros: (chunk_row, chunk_start, chunk_ptr) where
    rows[i] owns chunks chunk_ptr[i] .. chunk_ptr[i + 1]. Rows with no nonzeros get no chunk."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    degrees = indptr[rows + 1] - indptr[rows]
    per_row = -(-degrees // chunk)
    chunk_ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(per_row, out=chunk_ptr[1:])
    total = int(chunk_ptr[-1])
    chunk_row = np.repeat(rows, per_row)
    # Position of each chunk within its row: global chunk index minus the row's first chunk index.
    within = np.arange(total, dtype=np.int64) - np.repeat(chunk_ptr[:-1], per_row)
    chunk_start = np.repeat(indptr[rows], per_row) + within * chunk
    return chunk_row.astype(np.int32), chunk_start.astype(np.int32), chunk_ptr.astype(np.int32)


def longest_first(indptr: np.ndarray, threshold: int | None,
                  order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(heavy, light) int32 row lists: rows with more than `threshold` nonzeros and the others
    (empty rows included), each longest degree bin first with ascending ids within a bin. With
    threshold None every row is light. `order`: degree_order(indptr), when already computed."""
    indptr = np.asarray(indptr, dtype=np.int64)
    degrees = np.diff(indptr)
    heavy = degrees > threshold if threshold is not None else np.zeros(degrees.size, dtype=bool)
    return (_ordered(order, heavy, degrees).astype(np.int32),
            _ordered(order, ~heavy, degrees).astype(np.int32))


def partition_rows(indptr: np.ndarray, split: int, chunk: int,
                   order: np.ndarray | None = None) -> RowPartition:
    """The partition of (split, chunk); `order`: degree_order(indptr), when already computed."""
    if split < 1:
        raise ValueError(f"split must be >= 1, got {split}")
    indptr = np.asarray(indptr, dtype=np.int64)
    degrees = np.diff(indptr)
    heavy = degrees > split
    heavy_rows = np.flatnonzero(heavy)
    light_rows = _ordered(order, ~heavy, degrees)
    chunk_row, chunk_start, chunk_ptr = chunk_rows(indptr, heavy_rows, chunk)
    chunk_owner = np.repeat(np.arange(heavy_rows.size, dtype=np.int32), np.diff(chunk_ptr))
    return RowPartition(split, chunk, light_rows.astype(np.int32), heavy_rows.astype(np.int32),
                        chunk_row, chunk_start, chunk_owner, chunk_ptr)


def edge_windows(indptr: np.ndarray, width: int) -> np.ndarray:
    """window_row (int32, n_windows + 1 entries) for windows [w x width, (w + 1) x width) of the
    nonzeros: window_row[w] is the first row that ends after the window starts (a row that began
    in an earlier window continues here), and window w's rows are window_row[w] .. window_row[w + 1]
    (the last of them only when it starts inside the window). An empty row belongs to the window
    that holds its position; window 0 starts at row 0 and the last entry is n_rows. A graph
    without nonzeros has one window, holding every row."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    indptr = np.asarray(indptr, dtype=np.int64)
    n_rows, nnz = indptr.size - 1, int(indptr[-1])
    n_windows = max(1, -(-nnz // width))
    starts = np.arange(n_windows + 1, dtype=np.int64) * width
    window_row = np.searchsorted(indptr[1:], starts, side="right")
    window_row[0], window_row[-1] = 0, n_rows
    return window_row.astype(np.int32)


def crossing_rows(indptr: np.ndarray, width: int) -> np.ndarray:
    """The rows (int32, ascending) whose nonzeros reach into more than one window of `width`: the
    stream family sums their per-window partials in a second launch."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    indptr = np.asarray(indptr, dtype=np.int64)
    start, end = indptr[:-1], indptr[1:]
    spans = (end > start) & ((end - 1) // width > start // width)
    return np.flatnonzero(spans).astype(np.int32)
