"""`Graph`: one sparse graph, held once, for every op and layer that runs on it.

A Graph keeps the canonical CSR (rows sorted, columns sorted and unique per row, duplicates summed)
as torch tensors on the device it was built on, and lazily:
  * its transpose (`graph.T`, itself a Graph) and `t_perm`, the map between the two edge orders
    (edge e of the transpose is edge t_perm[e] of the graph), used by every backward pass;
  * `user_to_canon`, the canonical position of each edge as the user listed it (edge_index order,
    or a SciPy / torch CSR's stored order), so edge weights go in and per-edge outputs come out in
    the user's order;
  * derived graphs (GCN- and mean-normalised, with self-loops), built once per graph;
  * per-device copies of its index tensors, and (kept by autosage_cli.torch.cuda) the device graph,
    the tuned decision and the prepared plan for every (op, width, heads) it has run.

Orientation follows PyG's message flow (source -> target): for `edge_index = [src, dst]`, row i of
the CSR lists the sources j of the edges j -> i, so `spmm(graph, X)[i] = sum_j w_ji X[j]`. A CSR
adjacency (torch sparse CSR, SciPy, CSRGraph) is used as given: `spmm(graph, X) = A @ X`.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np
import torch

from ..errors import AutosageError
from ..graphs.csr import CSRGraph
from . import handles, host, structure
from .host import host_copies  # noqa: F401  (autosage_cli.torch's, and the tests')
from .canonical import canonical_order, rowptr_of


_TRANSPOSED = 0x5BD1E995   # marks a checksum taken from the transpose's
_LISTED = 0x27D4EB2F       # marks a checksum taken from the coalesced graph's (with_duplicates)


def _listings_of_build(listed: tuple, shape: tuple, user_weight, listed_loops: int, options: dict) -> "Graph":
    """with_duplicates of a graph from from_coo, out of its build's stable sort of every listing
    (`listed`: sorted keys, the stable order, whether the weights are all 1, whether in order)."""
    sorted_key, order, ones, in_order = listed
    n_rows, n_cols = shape
    row, col = sorted_key // n_cols, sorted_key % n_cols
    weight = None if ones else user_weight[order]
    to_canon = None
    if not in_order:
        to_canon = torch.empty_like(order)
        to_canon[order] = torch.arange(order.numel(), device=order.device)
    multi = Graph(rowptr_of(row, n_rows), row, col, weight, shape, user_to_canon=to_canon,
                  user_weight=user_weight, **options)
    multi._self_loops = multi._canon_loops = listed_loops
    return multi


def _listed_stats(stats: dict | None) -> dict | None:
    return None if stats is None else {**stats, "checksum": stats["checksum"] ^ _LISTED}


def check_edge_index(edge_index) -> None:
    """A PyG edge_index: a (2, E) tensor of integer ids (one-line errors otherwise)."""
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise AutosageError(f"edge_index: expected a (2, E) tensor, got "
                            f"{tuple(getattr(edge_index, 'shape', ())) or type(edge_index).__name__}")
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise AutosageError(f"edge_index: expected integer ids, got {edge_index.dtype}")


class Graph:
    """A canonical sparse graph with its transpose, edge-order maps and tuned plans.

    Build it with `from_edge_index`, `from_sparse_csr`, `from_scipy` or `from_csr_graph` (or
    `Graph.coerce`, which takes any of them). `cache` (a decision-cache path or DecisionCache, None
    for the default file) and `tune` (False: never probe, use a cached decision or the vendor
    default) apply to every GPU op run on it. `schedules` maps an op to a fixed schedule name."""

    def __init__(self, rowptr, row, col, weight, shape, *, user_to_canon=None, user_weight=None,
                 cache=None, tune: bool = True, schedules=None):
        self.rowptr, self.row, self.col = rowptr, row, col
        self.weight = weight            # canonical float32 edge values; None means all ones
        self.shape = (int(shape[0]), int(shape[1]))
        self.user_to_canon = user_to_canon  # None: the user's order is the canonical one
        self.user_weight = user_weight      # the weights as given, in the user's order (or None)
        self.cache, self.tune, self.schedules = cache, tune, dict(schedules or {})
        self.derived: dict = {}         # normalised graphs (and a kept A x), keyed by what made them
        self.gpu: dict = {}             # owned by autosage_cli.torch.cuda: device graphs, plans
        self._moved: dict = {}
        self._transpose = None          # the transpose this graph made (held), see T
        self._transpose_of = None       # or, for a transpose, a weak reference to its origin
        self._structure_ref = None      # with_weights: a weak reference to the graph of the structure
        self._coalesced_ref = None      # with_duplicates: a weak reference to the coalesced graph
        self._coalesced_transposed = False   # ... whose transpose is this graph's coalesced graph
        self._t_perm = None
        self._host: dict = {}
        self._stats = None
        self._looped_stats = None       # the stats of its self-loop graph, when the build knew them
        self._self_loops = None         # listed self-loop edges, duplicates included
        self._canon_loops = None        # canonical self-loop edges, when the build knew them
        self._make_listings = None      # with_duplicates without a sort: the maker's callable (no strong ref)
        self._static = None             # a static graph's StaticShape (torch/static_graph.py), shared
        self._static_role = None        # by its transposes and reweighted graphs; the role: its stats'
        handles.register(self)          # the custom ops' handle: an attribute from birth (handles.py)

    # ------------------------------------------------------------------------------ builders
    @classmethod
    def from_coo(cls, row, col, weight, shape, *, keep_duplicates: bool = False, **options) -> "Graph":
        """From edges (row[e], col[e], weight[e]) in the user's order; duplicates are summed into
        one edge, or kept as edges of their own with `keep_duplicates` (attention counts every
        listed edge in its softmax, as PyG does)."""
        n_rows, n_cols = (int(s) for s in shape)
        if n_rows < 1 or n_cols < 1:
            raise AutosageError(f"graph dimensions must be positive, got {n_rows}x{n_cols}")
        row, col = row.to(torch.int64), col.to(torch.int64)
        if weight is not None:
            weight = weight.detach().to(torch.float32)
            if weight.shape != row.shape:
                raise AutosageError(f"edge weights: expected shape {tuple(row.shape)}, got {tuple(weight.shape)}")
        built = canonical_order(row, col, weight, (n_rows, n_cols), keep_duplicates)
        keys, user_to_canon = built.key, built.user_to_canon
        canon_row, canon_col = keys // n_cols, keys % n_cols
        nnz = keys.numel()
        if built.all_ones:
            canon_weight = None   # a pattern: kernels then skip reading values
        elif weight is not None:
            canon_weight = weight.new_zeros(nnz).index_add_(0, user_to_canon, weight)
        else:                     # duplicates without weights count once each
            canon_weight = torch.zeros(nnz, device=row.device).index_add_(
                0, user_to_canon, torch.ones(row.numel(), device=row.device))
        graph = cls(rowptr_of(canon_row, n_rows), canon_row, canon_col, canon_weight, (n_rows, n_cols),
                    user_to_canon=None if built.identity else user_to_canon, user_weight=weight, **options)
        # read back with the build's own checks: a kind lookup and the self-loop graph wait for nothing
        graph._stats, graph._looped_stats = built.stats, built.looped_stats
        graph._self_loops, graph._canon_loops = built.listed_loops, built.canon_loops
        if built.listed is not None:   # its graph of every listing, from the same sort
            graph._make_listings = functools.partial(_listings_of_build, built.listed, graph.shape, weight,
                                                     built.listed_loops, options)
        return graph

    @classmethod
    def from_edge_index(cls, edge_index, num_nodes: int | None = None, edge_weight=None, *,
                        size: tuple[int, int] | None = None, **options) -> "Graph":
        """From a PyG `edge_index` (2, E) of source -> target edges; `num_nodes` defaults to the
        largest id + 1. `size = (n_src, n_dst)` (PyG's convention) makes a bipartite graph: n_dst
        rows (targets) by n_src columns (sources), as a sampler's layer hands it over."""
        check_edge_index(edge_index)
        if size is not None:
            n_src, n_dst = (int(s) for s in size)
            return cls.from_coo(edge_index[1], edge_index[0], edge_weight, (n_dst, n_src), **options)
        if num_nodes is None:
            num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 1
        return cls.from_coo(edge_index[1], edge_index[0], edge_weight, (num_nodes, num_nodes), **options)

    @classmethod
    def from_sparse_csr(cls, adj: torch.Tensor, **options) -> "Graph":
        """From a torch sparse CSR tensor (`adj @ X` semantics), in its stored edge order."""
        if adj.layout != torch.sparse_csr:
            raise AutosageError(f"expected a torch sparse CSR tensor, got layout {adj.layout}")
        crow, col = adj.crow_indices().to(torch.int64), adj.col_indices().to(torch.int64)
        row = torch.repeat_interleave(torch.arange(adj.shape[0], device=crow.device), crow.diff())
        return cls.from_coo(row, col, adj.values(), tuple(adj.shape), **options)

    @classmethod
    def from_scipy(cls, matrix, device=None, **options) -> "Graph":
        """From any SciPy sparse matrix, in its stored edge order (COO order after .tocoo())."""
        coo = matrix.tocoo()
        as_t = lambda a, dt: torch.as_tensor(np.asarray(a), dtype=dt, device=device)  # noqa: E731
        return cls.from_coo(as_t(coo.row, torch.int64), as_t(coo.col, torch.int64),
                            as_t(coo.data, torch.float32), coo.shape, **options)

    @classmethod
    def from_csr_graph(cls, graph: CSRGraph, device=None, **options) -> "Graph":
        """From an autosage CSRGraph (already canonical: its order is the user's order)."""
        g = cls.from_scipy(graph.to_scipy(), device=device, **options)
        g._host["weighted" if g.weight is not None else "pattern"] = graph
        return g

    @classmethod
    def coerce(cls, A, num_nodes: int | None = None) -> "Graph":
        """A Graph from a Graph, an edge_index (2, E), a torch sparse CSR tensor, a CSRGraph or a
        SciPy sparse matrix."""
        if isinstance(A, Graph):
            return A
        if isinstance(A, CSRGraph):
            return cls.from_csr_graph(A)
        if isinstance(A, torch.Tensor):
            if A.layout == torch.sparse_csr:
                return cls.from_sparse_csr(A)
            return cls.from_edge_index(A, num_nodes)
        import scipy.sparse as sp

        if sp.issparse(A):
            return cls.from_scipy(A)
        raise AutosageError(f"expected a Graph, an edge_index tensor, a torch sparse CSR tensor, a "
                            f"CSRGraph or a SciPy sparse matrix, got {type(A).__name__}")

    # ------------------------------------------------------------------------------ structure
    @property
    def n_rows(self) -> int:
        return self.shape[0]

    @property
    def n_cols(self) -> int:
        return self.shape[1]

    @property
    def nnz(self) -> int:
        return int(self.col.numel())

    @property
    def num_user_edges(self) -> int:
        return self.nnz if self.user_to_canon is None else int(self.user_to_canon.numel())

    @property
    def device(self) -> torch.device:
        return self.col.device

    def _options(self) -> dict:
        return {"cache": self.cache, "tune": self.tune, "schedules": self.schedules}

    def on(self, name: str, device) -> torch.Tensor | None:
        """Attribute `name` (row, col, rowptr, weight, t_perm, user_to_canon, ...) on `device`,
        copied once per device."""
        value = getattr(self, name)
        if value is None or value.device == torch.device(device):
            return value
        key = (name, str(device))
        if key not in self._moved:
            self._moved[key] = value.to(device)
        return self._moved[key]

    def with_weights(self, weight: torch.Tensor) -> "Graph":
        """The same structure with other canonical edge values (fixed, no gradient); shares the
        transpose permutation. The user's order is kept. Float64 values stay float64 for the
        reference path; the CUDA path and the decision cache use them as float32."""
        g = Graph(self.rowptr, self.row, self.col, weight.detach(), self.shape,
                  user_to_canon=self.user_to_canon, user_weight=None, **self._options())
        g._structure_ref, g._static = weakref.ref(self), self._static
        return g

    # The graphs a Graph is made from are held weakly (a batch and its derived graphs hold no
    # reference cycle, so a step's device memory is freed when the batch goes, not when the
    # collector runs); where one is gone, the graph works its structure out itself.
    @property
    def _structure_of(self) -> "Graph | None":
        """The graph whose structure this one shares (with_weights), while it lives."""
        return None if self._structure_ref is None else self._structure_ref()

    def _other_side(self) -> "Graph | None":
        """The transpose made of this graph, or the origin of this transpose while it lives."""
        if self._transpose is not None:
            return self._transpose
        return None if self._transpose_of is None else self._transpose_of()

    def _coalesced(self) -> "Graph | None":
        """The coalesced graph of a graph of every listing (with_duplicates), while it lives."""
        origin = None if self._coalesced_ref is None else self._coalesced_ref()
        return origin.T if origin is not None and self._coalesced_transposed else origin

    def _transposed_structure(self):
        """(t_perm, transposed rowptr, row, col), made once per structure."""
        parent = self._structure_of
        if parent is not None:
            return parent._transposed_structure()
        if self._t_perm is None:
            key = self.col * self.n_rows + self.row
            self._t_perm = torch.argsort(key, stable=True)
            t_row, t_col = self.col[self._t_perm], self.row[self._t_perm]
            self._t_struct = (rowptr_of(t_row, self.n_cols), t_row, t_col)
        return (self._t_perm, *self._t_struct)

    @property
    def t_perm(self) -> torch.Tensor:
        return self._transposed_structure()[0]

    @property
    def T(self) -> "Graph":
        """The transposed graph (its canonical CSR), built once; `T.T is self` (while both live: a
        transpose holds its origin weakly)."""
        other = self._other_side()
        if other is not None:
            return other
        if self._transpose is None:
            t_perm, rowptr, row, col = self._transposed_structure()
            weight = None if self.weight is None else self.weight[t_perm]
            t = Graph(rowptr, row, col, weight, (self.n_cols, self.n_rows), **self._options())
            t._t_perm = torch.empty_like(t_perm)
            t._t_perm[t_perm] = torch.arange(t_perm.numel(), device=t_perm.device)
            t._t_struct = (self.rowptr, self.row, self.col)
            t._transpose_of, self._transpose = weakref.ref(self), t
            t._static = self._static
            if self._coalesced_ref is not None:   # a graph that keeps duplicates: so does its
                # transpose, whose coalesced graph is the transpose of ours (made when asked for)
                t._coalesced_ref, t._coalesced_transposed = self._coalesced_ref, not self._coalesced_transposed
        return self._transpose

    # ------------------------------------------------------------------------------ edge orders
    def to_canonical(self, edge_values: torch.Tensor) -> torch.Tensor:
        """Per-edge values in the user's order -> canonical order (duplicates summed);
        differentiable."""
        if edge_values.shape[0] != self.num_user_edges:
            raise AutosageError(f"edge values: expected {self.num_user_edges} entries (one per edge), "
                                f"got {edge_values.shape[0]}")
        u2c = self.on("user_to_canon", edge_values.device)
        if u2c is None:
            return edge_values
        out = edge_values.new_zeros((self.nnz, *edge_values.shape[1:]))
        return out.index_add(0, u2c, edge_values)

    def to_user(self, edge_values: torch.Tensor) -> torch.Tensor:
        """Per-edge values in canonical order -> the user's order (a duplicate edge gets its
        canonical edge's value); differentiable."""
        u2c = self.on("user_to_canon", edge_values.device)
        return edge_values if u2c is None else edge_values.index_select(0, u2c)

    @property
    def has_duplicates(self) -> bool:
        return self.num_user_edges != self.nnz

    def with_duplicates(self) -> "Graph":
        """The graph with every listed edge kept as an edge of its own (duplicates side by side, in
        canonical row order), made once: attention's softmax counts each, as PyG's layers do.
        `self` when there are none. Made from what the build already sorted where it can (no sort,
        no read-back): then it is matched on its coalesced graph's kind features (the same rows,
        nearly the same degrees; its tunes read that graph's host CSR too)."""
        if not self.has_duplicates:
            return self
        if "duplicates" not in self.derived:
            # without a sort where the build, or the graph's maker, knows how (no reference back
            # to self is kept for that: a cycle would hold a batch's memory until the collector runs)
            multi = self._make_listings() if self._make_listings is not None else None
            if multi is not None:
                multi._stats, multi._looped_stats = _listed_stats(self.structure_stats()), _listed_stats(self._looped_stats)
            else:
                u2c = self.user_to_canon
                multi = Graph.from_coo(self.row[u2c], self.col[u2c], self.user_weight, self.shape,
                                       keep_duplicates=True, **self._options())
            multi._coalesced_ref = weakref.ref(self)
            self.derived["duplicates"] = multi
        return self.derived["duplicates"]

    # ------------------------------------------------------------------------------ kind
    def structure_stats(self) -> dict:
        """The degree features of rows and columns and a checksum of the structure, computed on the
        device and read back in one transfer, once per structure: what a decision made for another
        graph of the same kind is matched on (scheduler/decisions/kinds.py), without copying the graph."""
        parent = self._structure_of
        if parent is not None:
            return parent.structure_stats()
        if self._stats is None:
            other = self._other_side()
            o = None if other is None else other._known_stats()
            if o is not None:   # the transpose's, swapped
                self._stats = {"rows": o["cols"], "cols": o["rows"], "checksum": o["checksum"] ^ _TRANSPOSED}
                return self._stats
            if self._static_role is not None:   # a static graph: its role's, read back once
                self._stats = self._static.stats_of(self._static_role, self._read_stats)
            else:
                self._stats = self._read_stats()
        return self._stats

    def _read_stats(self) -> dict:
        ones = torch.ones(self.nnz, dtype=torch.int64, device=self.device)
        n_nodes = max(self.shape)
        stats = structure.structure_stats(self.row, self.col, ones, n_nodes)
        padding = (n_nodes - self.n_rows, n_nodes - self.n_cols)
        return structure.decode(stats.cpu().numpy(), padding=padding)[0]

    def _known_stats(self) -> dict | None:
        """The structure's stats if known already (computing none)."""
        parent = self._structure_of
        return parent._known_stats() if parent is not None else self._stats

    def self_loop_edges(self) -> int:
        """How many listed edges (duplicates included) are self-loops; known from the build."""
        parent = self._structure_of
        if parent is not None:
            return parent.self_loop_edges()
        if self._self_loops is None:
            row, col = self.row, self.col
            if self.user_to_canon is not None:
                row, col = row[self.user_to_canon], col[self.user_to_canon]
            self._self_loops = int((row == col).sum())
        return self._self_loops

    def kind_features(self) -> dict:
        """What scheduler/decisions/kinds.py matches graphs on: sizes and the row degrees' quantiles."""
        rows = self.structure_stats()["rows"]
        return {"n_rows": self.n_rows, "n_cols": self.n_cols, "nnz": self.nnz,
                "deg_q50": rows["q50"], "deg_q90": rows["q90"], "deg_q99": rows["q99"],
                "deg_max": rows["max"], "empty_share": rows["empty"] / self.n_rows}

    # ------------------------------------------------------------------------------ host CSR
    def host_csr(self, weighted: bool = True) -> CSRGraph:
        """The canonical CSR on the host (for tuning and the decision cache): with the graph's
        weights, or the pattern (all ones). Same object when the graph has no weights. A copy of
        the graph (counted by `host_copies`): the per-step path never asks for it."""
        return host.host_csr(self, weighted)

    def describe(self) -> str:
        return f"Graph({self.n_rows}x{self.n_cols}, {self.nnz} edges, {self.device})"

    __repr__ = describe
