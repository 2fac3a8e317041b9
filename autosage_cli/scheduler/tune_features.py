"""The graph features a tune ranks by, computed where they are cheapest. The cost model never reads
`symmetric`, whose exact check transposes the graph (1.6-2.1 s of 2 cores on a symmetric
115M-nonzero graph, 0.16-0.25 s without it), so a tune skips it. From DEVICE_FEATURES_MIN_NNZ
nonzeros on, the one pass over the edges (features.DiagonalSums) runs on the GPU through the
measurer: the graph is uploaded first (the probe needs it there anyway; the upload counts with the
features) and the host keeps only the per-row statistics. products-like, 124M nonzeros: 432 ms on
the H200's host before, 57 ms."""
from __future__ import annotations

import time

DEVICE_FEATURES_MIN_NNZ = 1 << 22


def features_version() -> str:
    """What remembered features (graphs.memo) must have been computed by to stand in for the
    tune's own: this features code, with the tune's options."""
    from ..features import code_version
    return f"{code_version()}:symmetry=False"


def on_device(graph) -> bool:
    """Whether the features' pass over the edges of `graph` runs on the GPU."""
    return graph.nnz >= DEVICE_FEATURES_MIN_NNZ


def compute(graph, device_graph, measure):
    """The tune's features of `graph`: on the device when it is large and `device_graph` is given."""
    if device_graph is not None and on_device(graph):
        return measure.device_features(device_graph)
    from ..features import compute_features
    return compute_features(graph, symmetry=False)


def for_tune(graph, features, device_graph, measure, say) -> tuple[object, float, object]:
    """(the graph's features, ms spent computing them: 0 when the caller gave them, the device
    graph: uploaded here when the features need it)."""
    if features is not None:
        return features, 0.0, device_graph
    t = time.perf_counter()
    say("computing graph features")
    if device_graph is None and on_device(graph):
        device_graph = measure.to_device(graph)
    features = compute(graph, device_graph, measure)
    return features, (time.perf_counter() - t) * 1e3, device_graph
