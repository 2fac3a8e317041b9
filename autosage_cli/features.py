"""Graph features the scheduler ranks kernels by: size, row-degree distribution, skew, empty rows,
how much work the heaviest rows hold, locality of the column pattern, and symmetry.

All vectorized (O(nnz), chunked where a per-nonzero temporary would be large): ~3 s on a 115M-nonzero
graph on one core here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import scipy.sparse as sp

from .graphs.csr import CSRGraph
from .graphs.edges import CHUNK, row_chunks

DEGREE_KEYS = ("mean", "min", "max", "q50", "q90", "q99", "cv")


@dataclass(frozen=True)
class GraphFeatures:
    n_rows: int
    n_cols: int
    nnz: int
    degree_mean: float
    degree_min: int
    degree_max: int
    degree_q50: float
    degree_q90: float
    degree_q99: float
    degree_cv: float      # standard deviation / mean of the row degrees
    skew: float           # q99 / q50 (q50 taken as at least 1, so empty-ish graphs stay finite)
    empty_rows: int
    heavy_share: float    # share of the nonzeros in rows whose degree exceeds q99
    locality: float       # mean |col − row| / n_cols: ~1/3 for random columns, ~0 for banded
    symmetric: bool       # structurally: (i, j) stored ⇔ (j, i) stored; values not compared

    def to_dict(self) -> dict:
        """JSON layout: sizes, a nested `degree` object, then the shape measures."""
        flat = asdict(self)
        degree = {k: flat.pop(f"degree_{k}") for k in DEGREE_KEYS}
        return {"n_rows": flat.pop("n_rows"), "n_cols": flat.pop("n_cols"), "nnz": flat.pop("nnz"),
                "degree": degree, **flat}

    @classmethod
    def from_dict(cls, data: dict) -> "GraphFeatures":
        flat = {k: v for k, v in data.items() if k != "degree"}
        flat.update({f"degree_{k}": v for k, v in data.get("degree", {}).items()})
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in flat.items() if k in names})


def degree_quantiles(degrees: np.ndarray) -> tuple[float, float, float]:
    if degrees.size == 0:
        return 0.0, 0.0, 0.0
    q50, q90, q99 = np.quantile(degrees, [0.5, 0.9, 0.99])
    return float(q50), float(q90), float(q99)


def locality(graph: CSRGraph, degrees: np.ndarray, chunk: int = CHUNK) -> float:
    """mean |col − row| / n_cols over the nonzeros, summed over chunks of about `chunk` nonzeros."""
    if graph.nnz == 0:
        return 0.0
    total = 0
    for first, end, start in row_chunks(degrees, chunk):
        stop = int(graph.indptr[end])
        rows = np.repeat(np.arange(first, end, dtype=np.int64), degrees[first:end])
        total += int(np.abs(graph.indices[start:stop].astype(np.int64) - rows).sum())
    return total / graph.nnz / graph.n_cols


def is_structurally_symmetric(graph: CSRGraph, degrees: np.ndarray) -> bool:
    """Compare the CSR pattern with its transpose's. Column counts must equal row degrees first
    (one bincount), which rejects most directed graphs without building the transpose."""
    if graph.n_rows != graph.n_cols:
        return False
    if graph.nnz == 0:
        return True
    col_counts = np.bincount(graph.indices, minlength=graph.n_cols)
    if not np.array_equal(col_counts, degrees):
        return False
    # CSR → CSC is a counting sort in SciPy's C++ (row indices come out sorted in each column); int8
    # dummies keep the copy small.
    pattern = sp.csr_matrix((np.ones(graph.nnz, dtype=np.int8), graph.indices, graph.indptr),
                            shape=graph.shape)
    transposed = pattern.tocsc()
    return bool(np.array_equal(transposed.indptr, graph.indptr)
                and np.array_equal(transposed.indices, graph.indices))


def compute_features(graph: CSRGraph) -> GraphFeatures:
    degrees = graph.row_degrees()
    n = graph.n_rows
    q50, q90, q99 = degree_quantiles(degrees)
    mean = graph.nnz / n
    std = float(degrees.std()) if n else 0.0
    heavy = int(degrees[degrees > q99].sum())
    return GraphFeatures(
        n_rows=n, n_cols=graph.n_cols, nnz=graph.nnz,
        degree_mean=float(mean), degree_min=int(degrees.min()), degree_max=int(degrees.max()),
        degree_q50=q50, degree_q90=q90, degree_q99=q99,
        degree_cv=std / mean if mean > 0 else 0.0,
        skew=q99 / max(q50, 1.0),
        empty_rows=int(np.count_nonzero(degrees == 0)),
        heavy_share=heavy / graph.nnz if graph.nnz else 0.0,
        locality=locality(graph, degrees),
        symmetric=is_structurally_symmetric(graph, degrees),
    )
