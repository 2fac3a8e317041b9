"""Where an eager small-graph training step's time goes, ours against PyG: on cora and pubmed (the
shipped graphs), GAT, GCN and SAGE as the training suite builds them (same weights and data), PyG on
its edge_index. Per model: two means of 100 steps each, then for GAT and GCN the torch profiler's
CUDA kernel count per step and self-CPU table for both libraries, and a cProfile of 50 of our steps.

  python3 scripts/profile_small_step.py OUT.txt      (on a GPU, from the repository root)
"""
import cProfile
import io
import pstats
import sys
import time

import torch
import torch_geometric.nn as pyg
from torch.profiler import ProfilerActivity, profile

import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr

out = open(sys.argv[1], "w")
def say(*a):
    print(*a, file=out, flush=True); print(*a, flush=True)

def timed(step, n):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): step()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e3

for name in ("cora", "pubmed"):
    csr = load_graph(f"datasets/{name}.mtx.gz")
    g = tr.training_graph(csr, "cuda")
    x, labels = tr.random_data(name, g.n_rows, g.device, 0)
    inputs = tr.pyg_inputs(g)
    n_in, n_out = tr.FEATURES.get(name, tr.OTHER_FEATURES)
    for model_name in ("gat", "gcn", "sage"):
        torch.manual_seed(0)
        init = tr.build(pyg, model_name, n_in, n_out).state_dict()
        ours = tr.build(at, model_name, n_in, n_out).cuda(); ours.load_state_dict(init)
        theirs = tr.build(pyg, model_name, n_in, n_out).cuda(); theirs.load_state_dict(init)
        s_ours = tr.eager_step(ours, g, x, labels, 3)
        s_pyg = tr.eager_step(theirs, inputs["edge-index"], x, labels, 3)
        for s in (s_ours, s_pyg):
            for _ in range(10): s()
        a, b = timed(s_ours, 100), timed(s_pyg, 100)
        a2, b2 = timed(s_ours, 100), timed(s_pyg, 100)
        say(f"== {name} {model_name}: ours {a:.3f}/{a2:.3f} ms, PyG edge-index {b:.3f}/{b2:.3f} ms -> {b/a:.2f}x/{b2/a2:.2f}x")
        if model_name == "sage":
            continue
        for label, s in (("ours", s_ours), ("pyg", s_pyg)):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(10): s()
                torch.cuda.synchronize()
            ev = prof.key_averages()
            kernels = sum(e.count for e in ev if e.device_type.name == "CUDA")
            say(f"  {label}: {kernels/10:.0f} CUDA kernels per step")
            say(ev.table(sort_by="self_cpu_time_total", row_limit=25))
        pr = cProfile.Profile(); pr.enable()
        for _ in range(50): s_ours()
        torch.cuda.synchronize(); pr.disable()
        buf = io.StringIO(); st = pstats.Stats(pr, stream=buf)
        st.sort_stats("tottime").print_stats(35); st.sort_stats("cumulative").print_stats(45)
        say(buf.getvalue())
