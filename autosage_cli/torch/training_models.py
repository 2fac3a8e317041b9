"""The training suites' models: the layer stacks both libraries build (`build`, from autosage's
layers or PyG's), and what one epoch of a model aggregates (`spmm_widths`), which a reordering
decision weighs. Kept apart from training.py, which runs the steps; training re-exports these
names."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import AutosageError

MODELS = ("gcn", "sage", "gat")          # the suite's models
EXTRA_MODELS = ("transformer",)          # run when asked for by name
# The graph-free control beside the compiled rows: two linear maps of GCN's widths with a ReLU,
# torch alone, so the suite shows what torch.compile does to a step this small without a graph op
CONTROL = "mlp"
HIDDEN = 256
GAT_HEADS, GAT_CHANNELS = 8, 8


def width(model: str) -> tuple[int, int]:
    """(hidden width, heads) of a model, as the results report them."""
    return (GAT_HEADS * GAT_CHANNELS, GAT_HEADS) if model in ("gat", "transformer") else (HIDDEN, 1)


def spmm_widths(model: "Net") -> list[int]:
    """The widths of one epoch's SpMMs (or attention aggregations), in the order they run: one per
    layer forward at the width the layer aggregates, then one per layer backward but the first's
    (the input features need no gradient); what a reordering decision is measured at and weighs
    its cost against."""
    forward = [layer.aggregation_width for layer in model.layers]
    return forward + forward[:0:-1]


def decision_width(widths: list[int]) -> int:
    """The width a decision made once for a model is measured at: its SpMMs' most frequent width,
    the widest of a tie (the tuned plan is then one the training itself runs)."""
    return max(set(widths), key=lambda w: (widths.count(w), w))


class Net(torch.nn.Module):
    """A stack of layers with ReLU between them; `graph` is what every layer takes. A layer listed
    in `activated` applies the ReLU itself (our GCNConv's act="relu": in its SpMM's epilogue)."""

    def __init__(self, layers, activated: tuple[bool, ...] = ()):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.activated = tuple(activated) + (False,) * (len(layers) - len(activated))

    def forward(self, x, graph):
        for i, layer in enumerate(self.layers):
            x = layer(x, graph)
            if i + 1 < len(self.layers) and not self.activated[i]:
                x = F.relu(x)
        return x


class Dense(torch.nn.Linear):
    """The control's layer: a linear map that takes the graph a Net hands every layer, unused."""

    def forward(self, x, graph=None):
        return super().forward(x)


def build(lib, model: str, n_in: int, n_out: int, pyg_mode: str | None = None,
          fuse_relu: bool | None = None) -> Net:
    """The model from `lib` (autosage_cli.torch or torch_geometric.nn); PyG's GCN caches its
    normalised adjacency in sparse-CSR mode. `fuse_relu` (default: for ours): the hidden layers
    apply the ReLU themselves (act="relu", not a PyG argument), inside the layer's one autograd
    node on an eager step (torch/fused_layer.py): the same function, one node fewer per layer."""
    if fuse_relu is None:
        fuse_relu = not lib.__name__.startswith("torch_geometric")
    act = {"act": "relu"} if fuse_relu else {}
    if model == "gcn":
        cached = {"cached": True} if pyg_mode == "sparse-csr" else {}
        return Net([lib.GCNConv(n_in, HIDDEN, **cached, **act), lib.GCNConv(HIDDEN, n_out, **cached)],
                   activated=(fuse_relu,))
    if model == "sage":
        return Net([lib.SAGEConv(n_in, HIDDEN, **act), lib.SAGEConv(HIDDEN, HIDDEN, **act),
                    lib.SAGEConv(HIDDEN, n_out)], activated=(fuse_relu, fuse_relu))
    if model == "gat":
        return Net([lib.GATConv(n_in, GAT_CHANNELS, heads=GAT_HEADS),
                    lib.GATConv(GAT_HEADS * GAT_CHANNELS, n_out, heads=1)])
    if model == CONTROL:
        return Net([Dense(n_in, HIDDEN), Dense(HIDDEN, n_out)])
    if model == "transformer":
        return Net([lib.TransformerConv(n_in, GAT_CHANNELS, heads=GAT_HEADS),
                    lib.TransformerConv(GAT_HEADS * GAT_CHANNELS, n_out, heads=1)])
    raise AutosageError(f"unknown model {model!r}; choose from {', '.join(MODELS + EXTRA_MODELS)}")
