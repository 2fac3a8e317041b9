"""Where the backward's host time goes on autograd's device thread vs the calling thread: the
suite's SAGE and GCN on cora, eager steps; LinearAggregate.backward and ops.spmm_t timed from
inside (perf_counter, per call), plus a pure-aten autograd.Function of the same GEMM shapes."""
import statistics, sys, time, threading
import torch, torch.nn.functional as F
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr, fused_layer, ops

acc = {}
def timed(name, fn):
    def wrapper(*a, **k):
        t = time.perf_counter(); r = fn(*a, **k)
        acc.setdefault(name, []).append((time.perf_counter() - t) * 1e6); return r
    return wrapper
orig_bw = fused_layer.LinearAggregate.backward
fused_layer.LinearAggregate.backward = staticmethod(timed("LinearAggregate.backward", orig_bw))
orig_spmm_t = ops.spmm_t
ops.spmm_t = timed("ops.spmm_t", orig_spmm_t)
orig_fwd = fused_layer.LinearAggregate.forward
fused_layer.LinearAggregate.forward = staticmethod(timed("LinearAggregate.forward", orig_fwd))

class Plain(torch.autograd.Function):       # the same aten work, no autosage op
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w); return x.mm(w.t())
    @staticmethod
    def backward(ctx, d):
        t = time.perf_counter()
        x, w = ctx.saved_tensors
        r = d.mm(w), d.t().mm(x)
        acc.setdefault("Plain.backward", []).append((time.perf_counter() - t) * 1e6)
        return r

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
for name in sys.argv[1:] or ["cora"]:
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    n_in, n_out = tr.feature_dims(name)
    for model_name in ("sage", "gcn"):
        model = tr.build(at, model_name, n_in, n_out).to(dev)
        for threaded in (True, False, True, False):
            acc.clear()
            with torch.autograd.set_multithreading_enabled(threaded):
                run = tr.train(tr.eager_step, model, g, x, labels, 40, 5)
            parts = "  ".join(f"{k} {statistics.median(v):6.1f}us x{len(v)//40}" for k, v in sorted(acc.items()))
            print(f"{name} {model_name} {'device-thread' if threaded else 'calling-thread'}: epoch {statistics.median(run.times_ms):.3f} ms | {parts}", flush=True)
    w = torch.randn(256, 256, device=dev, requires_grad=True)
    h = torch.randn(g.n_rows, 256, device=dev, requires_grad=True)
    for threaded in (True, False, True, False):
        acc.clear()
        with torch.autograd.set_multithreading_enabled(threaded):
            for _ in range(200):
                Plain.apply(h, w).sum().backward()
            sync()
            t = time.perf_counter()
            for _ in range(200):
                Plain.apply(h, w).sum().backward()
            sync()
            whole = (time.perf_counter() - t) / 200 * 1e6
        print(f"{name} plain fwd+bwd {'device-thread' if threaded else 'calling-thread'}: {whole:.1f} us/iter, Plain.backward median {statistics.median(acc['Plain.backward'][200:]):.1f} us", flush=True)
