"""Vectorized building blocks of the synthetic generators: edge keys, sorting and de-duplication,
distinct column sampling, node relabelling and per-edge values.

An edge (r, c) of an n_rows × n_cols graph is the int64 key r·n_cols + c. Sorting keys gives CSR
order (rows ascending, columns sorted inside each row), neighbouring equal keys are duplicates, and
numpy's sort of 124M int64 keys takes ~3 s on one core here — cheaper than any per-row Python work.
Large arrays are processed in chunks of CHUNK items so no step needs several int64 copies of a
100M-edge graph at once.
"""
from __future__ import annotations

import numpy as np

CHUNK = 1 << 23  # 8M items: 64 MiB per int64 temporary

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def index_dtype(n: int, nnz: int) -> type:
    return np.int32 if max(n, nnz) < 2**31 - 1 else np.int64


def row_chunks(counts: np.ndarray, max_items: int = CHUNK, offsets: np.ndarray | None = None):
    """Yield (first_row, end_row, first_item) so each row range holds about max_items items.
    `offsets` is the counts' running sum with a leading 0 (a CSR's indptr): given, nothing of the
    rows' size is allocated (a header of 10^8 mostly empty rows made two 800 MB copies here)."""
    if offsets is None:
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts, dtype=np.int64)])
    ends = offsets[1:]
    n = counts.shape[0]
    row = 0
    while row < n:
        start = int(offsets[row])
        end = int(np.searchsorted(ends, start + max_items, side="right"))
        end = max(end, row + 1)
        yield row, end, start
        row = end


def dedup_sorted(keys: np.ndarray) -> np.ndarray:
    """Unique values of an ascending array (a new array; the input is left as it is)."""
    if keys.size == 0:
        return keys
    keep = np.empty(keys.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def csr_from_keys(keys: np.ndarray, n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the graph whose sorted, unique edge keys are given."""
    idx_t = index_dtype(max(n_rows, n_cols), keys.shape[0])
    bounds = np.arange(n_rows + 1, dtype=np.int64) * n_cols
    indptr = np.searchsorted(keys, bounds, side="left").astype(idx_t)
    indices = np.empty(keys.shape[0], dtype=idx_t)
    for lo in range(0, keys.shape[0], CHUNK):
        hi = min(lo + CHUNK, keys.shape[0])
        indices[lo:hi] = keys[lo:hi] % n_cols
    return indptr, indices


def sorted_unique_keys(parts: list[tuple[np.ndarray, np.ndarray]], n_cols: int) -> np.ndarray:
    """Sorted unique keys of the edges given as (rows, cols) array pairs (any order, duplicates ok)."""
    total = sum(int(rows.shape[0]) for rows, _ in parts)
    keys = np.empty(total, dtype=np.int64)
    pos = 0
    for rows, cols in parts:
        m = rows.shape[0]
        np.multiply(rows, n_cols, out=keys[pos:pos + m], dtype=np.int64)
        keys[pos:pos + m] += cols
        pos += m
    keys.sort()
    return dedup_sorted(keys)


def distinct_uniform_columns(degrees: np.ndarray, lo: np.ndarray, span: np.ndarray,
                             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """For each row i, degrees[i] distinct columns drawn from [lo[i], lo[i] + span[i]), sorted.

    Stars and bars: draw degrees[i] values from [0, span − degree] with replacement, sort them inside
    the row and add each one's rank, which makes them strictly increasing. Exact degrees, one sort, no
    retry loop. (Subsets whose columns touch are slightly under-weighted — by the multiset factor of
    the draw — which is immaterial when the degree is well below the span.)
    Returns (rows, cols) as int64 arrays in CSR order."""
    degrees = np.asarray(degrees, dtype=np.int64)
    slack = np.asarray(span, dtype=np.int64) - degrees + 1  # choices for each sorted draw
    if np.any(slack < 1):
        raise ValueError("a row asks for more distinct columns than its span holds")
    n = degrees.shape[0]
    m = int(degrees.sum())
    rows = np.repeat(np.arange(n, dtype=np.int64), degrees)
    width = int(slack.max()) if n else 1
    keys = (rng.random(m) * slack[rows]).astype(np.int64)
    np.minimum(keys, slack[rows] - 1, out=keys)  # guard the float edge case u·slack == slack
    keys += rows * width
    keys.sort()
    draws = keys - rows * width
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degrees, out=starts[1:])
    rank = np.arange(m, dtype=np.int64) - starts[rows]
    cols = np.asarray(lo, dtype=np.int64)[rows] + draws + rank
    return rows, cols


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x * _MIX1
    z ^= z >> np.uint64(30)
    z *= _MIX2
    z ^= z >> np.uint64(27)
    z ^= z >> np.uint64(31)
    return z


def edge_values(keys: np.ndarray, seed: int, weighted: bool,
                relabelled_from: tuple[int, np.ndarray] | None = None) -> np.ndarray:
    """float32 value of each edge: 1.0, or when weighted a hash of (edge key, seed) mapped to
    [0.5, 1.5). A pure function of the edge, so a relabelled copy of a graph carries exactly the same
    values: pass relabelled_from=(n, inverse permutation) to hash each edge's key before relabelling
    (products-like-shuffled is products-like with ids permuted, values included).
    Non-unit values make a kernel that forgets A's values fail verification."""
    out = np.empty(keys.shape[0], dtype=np.float32)
    if not weighted:
        out.fill(1.0)
        return out
    salt = np.uint64((seed * 0x2545F4914F6CDD1D + 1) % 2**64)
    with np.errstate(over="ignore"):
        for lo in range(0, keys.shape[0], CHUNK):
            hi = min(lo + CHUNK, keys.shape[0])
            chunk = keys[lo:hi]
            if relabelled_from is not None:
                n, inverse = relabelled_from
                rows, cols = np.divmod(chunk, n)
                chunk = inverse[rows] * n + inverse[cols]
            z = chunk.astype(np.uint64) + salt
            z *= _GOLDEN
            z = _splitmix64(z)
            out[lo:hi] = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24) + np.float32(0.5)
    return out


def relabel_keys(keys: np.ndarray, n: int, perm: np.ndarray) -> np.ndarray:
    """Sorted keys of the graph with node v renamed perm[v], rows and columns alike (P A Pᵀ)."""
    out = np.empty_like(keys)
    for lo in range(0, keys.shape[0], CHUNK):
        hi = min(lo + CHUNK, keys.shape[0])
        rows, cols = np.divmod(keys[lo:hi], n)
        out[lo:hi] = perm[rows] * n + perm[cols]
    out.sort()
    return out
