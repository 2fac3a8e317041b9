"""The captured SAGE step's kernel time on pubmed and cora (torch.profiler over 50 replays): how
much of a replay is cuBLAS's GEMMs, which PyG's step runs too."""
import sys, statistics, time
import torch
from torch.profiler import profile, ProfilerActivity
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr

dev = torch.device("cuda")
GEMM = ("gemm", "sgemm", "cutlass", "splitKreduce", "xmma", "ampere_", "sm90_")
for name in sys.argv[1:]:
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    torch.manual_seed(0)
    model = tr.build(at, "sage", *tr.feature_dims(name)).to(dev)
    step = tr.captured_step(model, g, x, labels, 3)
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(50):
            step()
        torch.cuda.synchronize()
    rows = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name, [0, 0.0]); r[0] += 1; r[1] += e.device_time
    total = sum(v[1] for v in rows.values()) / 50
    gemm = sum(v[1] for k, v in rows.items() if any(s in k.lower() for s in GEMM)) / 50
    print(f"## {name} sage captured: {total:.1f} us of kernel time per replay, {gemm:.1f} us in GEMM kernels, "
          f"{sum(v[0] for v in rows.values()) / 50:.0f} kernels")
    for k, (c, t) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"{t / 50:8.1f} us  x{c / 50:4.1f}  {k[:140]}")
