"""autosage for PyTorch: differentiable `spmm`, `sddmm`, `attention`, `additive_attention` (GAT) on
torch tensors, the `Graph` handle they run on, and PyG-style layers (`GCNConv`, `SAGEConv`,
`TransformerConv`, `GATConv`).

    import autosage_cli.torch as at
    g = at.Graph.from_edge_index(edge_index, num_nodes)
    out = at.spmm(g, x)                     # CUDA: tuned kernels, zero-copy; CPU: torch reference
    layer = at.GCNConv(602, 256).cuda()
    step = at.capture_training_step(loss_fn, optimizer, g, x, y)   # a whole step in a CUDA graph
    step = at.capture_batch_step(loss_fn, optimizer)    # ... one per batch size, for sampled batches
    with at.capturable_plans():             # a warm-up before a capture of your own (torch.cuda.graph,
        model(x, g).sum().backward()        # torch.compile(mode="reduce-overhead")): native plans only

Importing this package imports torch; `import autosage_cli` never does, and installing autosage
does not require torch. Submodules: graph (Graph), functions (ops and autograd), kernels (device
dispatch), cuda (the CUDA path), norm (normalised graphs), nn (layers), ops (the ops as torch
custom operators), handles (the Graph handles they take), capture (CUDA-graph captured steps),
batch_capture and static_graph (captured mini-batch steps, on graphs of a fixed size),
reordered (a Graph renumbered for locality, features and outputs in the user's order),
sampler (a neighbour sampler for mini-batches), structure (the kind features of a Graph),
minibatch and training (the benchmarks' step runners). `probe_count()` counts the tuning probes
run in this process (a mini-batch loop probes once per new kind of graph,
scheduler/decisions/kinds.py); `host_copies()` the copies of a graph to the host;
`keep_aggregations(False)` stops layers keeping an unchanged input's aggregation across calls
(kept_aggregation).
"""
from __future__ import annotations

try:
    import torch as _torch  # noqa: F401  (only to say in one line what is missing)
except ModuleNotFoundError as _missing:
    if _missing.name != "torch":
        raise
    # The same exception type and name as Python's own, so `except ImportError` and
    # pytest.importorskip still see torch as what is missing.
    raise ModuleNotFoundError("autosage_cli.torch needs PyTorch, which is not installed: "
                              "pip install torch (and torch_geometric for the training suite)",
                              name="torch") from None

from ..scheduler.decisions.kinds import probe_count
from .batch_capture import CapturedBatchStep, capture_batch_step
from .capture import capture_inference, capture_training_step
from .cuda import capturable_plans
from .functions import additive_attention, attention, sddmm, spmm
from .graph import Graph, host_copies
from .kept_aggregation import keep_aggregations
from .nn import GATConv, GCNConv, SAGEConv, TransformerConv
from .reordered import Reordered, ReorderedGraph, reorder

__all__ = ["Graph", "spmm", "sddmm", "attention", "additive_attention", "GCNConv", "SAGEConv",
           "TransformerConv", "GATConv", "probe_count", "host_copies", "capture_training_step",
           "capture_inference", "capture_batch_step", "capturable_plans", "CapturedBatchStep", "reorder", "Reordered", "ReorderedGraph",
           "keep_aggregations"]
