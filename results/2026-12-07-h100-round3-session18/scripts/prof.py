"""Where a step's time goes: (1) the captured SAGE/GCN steps' GPU kernels (torch.profiler over
replays), (2) the eager SAGE step's host time by Python function (cProfile) and by aten op
(profiler self CPU), (3) the compiled SAGE step's host time (cProfile)."""
import cProfile, io, pstats, statistics, sys, time
import torch, torch.nn.functional as F
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr
from torch.profiler import profile, ProfilerActivity

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
OUT = sys.argv[1]

def setup(name, model_name, lib=at):
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    n_in, n_out = tr.feature_dims(name)
    torch.manual_seed(0)
    model = tr.build(lib, model_name, n_in, n_out).to(dev)
    return g, x, labels, model

def kernels_of(step, n=50, label=""):
    for _ in range(10): step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n): step()
        torch.cuda.synchronize()
    rows = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name, [0, 0.0]); r[0] += 1; r[1] += e.device_time
    total = sum(v[1] for v in rows.values()) / n
    print(f"\n## {label}: {total:.1f} us of kernel time per step, {sum(v[0] for v in rows.values())/n:.0f} kernels", flush=True)
    for k, (c, t) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{t/n:8.1f} us  x{c/n:4.1f}  {k[:150]}")

def timed(step, n=40):
    for _ in range(5): step()
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); step(); torch.cuda.synchronize(); ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)

for name in ("pubmed", "cora"):
    for model_name in ("sage", "gcn"):
        g, x, labels, model = setup(name, model_name)
        step = tr.captured_step(model, g, x, labels, 3)
        kernels_of(step, label=f"{name} {model_name} captured (ours), median {timed(step):.3f} ms wall")
        if model_name == "sage":
            g, x, labels, model = setup(name, model_name)
            step = tr.eager_step(model, g, x, labels, 3)
            kernels_of(step, label=f"{name} {model_name} eager (ours), median {timed(step):.3f} ms wall")
            import torch_geometric.nn as pyg
            inputs = tr.pyg_inputs(g)
            torch.manual_seed(0)
            model_p = tr.build(pyg, model_name, *tr.feature_dims(name)).to(dev)
            stp = tr.eager_step(model_p, inputs["edge-index"], x, labels, 3)
            kernels_of(stp, label=f"{name} {model_name} eager (PyG edge_index), median {timed(stp):.3f} ms wall")

# host time of the eager SAGE step on cora: cProfile and profiler CPU ops
g, x, labels, model = setup("cora", "sage")
step = tr.eager_step(model, g, x, labels, 3)
for _ in range(10): step()
torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(100): step()
torch.cuda.synchronize(); pr.disable()
s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(45); st.sort_stats("cumulative").print_stats(45)
open(f"{OUT}/eager-sage-cprofile.txt", "w").write(s.getvalue())
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(50): step()
    torch.cuda.synchronize()
open(f"{OUT}/eager-sage-cpu-ops.txt", "w").write(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=60))
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))

# compiled SAGE cora: cProfile
g, x, labels, model = setup("cora", "sage")
step = tr.compiled_step(model, g, x, labels, 3, fullgraph=True)
for _ in range(10): step()
torch.cuda.synchronize()
print(f"compiled cora sage {timed(step):.3f} ms wall")
pr = cProfile.Profile(); pr.enable()
for _ in range(100): step()
torch.cuda.synchronize(); pr.disable()
s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(45); st.sort_stats("cumulative").print_stats(60)
open(f"{OUT}/compiled-sage-cprofile.txt", "w").write(s.getvalue())
