"""Host-side row lists and splits (backends/row_partition.py), on NumPy."""
from __future__ import annotations

import numpy as np
import pytest

from autosage_cli.backends.row_partition import chunk_rows, degree_bin_order, partition_rows


def indptr_of(degrees) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(degrees, dtype=np.int64))]).astype(np.int32)


def coverage(indptr, chunk_row, chunk_start, chunk) -> np.ndarray:
    """How many times each nonzero is covered by the chunks."""
    hits = np.zeros(int(indptr[-1]), dtype=np.int64)
    for r, s in zip(chunk_row, chunk_start):
        assert indptr[r] <= s < indptr[r + 1], "chunk starts outside its row"
        hits[s:min(s + chunk, indptr[r + 1])] += 1
    return hits


DEGREE_CASES = {
    "hub": [0, 1, 0, 30_000, 2, 0, 1, 700, 0, 3],
    "uniform": [16] * 50,
    "all_heavy": [600, 513, 4096],
    "one_row": [5000],
    "no_edges": [0, 0, 0],
    "boundary": [256, 257, 512, 255, 0, 768, 769],
}


@pytest.mark.parametrize("name", sorted(DEGREE_CASES))
@pytest.mark.parametrize("split,chunk", [(256, 256), (256, 100), (2048, 512), (1, 1)])
def test_partition_covers_heavy_rows_once_and_light_is_complement(name, split, chunk):
    degrees = np.asarray(DEGREE_CASES[name], dtype=np.int64)
    indptr = indptr_of(degrees)
    part = partition_rows(indptr, split, chunk)
    heavy = set(np.flatnonzero(degrees > split).tolist())
    assert set(part.heavy_rows.tolist()) == heavy
    assert sorted(part.light_rows.tolist()) == sorted(set(range(len(degrees))) - heavy)
    assert len(part.light_rows) + len(part.heavy_rows) == len(degrees)
    hits = coverage(indptr, part.chunk_row, part.chunk_start, chunk)
    in_heavy = np.zeros(int(indptr[-1]), dtype=bool)
    for h in heavy:
        in_heavy[indptr[h]:indptr[h + 1]] = True
    assert np.all(hits[in_heavy] == 1) and np.all(hits[~in_heavy] == 0)
    # Chunk pointers: heavy row i owns exactly its chunks, consecutive.
    ptr = part.heavy_chunk_ptr
    assert ptr[0] == 0 and ptr[-1] == part.n_chunks and np.all(np.diff(ptr) >= 1)
    for i, h in enumerate(part.heavy_rows):
        assert np.all(part.chunk_row[ptr[i]:ptr[i + 1]] == h)
        assert np.all(part.chunk_owner[ptr[i]:ptr[i + 1]] == i)
        assert ptr[i + 1] - ptr[i] == -(-degrees[h] // chunk)
    assert part.chunk_owner.shape == part.chunk_row.shape
    for arr in (part.light_rows, part.heavy_rows, part.chunk_row, part.chunk_start, part.chunk_owner, ptr):
        assert arr.dtype == np.int32


def test_light_rows_longest_bin_first_ids_ascending_within_bin():
    degrees = np.array([1, 200, 3, 0, 100, 2, 130, 1, 0, 64])
    order = degree_bin_order(np.arange(len(degrees)), degrees)
    bins = np.floor(np.log2(degrees[order] + 1.0))
    assert np.all(np.diff(bins) <= 0)
    for b in np.unique(bins):
        ids = order[bins == b]
        assert np.all(np.diff(ids) > 0)
    assert order[-2:].tolist() == [3, 8]  # empty rows last


def test_row_chunks_cover_every_edge_once_and_skip_empty_rows():
    degrees = np.array([0, 5, 0, 1024, 257, 256, 1])
    indptr = indptr_of(degrees)
    item_row, item_start, ptr = chunk_rows(indptr, np.arange(len(degrees)), 256)
    assert np.all(coverage(indptr, item_row, item_start, 256) == 1)
    assert 0 not in item_row.tolist() and 2 not in item_row.tolist()
    assert np.diff(ptr).tolist() == [0, 1, 0, 4, 2, 1, 1]


def test_bad_knobs_refused():
    with pytest.raises(ValueError):
        partition_rows(indptr_of([1, 2]), split=0, chunk=4)
    with pytest.raises(ValueError):
        chunk_rows(indptr_of([1, 2]), np.arange(2), 0)


def test_large_partition_is_fast_and_int32():
    """products-like scale (2.45M rows): built once per input, must stay cheap."""
    rng = np.random.default_rng(0)
    degrees = rng.zipf(1.8, size=2_449_029).clip(max=17_500)
    part = partition_rows(indptr_of(degrees), 256, 256)
    assert part.n_chunks == int(np.sum(-(-degrees[degrees > 256] // 256)))


def power_law_degrees(n=20_000, seed=3):
    rng = np.random.default_rng(seed)
    degrees = np.minimum(np.round(rng.pareto(1.2, n) * 8), 200_000).astype(np.int64)
    degrees[rng.random(n) < 0.05] = 0
    return degrees


@pytest.mark.parametrize("name", sorted(DEGREE_CASES) + ["power_law"])
def test_row_lists_filtered_from_the_graphs_one_order_equal_those_sorted_apart(name):
    # The plans of one graph share degree_order: every split's partition and every threshold's
    # row lists are a filter of it, identical to sorting each list on its own.
    from autosage_cli.backends.row_partition import degree_order, longest_first

    degrees = power_law_degrees() if name == "power_law" else np.asarray(DEGREE_CASES[name], dtype=np.int64)
    indptr = indptr_of(degrees)
    order = degree_order(indptr)
    assert sorted(order.tolist()) == list(range(degrees.size))
    for split, chunk in [(256, 256), (2048, 512), (1024, 1024), (1, 1)]:
        shared, apart = partition_rows(indptr, split, chunk, order), partition_rows(indptr, split, chunk)
        for field in ("light_rows", "heavy_rows", "chunk_row", "chunk_start", "chunk_owner", "heavy_chunk_ptr"):
            assert np.array_equal(getattr(shared, field), getattr(apart, field)), field
            assert getattr(shared, field).dtype == np.int32
    for threshold in (None, 0, 64, 1024):
        for a, b in zip(longest_first(indptr, threshold, order), longest_first(indptr, threshold)):
            assert np.array_equal(a, b) and a.dtype == b.dtype == np.int32


# ------------------------------------------------------------------ stream windows

def window_rows_as_the_kernel_walks_them(indptr, window_row, width):
    """Per window, the (row, first, end) pieces cuda/spmm_stream.cu sums: rows window_row[w] ..
    window_row[w + 1], the last only when it starts inside the window."""
    n_rows, nnz = indptr.size - 1, int(indptr[-1])
    pieces = []
    for w in range(window_row.size - 1):
        e0, e1 = w * width, min((w + 1) * width, nnz)
        for r in range(int(window_row[w]), int(window_row[w + 1]) + 1):
            if r >= n_rows or (r == window_row[w + 1] and indptr[r] >= e1):
                break
            pieces.append((w, r, max(int(indptr[r]), e0), min(int(indptr[r + 1]), e1)))
    return pieces


@pytest.mark.parametrize("name", [*DEGREE_CASES, "window_edges", "empty_runs"])
@pytest.mark.parametrize("width", (1, 4, 256))
def test_edge_windows_give_every_nonzero_and_row_exactly_one_place(name, width):
    from autosage_cli.backends.row_partition import crossing_rows, edge_windows

    degrees = {**DEGREE_CASES,
               # rows ending exactly on window edges, one row of exactly a window, one of two
               "window_edges": [width, width, 2 * width, width - 1, 1, 0, width + 1],
               "empty_runs": [0] * 7 + [3] + [0] * 5 + [9, 0, 0]}[name]
    indptr = indptr_of(degrees).astype(np.int64)
    window_row = edge_windows(indptr, width)
    nnz = int(indptr[-1])
    assert window_row.dtype == np.int32 and window_row.size == max(1, -(-nnz // width)) + 1
    assert window_row[0] == 0 and window_row[-1] == indptr.size - 1
    pieces = window_rows_as_the_kernel_walks_them(indptr, window_row, width)
    hits = np.zeros(nnz, dtype=np.int64)
    seen = {}
    for w, r, s, t in pieces:
        assert indptr[r] <= s <= t <= indptr[r + 1] and w * width <= s
        hits[s:t] += 1
        seen.setdefault(r, []).append(w)
    assert (hits == 1).all()
    assert sorted(seen) == list(range(indptr.size - 1)), "every row, empty ones included, is written"
    crossing = [r for r, windows in sorted(seen.items()) if len(windows) > 1]
    assert crossing_rows(indptr, width).tolist() == crossing
    for r, windows in seen.items():
        start, end = int(indptr[r]), int(indptr[r + 1])
        if end - start == 0 or start // width == (end - 1) // width:
            assert len(windows) == 1, f"row {r} inside one window is summed once"
        else:   # the kernel's tickets expect one partial per window from the first to the last
            assert windows == list(range(start // width, (end - 1) // width + 1)), r


def test_edge_windows_refuse_a_width_below_one():
    from autosage_cli.backends.row_partition import crossing_rows, edge_windows

    for build in (edge_windows, crossing_rows):
        with pytest.raises(ValueError, match="width"):
            build(indptr_of([1, 2]), 0)
