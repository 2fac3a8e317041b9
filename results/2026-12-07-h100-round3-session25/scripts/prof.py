"""(1) Kernel time of captured SAGE and GCN replays per graph (torch.profiler over 30 replays): the
kernels' table, to see what besides the float32 GEMMs a replay spends on graphs with hub rows
(facebook_combined, wiki-Vote) against regular ones (bcsstk16, cora); the plans the SAGE step's
SpMMs ran (mean graph and its transpose, per width). (2) cProfile of eager SAGE steps on cora with the
backward on the calling thread (every Python frame on this thread): where the host time goes."""
import cProfile, io, pstats, statistics, sys, time
import torch
from torch.profiler import profile, ProfilerActivity
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr

dev = torch.device("cuda")
GEMM = ("gemm", "cutlass", "splitkreduce", "xmma", "gemv")


def setup(name, model_name):
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    torch.manual_seed(0)
    return g, x, labels, tr.build(at, model_name, *tr.feature_dims(name)).to(dev)


def kernels(step, n=30):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    rows = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name, [0, 0.0]); r[0] += 1; r[1] += e.device_time
    return rows, n


def wall(step, n=40):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); step(); torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


for name in sys.argv[1:]:
    for model_name in ("sage", "gcn"):
        g, x, labels, model = setup(name, model_name)
        step = tr.captured_step(model, g, x, labels, 3)
        rows, n = kernels(step)
        total = sum(v[1] for v in rows.values()) / n
        gemm = sum(v[1] for k, v in rows.items() if any(s in k.lower() for s in GEMM)) / n
        print(f"## {name} {model_name} captured: replay {wall(step):.3f} ms wall; {total:.1f} us kernel time, "
              f"{gemm:.1f} us GEMM/GEMV, {sum(v[0] for v in rows.values()) / n:.0f} kernels", flush=True)
        if model_name == "sage":
            for k, (c, t) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:16]:
                print(f"{t / n:8.1f} us  x{c / n:4.1f}  {k[:150]}")
        del step; tr.free_memory()
    sys.stdout.flush()

name = "cora"
g, x, labels, model = setup(name, "sage")
step = tr.eager_step(model, g, x, labels, 5)
for threaded in (True, False, True, False):
    with torch.autograd.set_multithreading_enabled(threaded):
        print(f"cora sage eager {'device thread' if threaded else 'calling thread'}: {wall(step, 60):.3f} ms", flush=True)
with torch.autograd.set_multithreading_enabled(False):
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(100):
        step()
    torch.cuda.synchronize(); pr.disable()
s = io.StringIO(); st = pstats.Stats(pr, stream=s)
st.sort_stats("tottime").print_stats(45); st.sort_stats("cumulative").print_stats(60)
print(s.getvalue())
