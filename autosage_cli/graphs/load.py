"""Load any graph autosage accepts: a file (by extension) or a dataset name (the registry, OGB, reddit,
synthetic presets) — and reload one from the `source` record a CSRGraph carries (used by replay).

    load_graph(path=None, dataset=None, root="datasets", symmetrize=False) -> CSRGraph
    load_source(source) -> CSRGraph

Sources: {"path": absolute path, "symmetrize": bool} for files; {"dataset": name, "root": absolute
root, "symmetrize": bool} for named datasets; {"generator": preset or kind, "params": {...}, "seed": n}
for synthetic graphs (plus "symmetrize" when it was asked for).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import AutosageError
from . import datasets, ogb
from .csr import RELOADABLE_SOURCE_KEYS, CSRGraph, from_arrays
from .edges import csr_from_keys
from .readers import read_graph_file, read_npz
from .synthetic import generate

REDDIT_FILES = ("reddit/reddit_graph.npz", "reddit/raw/reddit_graph.npz")  # DGL's layout, PyG's
REDDIT_URL = "https://data.dgl.ai/dataset/reddit.zip"


def load_graph(path: str | Path | None = None, dataset: str | None = None,
               root: str | Path = "datasets", symmetrize: bool = False) -> CSRGraph:
    """A canonical CSRGraph from exactly one of a file path or a dataset name."""
    if (path is None) == (dataset is None):
        raise AutosageError("give exactly one of a graph file or a dataset name")
    if path is not None:
        resolved = Path(path).expanduser().resolve()
        graph = read_graph_file(resolved, {"path": str(resolved), "symmetrize": bool(symmetrize)})
    else:
        graph = _load_dataset(str(dataset), Path(root).expanduser().resolve(), bool(symmetrize))
    return symmetrized(graph) if symmetrize else graph


def _load_dataset(name: str, root: Path, symmetrize: bool) -> CSRGraph:
    entry = datasets.lookup(name)
    source = {"dataset": entry.name, "root": str(root), "symmetrize": symmetrize}
    if entry.loader == "synthetic":
        return generate(entry.name, seed=0)  # its source records generator, parameters and seed
    if entry.loader in ("mtx", "npz", "edgelist"):
        graph = read_graph_file(datasets.shipped_path(entry), source)
        _check_expected(entry, graph)
        return graph
    if entry.loader == "ogb":
        return ogb.load_ogb(entry.name, entry.params, root, source)
    if entry.loader == "reddit":
        return load_reddit(root, source)
    raise AutosageError(f"dataset {entry.name!r} has unknown loader {entry.loader!r}")


def _check_expected(entry: datasets.DatasetEntry, graph: CSRGraph) -> None:
    """A shipped file must still be the graph the registry describes (catches a damaged copy)."""
    want_n, want_nnz = entry.expect.get("n"), entry.expect.get("nnz")
    if (want_n is not None and graph.n_rows != want_n) or (want_nnz is not None and graph.nnz != want_nnz):
        raise AutosageError(f"dataset {entry.name}: {datasets.shipped_path(entry)} has n={graph.n_rows}, "
                            f"nnz={graph.nnz}; the registry expects n={want_n}, nnz={want_nnz}")


def load_reddit(root: Path, source: dict) -> CSRGraph:
    """DGL/PyG's reddit_graph.npz (a SciPy COO saved with save_npz), as a pattern: value 1.0."""
    for relative in REDDIT_FILES:
        path = root / relative
        if path.is_file():
            graph = read_npz(path, source)
            ones = np.ones(graph.nnz, dtype=np.float32)
            return from_arrays(graph.indptr, graph.indices, ones, graph.shape, source)
    raise AutosageError(f"reddit: {root / REDDIT_FILES[0]} not found; download {REDDIT_URL} and unzip "
                        f"it into {root / 'reddit'}")


def symmetrized(graph: CSRGraph) -> CSRGraph:
    """A ∪ Aᵀ: every stored (i, j) also stored as (j, i). A's value is kept where A has the entry,
    Aᵀ's is used where only Aᵀ has it. Square graphs only."""
    if graph.n_rows != graph.n_cols:
        raise AutosageError(f"cannot symmetrize a non-square graph ({graph.n_rows}x{graph.n_cols})")
    n = graph.n_rows
    rows = np.repeat(np.arange(n, dtype=np.int64), graph.row_degrees())
    cols = graph.indices.astype(np.int64)
    keys = rows * n + cols                     # ascending: CSR order
    mirrored = cols * n + rows                 # the transpose's entries, unsorted
    del rows, cols
    pos = np.searchsorted(keys, mirrored)
    present = np.zeros(mirrored.shape[0], dtype=bool)
    inside = pos < keys.shape[0]
    present[inside] = keys[pos[inside]] == mirrored[inside]
    extra = ~present
    union = np.concatenate([keys, mirrored[extra]])
    values = np.concatenate([graph.values, graph.values[extra]])
    order = np.argsort(union, kind="stable")
    union, values = union[order], values[order]
    indptr, indices = csr_from_keys(union, n, n)
    return from_arrays(indptr, indices, values, graph.shape, {**graph.source, "symmetrize": True})


def load_source(source: dict) -> CSRGraph:
    """Reload a graph from the `source` record of a CSRGraph (cache entries and results keep it)."""
    if not isinstance(source, dict):
        raise AutosageError(f"graph source must be an object, got {type(source).__name__}")
    symmetrize = bool(source.get("symmetrize", False))
    if "path" in source:
        return load_graph(path=source["path"], symmetrize=symmetrize)
    if "generator" in source:
        graph = generate(source["generator"], source.get("params"), source.get("seed", 0))
        return symmetrized(graph) if symmetrize else graph
    if "dataset" in source:
        return load_graph(dataset=source["dataset"], root=source.get("root", "datasets"),
                          symmetrize=symmetrize)
    raise AutosageError(f"graph source {source!r} names none of {', '.join(RELOADABLE_SOURCE_KEYS)}")
