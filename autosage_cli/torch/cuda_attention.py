"""The attention ops on the CUDA path (autosage_cli.torch.cuda's conventions: operands checked by
`operand`, outputs allocated by torch, launches on torch's current stream): the dot-product score's
fused plan and the additive (GAT) score's, whose "rows" plans launch packed (on the operands'
pointers alone)."""
from __future__ import annotations

import torch

from . import static_graph
from .cuda import (_cupy, _launch_packed, _on_torch_stream, _own_host, _packed_launches, device_graph,
                   dtype_name, operand, plan)
from .graph import Graph


def _fused_attention(graph: Graph, inputs: tuple, make_plan):
    """Run make_plan(heads, d) on inputs whose last is V (n_cols, H, d) into a new out (n_rows, H, d)."""
    V = inputs[-1]
    heads, d = int(V.shape[1]), int(V.shape[2])
    out = torch.empty((graph.n_rows, heads, d), dtype=V.dtype, device=V.device)
    if graph.nnz == 0:
        return out.zero_()
    with _on_torch_stream(V.device):
        make_plan(heads, d).run(tuple(_cupy(t) for t in inputs), _cupy(out))
    return out


def attention(graph: Graph, Q, K, V, scale: float) -> torch.Tensor:
    Q = operand("Q", Q)
    inputs = (Q, operand("K", K, Q.dtype), operand("V", V, Q.dtype))
    name = dtype_name(Q)
    return _fused_attention(graph, inputs, lambda heads, d: plan(graph, "attention", d, V.device,
                                                                 heads=heads, scale=float(scale),
                                                                 dtype=name))


def additive_plan(graph: Graph, d: int, heads: int, negative_slope: float, device: torch.device,
                  dtype: str = "float32"):
    """The additive-score (GAT) plan for (d, heads, slope, dtype of V) on `graph`, made once: a
    fixed schedule from graph.schedules["attention-additive"], else the decision for the graph's
    kind (a graph above kinds.KIND_MAX_NNZ: for the graph itself), tuned, verified and cached like
    the other ops' (scheduler.decisions.additive; op `attention-additive`); `graph.tune` off: a
    known decision or the cost model's best, never a probe. The slope does not change the decision."""
    from ..backends.base import unsynchronized_prepare
    from ..kernels.schedule import family_of
    from ..scheduler.decisions import additive, kinds

    key = ("plan", "attention-additive", d, heads, negative_slope, device.index, dtype)
    if key not in graph.gpu:
        dgraph = device_graph(graph, False, device)
        fixed = graph.schedules.get("attention-additive")
        by_kind = fixed is None and graph.nnz <= kinds.KIND_MAX_NNZ
        kind = (graph.kind_features(), graph.structure_stats()["checksum"]) if by_kind else None
        with _on_torch_stream(device), unsynchronized_prepare():
            schedule = additive.schedule_for(dgraph, d, heads, dtype, fixed=fixed, kind=kind,
                                             cache=graph.cache, tune=graph.tune, own_host=_own_host(graph),
                                             static=graph._static is not None)
            if graph._static is not None:
                static_graph.refuse_in_capture(f"attention-additive plan {schedule.name}",
                                               family_of(schedule.family).plan in kinds.SHAPE_ONLY_PLANS)
            graph.gpu[key] = additive.prepare_additive_plan(dgraph, schedule, d, heads, negative_slope, dtype)
    return graph.gpu[key]


def additive_attention(graph: Graph, a_dst, a_src, V, negative_slope: float):
    """(O, stats): the output (in V's type) and each (row, head)'s softmax statistics, stats
    (n_rows, H, 2) = (row max, row sum), float32 (as a_dst and a_src are read). A plan that packs
    (the "rows" layout) launches on the pointers alone (no CuPy views)."""
    V = operand("V", V)
    name = dtype_name(V)
    a_dst, a_src = operand("a_dst", a_dst, torch.float32), operand("a_src", a_src, torch.float32)
    heads, d = int(V.shape[1]), int(V.shape[2])
    stats = torch.empty((graph.n_rows, heads, 2), dtype=torch.float32, device=V.device)
    out = torch.empty((graph.n_rows, heads, d), dtype=V.dtype, device=V.device)
    if graph.nnz == 0:
        stats[..., 0], stats[..., 1] = float("-inf"), 0.0
        return out.zero_(), stats
    p = additive_plan(graph, d, heads, float(negative_slope), V.device, name)
    if not getattr(p, "writes_every_row", False):
        stats[..., 0], stats[..., 1] = float("-inf"), 0.0   # rows without edges
    pointers = {"a_dst": a_dst.data_ptr(), "a_src": a_src.data_ptr(), "V": V.data_ptr(), "out": out.data_ptr(),
                "stats": stats.data_ptr()}
    if _launch_packed(_packed_launches(p, V.device), V.device, pointers):
        return out, stats
    with _on_torch_stream(V.device):
        p.run((_cupy(a_dst), _cupy(a_src), _cupy(V)), _cupy(out), _cupy(stats))
    return out, stats
