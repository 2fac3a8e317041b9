"""Where an eager SAGE step's host time goes on cora (the suite's dims): per-call host time of each
building block, the step's segments (forward+loss, backward, Adam) for ours and PyG on both backward
threads, and a cProfile of our step on the calling thread."""
import cProfile, pstats, sys, time
import torch, torch.nn.functional as F
import torch_geometric.nn as pyg
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr, ops, cuda as tc, fused_layer as fl
from autosage_cli.torch.norm import mean_graph

name = sys.argv[1] if len(sys.argv) > 1 else "cora"
dev = torch.device("cuda")
g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
x, labels = tr.random_data(name, g.n_rows, dev, 0)
dims = tr.feature_dims(name)
N = g.n_rows
print(f"{name}: {N} rows, {g.nnz} edges, dims {dims}", torch.cuda.get_device_name())


def host(fn, n=200, rounds=9):
    """median over rounds of the per-call host time (us) of n calls, the GPU synchronised between rounds"""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter_ns() - t0) / n / 1e3)
        torch.cuda.synchronize()
    return sorted(ts)[len(ts) // 2]


torch.manual_seed(0)
init = tr.build(pyg, "sage", *dims).state_dict()
ours = tr.build(at, "sage", *dims).to(dev); ours.load_state_dict(init)
mg = mean_graph(g)
h256 = torch.randn(N, 256, device=dev)
h16 = torch.randn(N, 16, device=dev)
W = torch.randn(256, 256, device=dev)
b = torch.randn(256, device=dev)
with torch.no_grad():
    ops.spmm(mg, None, h256)
p = tc.plan(mg, "spmm", 256, dev, weighted=True, dtype="float32")
launches = tc._packed_launches(p, dev, False)
out = torch.empty_like(h256)
ptrs = {"B": h256.data_ptr(), "out": out.data_ptr(), "values": 0}
l2 = ours.layers[1]
wl, bl, wr = l2.lin_l.weight, l2.lin_l.bias, l2.lin_r.weight
hg = h256.clone().requires_grad_(True)

SEGMENTS_ONLY = "segments" in sys.argv
blocks = {} if SEGMENTS_ONLY else {
    "torch.empty(N,256)": lambda: torch.empty((N, 256), device=dev),
    "F.linear(h,W)": lambda: F.linear(h256, W),
    "F.linear(h,W,b)": lambda: F.linear(h256, W, b),
    "h.addmm_(h,W.t())": lambda: out.addmm_(h256, W.t()),
    "torch.mv": lambda: torch.mv(h256.t(), h256[:, 0]),
    "getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
    "cuda.operand": lambda: tc.operand("B", h256),
    "cuda.plan lookup": lambda: tc.plan(mg, "spmm", 256, dev, weighted=True, dtype="float32"),
    "_packed_launches memo": lambda: tc._packed_launches(p, dev, False),
    "_launch_packed": lambda: tc._launch_packed(launches, dev, ptrs),
    "cuda.spmm": lambda: tc.spmm(mg, None, h256),
    "ops.spmm (no grad input)": lambda: ops.spmm(mg, None, h256),
    "ops.spmm_t (no grad input)": lambda: ops.spmm_t(mg, None, h256),
    "as_graph+mean_graph": lambda: mean_graph(at.nn.as_graph(g, N)),
    "fused_layer.applies": lambda: fl.applies(h256, None, wl, bl, wr),
    "LinearAggregate.apply L2": lambda: fl.LinearAggregate.apply(mg, hg, None, wl, bl, wr, True, True),
    "_forward L2 (no grad)": lambda: fl._forward(mg, h256, None, wl, bl, wr, True, True),
}
with torch.no_grad():
    for k in () if SEGMENTS_ONLY else ("_forward L2 (no grad)",):
        print(f"{k:32s} {host(blocks.pop(k)):8.1f} us")
for k, fn in blocks.items():
    print(f"{k:32s} {host(fn):8.1f} us")

# per layer forward with grad, ours and PyG
pyg_m = tr.build(pyg, "sage", *dims).to(dev); pyg_m.load_state_dict(init)
inputs = tr.pyg_inputs(g)
hx = [x, h256, h256]
for i in range(0 if SEGMENTS_ONLY else 3):
    print(f"ours layer {i} fwd {host(lambda: ours.layers[i](hx[i], g)):8.1f} us")
    for mode in ("edge-index", "sparse-csr"):
        print(f"pyg {mode} layer {i} fwd {host(lambda: pyg_m.layers[i](hx[i], inputs[mode])):8.1f} us")


def segments(model, graph, threads: bool, steps=300):
    opt = tr.adam(model)
    seg = [[], [], [], []]
    with torch.autograd.set_multithreading_enabled(threads):
        for i in range(steps + 30):
            t0 = time.perf_counter_ns()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x, graph), labels)
            t1 = time.perf_counter_ns()
            loss.backward()
            t2 = time.perf_counter_ns()
            opt.step()
            t3 = time.perf_counter_ns()
            torch.cuda.synchronize()
            t4 = time.perf_counter_ns()
            if i >= 30:
                for s, v in zip(seg, (t1 - t0, t2 - t1, t3 - t2, t4 - t0)):
                    s.append(v / 1e3)
    med = [sorted(s)[len(s) // 2] for s in seg]
    return "fwd+loss %7.1f  backward %7.1f  adam %6.1f  | step incl. sync %7.1f us" % tuple(med)


for threads in (True, False):
    for label, model, graph in (("ours", ours, g), ("pyg-edge", pyg_m, inputs["edge-index"]),
                                ("pyg-csr", pyg_m, inputs["sparse-csr"])):
        print(f"{label:9s} device-thread={threads}: {segments(model, graph, threads)}")

if SEGMENTS_ONLY:
    sys.exit(0)
opt = tr.adam(ours)


def step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(ours(x, g), labels)
    loss.backward()
    opt.step()


with torch.autograd.set_multithreading_enabled(False):
    for _ in range(30):
        step()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        step()
    pr.disable()
    torch.cuda.synchronize()
s = pstats.Stats(pr, stream=sys.stdout)
s.sort_stats("tottime").print_stats(60)
s.sort_stats("cumulative").print_stats(60)
