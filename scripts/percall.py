"""Host time per call of each autosage op once its plan exists, against one torch op on the same
tensors: what a host-bound small-graph step pays per launch. On cora (the shipped graph), K=16
(8 heads x 8 for the attention ops), fp32: each op called N times without synchronising, its
host time per call the wall time of issuing them (the GPU keeps up: these kernels take a few
microseconds), then the same through the custom operator (torch.ops.autosage: what torch.compile
calls), and a forward with its backward (one differentiable call and its gradient). Then where a
backward's host time goes: a no-op Python autograd.Function's forward and backward (the engine's
own cost of a Python node), each backward implementation called directly, and a cProfile of them.
The SpMM runs once more on a plan fixed to cuSPARSE: the host cost of a vendor call.

  python3 scripts/percall.py OUT.txt [CALLS]     (on a GPU, from the repository root)
"""
import cProfile
import io
import pstats
import sys
import time

import torch

import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import backward as bw
from autosage_cli.torch import handles, kernels, ops, training

CALLS = int(sys.argv[2]) if len(sys.argv) > 2 else 2000


def host_us(call, n: int = CALLS) -> float:
    """Mean host microseconds of one call of `call` (after 50 untimed ones: plans, caches)."""
    for _ in range(50):
        call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    elapsed = time.perf_counter() - t0
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return elapsed / n * 1e6


def main(path: str) -> None:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")   # CPU: only a smoke run
    g = training.training_graph(load_graph("datasets/cora.mtx.gz"), dev)
    n = g.n_rows
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, 16, device=dev, generator=gen)
    q, k, v = (torch.randn(n, 8, 8, device=dev, generator=gen) for _ in range(3))
    a_dst, a_src = (torch.randn(n, 8, device=dev, generator=gen) for _ in range(2))
    h = handles.handle(g)
    # the same graph with its SpMM fixed to cuSPARSE: a vendor call's host time (through CuPy),
    # against the native plan's above (scheduler.decisions.kinds.HOST_US)
    vendor = training.training_graph(load_graph("datasets/cora.mtx.gz"), dev)
    vendor.schedules = {"spmm": "cusparse-alg2"}
    cases = {
        "torch.relu (reference)": lambda: torch.relu(x),
        "torch.mm 2708x16 @ 16x16 (reference)": lambda: x @ x[:16],
        "at.spmm": lambda: at.spmm(g, x),
        "at.spmm, cuSPARSE plan (cusparse-alg2)": lambda: at.spmm(vendor, x),
        "at.sddmm": lambda: at.sddmm(g, x, x),
        "at.attention": lambda: at.attention(g, q, k, v),
        "at.additive_attention": lambda: at.additive_attention(g, a_dst, a_src, v),
        "torch.ops.autosage.spmm": lambda: torch.ops.autosage.spmm(h, None, x, n),
        "torch.ops.autosage.additive_attention": lambda: torch.ops.autosage.additive_attention(h, a_dst, a_src, v, 0.2),
    }
    xg, vg = x.clone().requires_grad_(), v.clone().requires_grad_()
    dg, sg = a_dst.clone().requires_grad_(), a_src.clone().requires_grad_()
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    backward = {
        "at.spmm forward + backward": lambda: at.spmm(g, xg).sum().backward(),
        "torch.relu forward + backward (reference)": lambda: torch.relu(xg).sum().backward(),
        "at.attention forward + backward": lambda: at.attention(g, qg, kg, vg).sum().backward(),
        "at.additive_attention forward + backward": lambda: at.additive_attention(g, dg, sg, vg).sum().backward(),
    }
    class Identity(torch.autograd.Function):     # the engine's cost of one Python node
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)

        @staticmethod
        def backward(ctx, grad):
            return grad

    backward["no-op autograd.Function forward + backward"] = lambda: Identity.apply(xg).sum().backward()
    # one GAT layer's attention (8 heads x 8): the layer's one node against the composition it replaced
    from autosage_cli.torch.gat_attention import gat_attention

    hg = v.clone().requires_grad_()
    att_s, att_d = (torch.randn(1, 8, 8, device=dev, generator=gen).requires_grad_() for _ in range(2))
    loops = at.nn.with_self_loops(g)[0]

    def composition():
        a_s, a_d = (hg * att_s).sum(-1), (hg * att_d).sum(-1)
        return at.additive_attention(loops, a_d, a_s, hg, 0.2)
    backward["GAT attention, score terms composed, fwd + bwd"] = lambda: composition().sum().backward()
    backward["GAT attention, gat_attention, fwd + bwd"] = (
        lambda: gat_attention(loops, hg, None, att_s, att_d, 0.2).sum().backward())
    # whole layers against PyG's (edge_index), 16 -> 16 features
    import torch_geometric.nn as pyg

    edge_index = torch.stack([g.col, g.row])
    for name, ours_layer, theirs_layer in (("SAGEConv", at.SAGEConv(16, 16), pyg.SAGEConv(16, 16)),
                                           ("GATConv 8x8", at.GATConv(16, 8, heads=8), pyg.GATConv(16, 8, heads=8))):
        ours_layer, theirs_layer = ours_layer.to(dev), theirs_layer.to(dev)
        backward[f"{name} (ours) fwd + bwd"] = lambda m=ours_layer: m(xg, g).sum().backward()
        backward[f"{name} (PyG, edge_index) fwd + bwd"] = lambda m=theirs_layer: m(xg, edge_index).sum().backward()
    O, stats = ops._additive_attention(g, a_dst, a_src, v, 0.2)
    dO = torch.randn_like(O)
    probs = kernels.additive_score_grads(g, a_dst, a_src, stats, v, O, dO, 0.2, False)[0]
    direct = {   # the backward implementations, called as the autograd nodes call them
        "spmm backward (ops._spmm_t)": lambda: ops._spmm_t(g, None, x, n),
        "additive backward (ops._additive_attention_backward_impl)":
            lambda: ops._additive_attention_backward_impl(g, a_dst, a_src, v, O, stats, dO, 0.2, True, True, True),
        "  its score grads (kernels.additive_score_grads)":
            lambda: kernels.additive_score_grads(g, a_dst, a_src, stats, v, O, dO, 0.2, True),
        "  its dV (backward.heads_spmm_t)": lambda: bw.heads_spmm_t(g, probs, dO),
        "attention backward (ops._attention_backward_impl)":
            lambda: ops._attention_backward_impl(g, q, k, v, O, dO, 0.35, True, True, True),
    }
    with open(path, "w") as out:
        for label, call in cases.items():
            with torch.no_grad():
                line = f"{label:46s} {host_us(call):8.1f} us/call (no grad)"
            print(line, file=out, flush=True)
            print(line, flush=True)
        for label, call in backward.items():
            line = f"{label:46s} {host_us(call, CALLS // 4):8.1f} us/call (a .sum() and its backward included)"
            print(line, file=out, flush=True)
            print(line, flush=True)
        # The engine's share: the same forward and backward with the backward on this thread
        # (autograd's device threads off), and the time spent inside our backward function
        with torch.autograd.set_multithreading_enabled(False):
            for label in ("at.spmm forward + backward", "torch.relu forward + backward (reference)",
                          "at.additive_attention forward + backward"):
                line = f"{label + ', this thread':46s} {host_us(backward[label], CALLS // 4):8.1f} us/call"
                print(line, file=out, flush=True)
                print(line, flush=True)
        for label, function in (("at.spmm forward + backward", ops._EagerSpMM),
                                ("at.additive_attention forward + backward", ops._EagerAdditive)):
            inside, original = [], function.backward

            def timed_backward(ctx, *grads, original=original, inside=inside):
                t0 = time.perf_counter()
                result = original(ctx, *grads)
                inside.append(time.perf_counter() - t0)
                return result
            function.backward = staticmethod(timed_backward)
            total = host_us(backward[label], CALLS // 4)
            function.backward = staticmethod(original)
            line = (f"{label:46s} {total:8.1f} us/call, of which inside its backward function "
                    f"{sum(inside) / len(inside) * 1e6:.1f} us")
            print(line, file=out, flush=True)
            print(line, flush=True)
        with torch.no_grad():
            for label, call in direct.items():
                line = f"{label:46s} {host_us(call, CALLS // 4):8.1f} us/call (no grad)"
                print(line, file=out, flush=True)
                print(line, flush=True)
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(200):
                for call in direct.values():
                    call()
            profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        print(text.getvalue(), file=out, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
