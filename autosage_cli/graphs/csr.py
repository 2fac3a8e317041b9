"""Canonical CSR: the one graph representation every later stage trusts.

Contract: indptr/indices int32 while nnz < 2**31 (int64 beyond), float32 values, column
indices sorted and unique within each row, explicit shape. `canonical_csr` builds it from anything
SciPy understands and validates once; `CSRGraph.fingerprint` hashes *all* of indptr, indices, values
and the shape, so two graphs that differ anywhere never share a cache entry.

The fingerprint is a two-level (tree) hash so it runs on every core: each array is cut into
FINGERPRINT_CHUNK-byte chunks, the chunks are hashed in parallel (hashlib releases the GIL on large
buffers), and one final hash covers the header (version, shape, dtypes, byte lengths, chunk size) and
the ordered chunk digests. Every byte still reaches a hash; the result depends only on the content and
the chunk size, never on the number of threads. SHA-256 because it runs ~2x faster than BLAKE2b where
the CPU has SHA extensions (1.4 vs 0.7 GB/s per core on the 2-core CI machine).
"""
from __future__ import annotations

import functools
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import AutosageError

if TYPE_CHECKING:
    import scipy.sparse as sp

# SciPy is imported where it is used, not here: every command module imports this one, and
# `autosage --help` should not pay ~0.2 s for scipy.sparse.

INT32_LIMIT = 2**31 - 1
FINGERPRINT_VERSION = "csr-sha256-tree-v2"
FINGERPRINT_CHUNK = 8 << 20  # bytes per leaf hash: ~110 leaves on a 115M-nonzero graph


def default_workers() -> int:
    """Threads for the parallel O(nnz) passes (fingerprint, features): the CPUs this process may
    use, at most 32."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(32, n))


def parallel_map(fn, items: list, workers: int | None = None) -> list:
    """fn over items, results in order, on a thread pool when there is more than one item and
    worker (default workers: default_workers())."""
    workers = min(default_workers() if workers is None else max(1, int(workers)), len(items))
    if workers <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


def _sha256(chunk) -> bytes:
    return hashlib.sha256(chunk).digest()


def fingerprint_arrays(shape: tuple[int, int], arrays, *, chunk_bytes: int = FINGERPRINT_CHUNK,
                       workers: int | None = None) -> str:
    """The tree hash behind CSRGraph.fingerprint: SHA-256 of every `chunk_bytes` piece of each array
    (in parallel on `workers` threads), then SHA-256 of the header and the ordered piece digests,
    shown as 40 hex digits. The header fixes the shape, each array's dtype and byte length and the
    chunk size, so the digest list can be cut back into arrays in only one way."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    views = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
    header = "|".join([FINGERPRINT_VERSION, f"{int(shape[0])}x{int(shape[1])}", f"chunk={chunk_bytes}"]
                      + [f"{np.asarray(a).dtype.str}:{v.nbytes}" for a, v in zip(arrays, views)])
    chunks = [v[lo:lo + chunk_bytes] for v in views for lo in range(0, v.nbytes, chunk_bytes)]
    if len(chunks) <= len(views):
        workers = 1   # one chunk per array: a small graph, hashed faster than threads start
    digests = parallel_map(_sha256, chunks, workers)  # in chunk order
    final = hashlib.sha256(header.encode() + b"|")
    for d in digests:
        final.update(d)
    return final.hexdigest()[:40]


@dataclass(frozen=True, eq=False)
class CSRGraph:
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    shape: tuple[int, int]
    # Where the graph came from: {"path": ...} or {"dataset": name, "root": ...} or
    # {"preset"/"kind": ..., "params": {...}, "seed": n}. Recorded in cache entries and results.
    source: dict = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return int(self.shape[0])

    @property
    def n_cols(self) -> int:
        return int(self.shape[1])

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def index_dtype(self) -> np.dtype:
        return self.indices.dtype

    def row_degrees(self) -> np.ndarray:
        return np.diff(self.indptr).astype(np.int64, copy=False)

    def to_scipy(self) -> sp.csr_matrix:
        import scipy.sparse as sp

        return sp.csr_matrix((self.values, self.indices, self.indptr), shape=self.shape)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Tree hash (fingerprint_arrays) of the shape, dtypes and all bytes of indptr, indices and
        values; computed once per graph object."""
        return fingerprint_arrays(self.shape, (self.indptr, self.indices, self.values))

    def describe(self) -> str:
        return f"{self.n_rows}x{self.n_cols}, {self.nnz} nonzeros"


def index_dtype(nnz: int, n: int) -> type:
    """The canonical index type: int32 while nnz and every dimension fit, else int64."""
    return np.int32 if max(nnz, n) <= INT32_LIMIT else np.int64


def validate_shape(n_rows: int, n_cols: int) -> None:
    if n_rows <= 0 or n_cols <= 0:
        raise AutosageError(f"graph dimensions must be positive, got {n_rows}x{n_cols}")


def validate(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
             shape: tuple[int, int]) -> None:
    """Raise AutosageError unless the arrays form a canonical CSR. Vectorized, O(nnz)."""
    n_rows, n_cols = shape
    validate_shape(n_rows, n_cols)
    if indptr.ndim != 1 or indptr.shape[0] != n_rows + 1:
        raise AutosageError(f"indptr has {indptr.shape[0]} entries, expected n_rows + 1 = {n_rows + 1}")
    nnz = indices.shape[0]
    if values.shape[0] != nnz:
        raise AutosageError(f"{values.shape[0]} values for {nnz} column indices")
    if indptr[0] != 0 or indptr[-1] != nnz:
        raise AutosageError(f"indptr must run from 0 to nnz={nnz}, runs {indptr[0]}..{indptr[-1]}")
    if np.any(np.diff(indptr) < 0):  # even with nnz = 0: [0, 1, 0] ends at 0 but is not a CSR
        raise AutosageError("indptr is not monotone")
    if nnz == 0:
        return
    lo, hi = indices.min(), indices.max()
    if lo < 0 or hi >= n_cols:
        raise AutosageError(f"column index out of range: {lo if lo < 0 else hi} not in [0, {n_cols})")
    if not np.isfinite(values).all():
        raise AutosageError("values contain NaN or Inf")
    # Columns strictly increasing inside each row: every step is positive except at row starts.
    step_ok = np.diff(indices.astype(np.int64, copy=False)) > 0
    row_start = np.zeros(nnz, dtype=bool)
    starts = indptr[:-1][np.diff(indptr) > 0]
    row_start[starts] = True
    if not np.all(step_ok | row_start[1:]):
        raise AutosageError("column indices are not sorted and unique within each row")


# The keys of a CSRGraph's `source` that graphs.load.load_source rebuilds a graph from, in the
# order it tries them; a graph built in memory (the Python API on arrays) has none of them.
RELOADABLE_SOURCE_KEYS = ("path", "generator", "dataset")


def replayable_source(source: dict | None) -> bool:
    """Whether `autosage replay` can rebuild a graph from its recorded source (load_source can)."""
    return any((source or {}).get(key) for key in RELOADABLE_SOURCE_KEYS)


def canonical_csr(matrix, source: dict | None = None) -> CSRGraph:
    """Canonical CSR from any SciPy sparse matrix/array: duplicates summed, columns sorted,
    float32 values, int32 indices (int64 from 2**31 nonzeros). Validates once."""
    import scipy.sparse as sp

    if not sp.issparse(matrix):
        raise AutosageError(f"expected a sparse matrix, got {type(matrix).__name__}")
    n_rows, n_cols = (int(s) for s in matrix.shape)
    validate_shape(n_rows, n_cols)
    csr = sp.csr_matrix(matrix)
    if csr.nnz and not np.isfinite(csr.data).all():
        raise AutosageError("values contain NaN or Inf")
    csr.sum_duplicates()  # also sorts indices
    idx_t = index_dtype(csr.nnz, max(n_rows, n_cols))
    indptr = np.ascontiguousarray(csr.indptr, dtype=idx_t)
    indices = np.ascontiguousarray(csr.indices, dtype=idx_t)
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf: validate names it
        values = np.ascontiguousarray(csr.data, dtype=np.float32)
    validate(indptr, indices, values, (n_rows, n_cols))
    return CSRGraph(indptr, indices, values, (n_rows, n_cols), dict(source or {}))


def from_arrays(indptr, indices, values, shape, source: dict | None = None) -> CSRGraph:
    """Canonical CSR from raw arrays that must already be canonical (validated, not repaired)."""
    n_rows, n_cols = (int(s) for s in shape)
    validate_shape(n_rows, n_cols)
    idx_t = index_dtype(len(indices), max(n_rows, n_cols))
    indices = np.asarray(indices)
    if indices.size and indices.dtype != idx_t:
        # Check before narrowing: an int64 index of 2**32 + 1 would wrap to 1 and pass validation.
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= n_cols:
            raise AutosageError(f"column index out of range: {lo if lo < 0 else hi} not in [0, {n_cols})")
    indptr = np.ascontiguousarray(indptr, dtype=idx_t)
    indices = np.ascontiguousarray(indices, dtype=idx_t)
    with np.errstate(over="ignore"):
        values = np.ascontiguousarray(values, dtype=np.float32)
    validate(indptr, indices, values, (n_rows, n_cols))
    return CSRGraph(indptr, indices, values, (n_rows, n_cols), dict(source or {}))
