"""(1) torch.sparse.sampled_addmm against a float64 host sum, in the settings torch has;
(2) where an eager step's host time goes: forward / backward / optimizer, ours and PyG, interleaved;
(3) host cost per call of single torch ops and of our SpMM, on the calling thread and inside a
    backward (autograd's device thread)."""
import statistics, sys, time
import numpy as np
import torch, torch.nn.functional as F

dev = torch.device("cuda")
print("torch", torch.__version__, "allow_tf32", torch.backends.cuda.matmul.allow_tf32,
      "precision", torch.get_float32_matmul_precision(),
      "fp32_precision", getattr(torch.backends.cuda.matmul, "fp32_precision", "n/a"), flush=True)

# (1) the bench's torch.sparse.sampled_addmm provider on the bench test's tiny graph (a hub row)
import scipy.sparse as sp
import cupy
from autosage_cli.backends.base import DeviceGraph
from autosage_cli.backends.sddmm_providers import TorchSampledAddmm
rng = np.random.default_rng(3)
m = sp.random(2000, 2000, density=0.005, random_state=3, format="lil")
m[7, rng.choice(2000, 1500, replace=False)] = 1.0
import scipy.io
scipy.io.mmwrite("/tmp/tiny.mtx", sp.coo_matrix(m))
from autosage_cli.graphs.load import load_graph as _lg
host = _lg(path="/tmp/tiny.mtx")
m = sp.csr_matrix((host.values, host.indices, host.indptr), shape=host.shape)
if host is not None:
    dg = DeviceGraph.from_host(host)
    rows = np.repeat(np.arange(2000), np.diff(m.indptr))
    print("index dtypes", dg.indptr.dtype, dg.indices.dtype, "nnz", dg.nnz, flush=True)
    for k in (4, 32):
        for ld in (k, k + 4):
            p = TorchSampledAddmm(dg, k, 2)
            for trial in range(3):
                X = cupy.random.rand(2000, ld, dtype=cupy.float32)[:, :k]
                Y = cupy.random.rand(2000, ld, dtype=cupy.float32)[:, :k]
                out = cupy.full(dg.nnz, cupy.nan, dtype=cupy.float32)
                if trial == 2:
                    out[:] = 0
                p.launch(X, Y, out)
                got = out.get().astype(np.float64)
                want = (X.get().astype(np.float64)[rows] * Y.get().astype(np.float64)[m.indices]).sum(1)
                err = np.linalg.norm(np.nan_to_num(got, nan=1e9) - want) / np.linalg.norm(want)
                print(f"provider k={k} ld={ld} trial={trial}: rel err {err:.2e}, nan {int(np.isnan(got).sum())}, zeros {int((got == 0).sum())}", flush=True)
            cupy.cuda.Device().synchronize()

# (3) per-call host cost
def per_call(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt

a = torch.randn(2708, 256, device=dev); w = torch.randn(256, 256, device=dev); b = torch.randn(256, device=dev)
small = torch.randn(64, 16, device=dev); ws = torch.randn(16, 16, device=dev)
print(f"torch.empty: {per_call(lambda: torch.empty((2708, 256), device=dev)):.1f} us")
print(f"relu (out of place): {per_call(lambda: torch.relu(small)):.1f} us")
print(f"mm small: {per_call(lambda: small.mm(ws)):.1f} us")
print(f"F.linear small with bias: {per_call(lambda: F.linear(small, ws, ws[0])):.1f} us")
print(f"t(): {per_call(lambda: w.t()):.1f} us")
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr, ops
g = tr.training_graph(load_graph("datasets/cora.mtx.gz"), dev)
B = torch.randn(g.n_rows, 16, device=dev)
ops.spmm(g, None, B)
print(f"our spmm (no grad) k=16: {per_call(lambda: ops.spmm(g, None, B)):.1f} us")
print(f"our spmm_t (no grad) k=16: {per_call(lambda: ops.spmm_t(g, None, B)):.1f} us")


def pyloop():
    s = 0
    for i in range(2000):
        s += i
    return s


t0 = time.perf_counter(); [pyloop() for _ in range(20)]; main_us = (time.perf_counter() - t0) / 20 * 1e6
seen = []


class Probe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, d):
        t0 = time.perf_counter(); [pyloop() for _ in range(20)]; seen.append((time.perf_counter() - t0) / 20 * 1e6)
        t1 = time.perf_counter()
        for _ in range(200):
            ops.spmm(g, None, B)
        seen.append((time.perf_counter() - t1) / 200 * 1e6)
        return d


x = torch.randn(4, 4, device=dev, requires_grad=True)
for _ in range(3):
    seen.clear()
    Probe.apply(x).sum().backward()
print(f"python loop: {main_us:.1f} us on the calling thread, {seen[0]:.1f} us in a backward; "
      f"our spmm per call in a backward: {seen[1]:.1f} us", flush=True)

# (2) phases of an eager step
import torch_geometric.nn as pyg


def phases(model, graph, x, labels, n=30):
    opt = tr.adam(model)
    out = {"forward": [], "backward": [], "step": [], "total": []}
    for i in range(n + 5):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x, graph), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        torch.cuda.synchronize(); t4 = time.perf_counter()
        if i >= 5:
            for k, v in zip(out, (t1 - t0, t2 - t1, t3 - t2, t4 - t0)):
                out[k].append(v * 1e3)
    return {k: statistics.median(v) for k, v in out.items()}


for name in ("cora",):
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    inputs = tr.pyg_inputs(g)
    for model_name in ("sage", "gcn"):
        torch.manual_seed(0)
        init = tr.build(pyg, model_name, *tr.feature_dims(name)).state_dict()
        variants = {}
        for label, lib, inp in (("ours", at, g), ("pyg-edge", pyg, inputs["edge-index"]),
                                ("pyg-csr", pyg, inputs["sparse-csr"])):
            m = tr.build(lib, model_name, *tr.feature_dims(name), pyg_mode="sparse-csr" if label == "pyg-csr" else None).to(dev)
            m.load_state_dict(init)
            variants[label] = (m, inp)
        tr.forget_compiled()
        m = tr.build(at, model_name, *tr.feature_dims(name)).to(dev)
        m.load_state_dict(init)
        with torch.no_grad():
            m(x, g)
        variants["ours-compiled"] = (torch.compile(m, fullgraph=True), g)
        rounds = {k: [] for k in variants}
        for r in range(3):
            for label, (m, inp) in variants.items():
                rounds[label].append(phases(m, inp, x, labels))
        for label, rs in rounds.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{name} {model_name} {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()) + " ms", flush=True)


# (4) torch's own floor: the same step without a graph (an MLP as wide as GCN), eager and compiled
class MLP(torch.nn.Module):
    def __init__(self, i, h, o):
        super().__init__(); self.a = torch.nn.Linear(i, h); self.b = torch.nn.Linear(h, o)
    def forward(self, x, _g):
        return self.b(torch.relu(self.a(x)))

tr.forget_compiled()
x, labels = tr.random_data("cora", 2708, dev, 0)
i_dim, o_dim = tr.feature_dims("cora")
torch.manual_seed(0)
mlp = MLP(i_dim, 256, o_dim).to(dev); mlp2 = MLP(i_dim, 256, o_dim).to(dev); mlp2.load_state_dict(mlp.state_dict())
variants = {"mlp-eager": mlp, "mlp-compiled": torch.compile(mlp2, fullgraph=True)}
rounds = {k: [] for k in variants}
for r in range(3):
    for label, m_ in variants.items():
        rounds[label].append(phases(m_, None, x, labels))
for label, rs in rounds.items():
    med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    print(f"cora-sized {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()) + " ms", flush=True)
