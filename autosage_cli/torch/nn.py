"""GNN layers in PyG's idiom, on autosage's ops: same constructor arguments, parameter names and
outputs as torch_geometric.nn's layer of the same name (so `ours.load_state_dict(pyg.state_dict())`
gives the same function), fp32-equal. Inputs and parameters may be float16 or bfloat16 (the
layer `.to(dtype)`, or torch.autocast): outputs and gradients come in that type, the sparse kernels
summing in float32 (see autosage_cli.torch.functions).

`forward(x, graph)` takes a `Graph` (fastest: its normalised graphs, transposes and plans are
built once and kept), or an `edge_index` (2, E) of source -> target edges, or a torch sparse CSR
adjacency; the Graph made from an edge_index tensor is remembered while that tensor lives and is
not modified in place.

Bipartite inputs (`x = (x_src, x_dst)`, `in_channels = (source, target)`, a graph of n_dst
targets by n_src sources) run in SAGEConv and GATConv, as in PyG. Not supported (refused when asked
for): SAGE aggregations other than mean, attention dropout and edge features in TransformerConv and
GATConv, GATConv's residual.
"""
from __future__ import annotations

import math
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import AutosageError
from ..kernels import epilogues
from . import fused_layer, ops_epilogue
from .functions import SpMMFunction, attention, spmm
from .gat_attention import gat_attention
from .graph import Graph
from .norm import gcn_graph, gcn_values, mean_graph, with_self_loops

_GRAPH_MEMO_SLOTS = 8
_graph_memo: list = []  # (weakref to the edge_index tensor, its _version, num_nodes, Graph)


def as_graph(edge_index, size: int | tuple[int, int]) -> Graph:
    """A Graph for a layer input of `size` nodes, or (n_src, n_dst) for a bipartite input; an
    edge_index tensor maps to the same Graph while it lives unchanged, so the layer's derived
    graphs and plans are built once."""
    if isinstance(edge_index, Graph):
        bipartite = isinstance(size, tuple)
        expected = (size[1], size[0]) if bipartite else None
        if bipartite and edge_index.shape != expected:
            raise AutosageError(f"graph: expected {expected[0]} x {expected[1]} (targets x sources) for "
                                f"inputs of {size[0]} sources and {size[1]} targets, got "
                                f"{edge_index.shape[0]} x {edge_index.shape[1]}")
        return edge_index
    if isinstance(edge_index, torch.Tensor) and edge_index.layout == torch.strided:
        for ref, version, n, graph in _graph_memo:
            if ref() is edge_index and version == edge_index._version and n == size:
                return graph
        if isinstance(size, tuple):
            graph = Graph.from_edge_index(edge_index, size=size)
        else:
            graph = Graph.from_edge_index(edge_index, size)
        _graph_memo.append((weakref.ref(edge_index), edge_index._version, size, graph))
        del _graph_memo[:-_GRAPH_MEMO_SLOTS]
        return graph
    return Graph.coerce(edge_index, size if isinstance(size, int) else None)


def _int_channels(name: str, value) -> int:
    if not isinstance(value, int) or value < 1:
        raise AutosageError(f"{name} must be a positive int, got {value!r}")
    return value


def _pair_channels(name: str, value) -> tuple[int, int]:
    """(source, target) input widths: an int for both, or a pair for bipartite inputs."""
    pair = (value, value) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else ()
    if len(pair) != 2:
        raise AutosageError(f"{name} must be a positive int or a (source, target) pair, got {value!r}")
    return tuple(_int_channels(name, v) for v in pair)


def _split_input(x):
    """(x_src, x_dst, size) of a layer input: one tensor for both node sets (size n), or a
    bipartite pair (size (n_src, n_dst))."""
    if isinstance(x, torch.Tensor):
        return x, x, x.shape[0]
    if isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(t, torch.Tensor) for t in x):
        return x[0], x[1], (x[0].shape[0], x[1].shape[0])
    raise AutosageError("x must be a tensor or a (x_src, x_dst) pair of tensors (a target set given as "
                        "None is not supported)")


def _refuse_attention_options(layer: str, dropout: float, edge_dim) -> None:
    if dropout:
        raise AutosageError(f"{layer}: attention dropout is not supported (the fused kernel never "
                            "stores per-edge probabilities); use dropout=0")
    if edge_dim is not None:
        raise AutosageError(f"{layer}: edge features (edge_dim) are not supported")


class GCNConv(nn.Module):
    """x' = act(D^-1/2 (A + I) D^-1/2 x W + b) (PyG's GCNConv, whose act is the identity). `cached`
    is accepted for compatibility: the normalised graph is always kept on the Graph when no
    edge_weight is given. `act` (not PyG's: after its arguments, and no parameter, so state dicts
    are PyG's): None or an activation the SpMM kernels apply ("relu"); the bias and `act` run in
    the aggregation's own launch (spmm's epilogue), unless the bias is of another type than the
    aggregation (autocast: then added after it, in the wider type, as before). A widening layer
    (in_channels < out_channels) aggregates its input first and multiplies after (the same
    function), its bias on the GEMM."""

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False,
                 cached: bool = False, add_self_loops: bool | None = None, normalize: bool = True,
                 bias: bool = True, act: str | None = None):
        super().__init__()
        if act is not None and act not in epilogues.activations():
            raise AutosageError(f"GCNConv: act must be None or one of {', '.join(epilogues.activations())}, "
                                f"got {act!r}")
        self.act = act
        self.in_channels = _int_channels("in_channels", in_channels)
        self.out_channels = _int_channels("out_channels", out_channels)
        self.improved, self.cached, self.normalize = improved, cached, normalize
        self.add_self_loops = normalize if add_self_loops is None else add_self_loops
        if self.add_self_loops and not normalize:
            raise AutosageError("GCNConv: add_self_loops=True needs normalize=True")
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    @property
    def aggregation_width(self) -> int:
        """The columns this layer's SpMM moves (forward, and backward when its input needs a
        gradient): the narrower of its two widths."""
        return min(self.in_channels, self.out_channels)

    def forward(self, x: torch.Tensor, edge_index, edge_weight: torch.Tensor | None = None):
        g = as_graph(edge_index, x.shape[0])
        weight, bias = self.lin.weight, self.bias     # each read once (a module's __getattr__)
        if edge_weight is None and fused_layer.applies(x, weight, bias):
            aggregate_first = self.aggregation_width < self.out_channels
            return fused_layer.linear_aggregate(self._normalised(g), x, None, weight, bias, None,
                                                aggregate_first, self.act == "relu")
        if self.aggregation_width < self.out_channels:
            # A (x W) = (A x) W: aggregated first, the SpMM moves the narrower rows, and when x
            # needs no gradient (a first layer) its backward runs no transposed SpMM at all; the
            # bias rides on the GEMM (cuBLAS's epilogue). pubmed's 128 -> 256 layer on the H200:
            # half of that layer's forward SpMM and all of its backward one.
            out = F.linear(self._aggregate(g, x, edge_weight, {"bias": None, "activation": None}),
                           self.lin.weight, self.bias)
            return out if self.act is None else epilogues.get(self.act).apply(out, xp=torch)
        h = self.lin(x)
        fused = self.bias is None or self.bias.dtype == h.dtype
        epilogue = {"bias": self.bias if fused else None, "activation": self.act if fused else None}
        out = self._aggregate(g, h, edge_weight, epilogue)
        if fused:
            return out
        out = out + self.bias
        return out if self.act is None else epilogues.get(self.act).apply(out, xp=torch)

    def _normalised(self, g: Graph) -> Graph:
        """The graph this layer aggregates over without per-call edge weights."""
        if not self.normalize:
            return g
        # PyG (2.x) gives added self-loops weight 2 under `improved` only when the edges carry
        # weights; without any, every edge and loop weighs 1. Kept for equal outputs.
        improved = self.improved and g.user_weight is not None
        return gcn_graph(g, add_self_loops=self.add_self_loops, improved=improved)

    def _aggregate(self, g: Graph, h: torch.Tensor, edge_weight, epilogue: dict) -> torch.Tensor:
        """The normalised aggregation of h, with the epilogue's bias and activation in its launch."""
        if not self.normalize or edge_weight is None:
            out = spmm(self._normalised(g), h, edge_weight, **epilogue)
        else:
            # the normalisation in float32 at least: a 2-byte degree sum would round every step
            target, values = gcn_values(g, edge_weight.to(h.device), add_self_loops=self.add_self_loops,
                                        fill=2.0 if self.improved else 1.0,
                                        dtype=torch.promote_types(h.dtype, torch.float32))
            row = epilogues.choose(epilogue["bias"] is not None, epilogue["activation"])
            out = (ops_epilogue.spmm_epilogue(target, values, h, epilogue["bias"], row.name) if row.fused
                   else SpMMFunction.apply(target, values, h))
        return out

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}"


class SAGEConv(nn.Module):
    """x'_i = W_l mean_{j -> i} x_j + b + W_r x_i (PyG's SAGEConv, mean aggregation). Bipartite
    inputs as PyG takes them: `in_channels = (source, target)` widths and `x = (x_src, x_dst)` on a
    graph of n_dst targets by n_src sources (a sampler's layer). When the output is narrower than
    the input the product with W_l runs before the aggregation (the same function: a mean is linear
    and the bias is added after), so the SpMM moves fewer columns. `act` (not PyG's, as GCNConv's):
    None or "relu", applied last; on an eager call it runs inside the layer's one autograd node
    (torch/fused_layer.py), in a GEMM's or the SpMM's epilogue where nothing is added after it."""

    def __init__(self, in_channels, out_channels: int, aggr: str = "mean",
                 normalize: bool = False, root_weight: bool = True, project: bool = False,
                 bias: bool = True, act: str | None = None):
        super().__init__()
        if aggr != "mean":
            raise AutosageError(f"SAGEConv: only aggr='mean' is supported, got {aggr!r}")
        if act is not None and act not in epilogues.activations():
            raise AutosageError(f"SAGEConv: act must be None or one of {', '.join(epilogues.activations())}, "
                                f"got {act!r}")
        self.act = act
        source, target = _pair_channels("in_channels", in_channels)
        self.in_channels = in_channels if isinstance(in_channels, int) else (source, target)
        self.out_channels = _int_channels("out_channels", out_channels)
        self.aggr, self.normalize, self.root_weight, self.project = aggr, normalize, root_weight, project
        if project:
            self.lin = nn.Linear(source, source, bias=True)
        self.lin_l = nn.Linear(source, out_channels, bias=bias)
        if root_weight:
            self.lin_r = nn.Linear(target, out_channels, bias=False)

    def reset_parameters(self) -> None:
        for lin in (getattr(self, "lin", None), self.lin_l, getattr(self, "lin_r", None)):
            if lin is not None:
                lin.reset_parameters()

    @property
    def aggregation_width(self) -> int:
        """The columns this layer's SpMM moves: the output's when W_l runs first, else the source's."""
        return min(self.out_channels, self.lin_l.in_features)

    def forward(self, x, edge_index):
        x_src, x_dst, size = _split_input(x)
        g = mean_graph(as_graph(edge_index, size))
        x_src = self.lin(x_src).relu() if self.project else x_src
        # each parameter read once: a module's parameters are looked up through its __getattr__
        lin_l = self.lin_l
        weight_l, bias_l = lin_l.weight, lin_l.bias
        weight_r = self.lin_r.weight if self.root_weight else None
        if fused_layer.applies(x_src, None if weight_r is None else x_dst, weight_l, bias_l, weight_r):
            root_input = None if weight_r is None or x_dst is x_src else x_dst   # None: x_src's own
            out = fused_layer.linear_aggregate(g, x_src, root_input, weight_l, bias_l, weight_r,
                                               self.aggregation_width == lin_l.in_features,
                                               self.act == "relu" and not self.normalize)
            return self._finish(out, activated=not self.normalize)
        # The root term and the bias ride on a GEMM that runs anyway (cuBLAS's epilogue), not on
        # passes of their own over the output: a mini-batch's wide layers over every batch row
        # spend their time in such passes as much as in the aggregation.
        if self.aggregation_width < self.lin_l.in_features:
            out = spmm(g, F.linear(x_src, self.lin_l.weight))
            root = F.linear(x_dst, self.lin_r.weight, self.lin_l.bias) if self.root_weight else self.lin_l.bias
            out = out if root is None else out + root
        else:
            out = self.lin_l(spmm(g, x_src))     # a linear's backward keeps its input, not its output
            if self.root_weight and x_dst.dim() == 2 and x_dst.dtype == out.dtype == self.lin_r.weight.dtype:
                out = out.addmm_(x_dst, self.lin_r.weight.t())
            elif self.root_weight:
                out = out + self.lin_r(x_dst)
        return self._finish(out, activated=False)

    def _finish(self, out: torch.Tensor, activated: bool) -> torch.Tensor:
        """PyG's normalisation, then `act` unless the fused node applied it."""
        out = F.normalize(out, p=2.0, dim=-1) if self.normalize else out
        return out if self.act is None or activated else epilogues.get(self.act).apply(out, xp=torch)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, aggr={self.aggr}"


class TransformerConv(nn.Module):
    """Dot-product graph attention (PyG's TransformerConv): per head, softmax over the edges into
    i of <W_q x_i, W_k x_j> / sqrt(C), weighting W_v x_j; heads concatenated or averaged; plus the
    skip W_s x_i (optionally gated by beta). Runs on the fused attention kernel."""

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 beta: bool = False, dropout: float = 0.0, edge_dim: int | None = None,
                 bias: bool = True, root_weight: bool = True):
        super().__init__()
        _refuse_attention_options("TransformerConv", dropout, edge_dim)
        self.in_channels = _int_channels("in_channels", in_channels)
        self.out_channels = _int_channels("out_channels", out_channels)
        self.heads = _int_channels("heads", heads)
        self.concat, self.beta, self.root_weight, self.dropout = concat, beta, root_weight, dropout
        width = heads * out_channels
        self.lin_key = nn.Linear(in_channels, width, bias=bias)
        self.lin_query = nn.Linear(in_channels, width, bias=bias)
        self.lin_value = nn.Linear(in_channels, width, bias=bias)
        out_width = width if concat else out_channels
        # made even when unused (root_weight=False), as PyG does, so state dicts load both ways
        self.lin_skip = nn.Linear(in_channels, out_width, bias=bias)
        self.lin_beta = nn.Linear(3 * out_width, 1, bias=False) if beta else None

    @property
    def aggregation_width(self) -> int:
        """The columns its attention aggregates: every head's channels."""
        return self.heads * self.out_channels

    def forward(self, x: torch.Tensor, edge_index):
        g = as_graph(edge_index, x.shape[0])
        H, C = self.heads, self.out_channels
        query = self.lin_query(x).view(-1, H, C)
        key = self.lin_key(x).view(-1, H, C)
        value = self.lin_value(x).view(-1, H, C)
        out = attention(g, query, key, value, scale=1.0 / math.sqrt(C))
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.root_weight:
            x_r = self.lin_skip(x)
            if self.lin_beta is not None:
                gate = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = gate * x_r + (1 - gate) * out
            else:
                out = out + x_r
        return out

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, heads={self.heads}"


def _glorot(t: torch.Tensor) -> None:
    """PyG's glorot initialisation: uniform in ±sqrt(6 / (size(-2) + size(-1)))."""
    bound = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    nn.init.uniform_(t, -bound, bound)


class GATConv(nn.Module):
    """Additive graph attention (PyG's GATConv): per head, softmax over the edges j -> i of
    LeakyReLU(<a_dst, W x_i> + <a_src, W x_j>), weighting W x_j; heads concatenated or averaged;
    plus the bias. With add_self_loops (the default) every node's own loops are replaced by one, as
    PyG does; a duplicate edge counts once per listing. Bipartite inputs as PyG takes them:
    `in_channels = (source, target)` (then `lin_src` and `lin_dst` instead of `lin`) and
    `x = (x_src, x_dst)`, self-loops on the ids below min(n_src, n_dst). Runs on the fused attention
    kernel with the additive score; dropout must be 0 (the fused kernel never stores per-edge
    probabilities to drop), no edge features, no residual."""

    def __init__(self, in_channels, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 edge_dim: int | None = None, fill_value="mean", bias: bool = True,
                 residual: bool = False):
        super().__init__()
        _refuse_attention_options("GATConv", dropout, edge_dim)
        if residual:
            raise AutosageError("GATConv: residual=True is not supported")
        source, target = _pair_channels("in_channels", in_channels)
        self.in_channels = in_channels if isinstance(in_channels, int) else (source, target)
        self.out_channels = _int_channels("out_channels", out_channels)
        self.heads = _int_channels("heads", heads)
        self.concat, self.negative_slope, self.dropout = concat, float(negative_slope), dropout
        self.add_self_loops, self.fill_value = add_self_loops, fill_value
        width = heads * out_channels
        if isinstance(in_channels, int):
            self.lin = nn.Linear(in_channels, width, bias=False)
        else:   # PyG's names for the bipartite layer, so state dicts load both ways
            self.lin_src = nn.Linear(source, width, bias=False)
            self.lin_dst = nn.Linear(target, width, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        out_width = width if concat else out_channels
        self.bias = nn.Parameter(torch.empty(out_width)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in ("lin", "lin_src", "lin_dst"):
            if hasattr(self, lin):
                _glorot(getattr(self, lin).weight)
        for t in (self.att_src, self.att_dst):
            _glorot(t)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    @property
    def aggregation_width(self) -> int:
        """The columns its attention aggregates: every head's channels."""
        return self.heads * self.out_channels

    def forward(self, x, edge_index):
        x_src, x_dst, size = _split_input(x)
        g = as_graph(edge_index, size)
        if self.add_self_loops:
            g = with_self_loops(g)[0]
        H, C = self.heads, self.out_channels
        if hasattr(self, "lin"):
            h_src = self.lin(x_src).view(-1, H, C)
            h_dst = None if x_dst is x_src else self.lin(x_dst).view(-1, H, C)   # None: the sources
        else:
            h_src, h_dst = self.lin_src(x_src).view(-1, H, C), self.lin_dst(x_dst).view(-1, H, C)
        # per head, the source's term <h_src, att_src> and the target's <h_dst, att_dst> of every
        # score, then the softmax-weighted sum: one autograd node (gat_attention)
        out = gat_attention(g, h_src, h_dst, self.att_src, self.att_dst, self.negative_slope)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, heads={self.heads}"
