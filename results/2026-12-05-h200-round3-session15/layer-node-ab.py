"""The experiment behind fused-layer-ab-262a86e.txt (run as `python3 layer-node-ab.py OUT.txt` from
the repository root on a GPU, at 262a86e): (1) column sums of a tall matrix, four ways; (2) eager
and captured training steps with the layer as one autograd node (ReLU inside, or after) and as
the separate ops, beside PyG's eager modes, in interleaved rounds in one process."""
import os, sys, time, statistics
import torch, torch.nn.functional as F
import torch_geometric.nn as pyg
import autosage_cli.torch as at
from autosage_cli.bench.suites import resolve_graph
from autosage_cli.torch import training as tr, fused_layer

out = open(sys.argv[1], "w")
def say(s):
    print(s, file=out, flush=True); print(s, flush=True)

def gpu_time(fn, reps=200):
    for _ in range(10): fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): fn()
    g.replay(); torch.cuda.synchronize()
    s.record()
    for _ in range(reps // 20): g.replay()
    e.record(); e.synchronize()
    return s.elapsed_time(e) * 1e3 / reps

if os.environ.get("COLSUM", "1") == "1":
    for rows, cols in ((19717, 256), (19717, 16), (2708, 256), (2708, 16), (13752, 64), (232965, 256), (2449029, 47)):
        G = torch.randn(rows, cols, device="cuda")
        ones = torch.ones(rows, device="cuda"); ones_row = torch.ones(1, rows, device="cuda")
        ways = {"sum0": lambda: G.sum(0), "mv": lambda: torch.mv(G.t(), ones),
                "mm1": lambda: torch.mm(ones_row, G), "sum0-f64acc": lambda: G.sum(0, dtype=torch.float32)}
        ref = G.double().sum(0)
        res = {k: gpu_time(f) for k, f in ways.items()}
        err = {k: float((f().double().reshape(-1) - ref).abs().max()) for k, f in ways.items()}
        say(f"colsum {rows}x{cols}: " + ", ".join(f"{k} {v:.2f} us (err {err[k]:.1e})" for k, v in res.items()))

real_applies = fused_layer.applies
def set_fused(on):
    fused_layer.applies = real_applies if on else (lambda *t: False)

def timed(step, n):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): step()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e3

GRAPHS = os.environ.get("AB_GRAPHS", "cora,pubmed,ca-CondMat,wiki-Vote").split(",")
MODELS = os.environ.get("AB_MODELS", "sage,gcn").split(",")
ROUNDS = int(os.environ.get("AB_ROUNDS", "5"))
for name in GRAPHS:
    g = tr.training_graph(resolve_graph(name).load("datasets", 0), "cuda")
    x, labels = tr.random_data(name, g.n_rows, g.device, 0)
    inputs = tr.pyg_inputs(g)
    n_in, n_out = tr.feature_dims(name)
    for model in MODELS:
        torch.manual_seed(0)
        init = tr.build(pyg, model, n_in, n_out).state_dict()
        steps, flags = {}, {}
        for label, on, relu in (("fused", True, True), ("fused-norelu", True, False), ("separate", False, False)):
            m = tr.build(at, model, n_in, n_out, fuse_relu=relu).cuda(); m.load_state_dict(init)
            set_fused(on)
            steps[label] = tr.eager_step(m, g, x, labels, 0); flags[label] = on
            for _ in range(10): steps[label]()
            mc = tr.build(at, model, n_in, n_out, fuse_relu=relu).cuda(); mc.load_state_dict(init)
            steps[label + "-captured"] = tr.captured_step(mc, g, x, labels, 3); flags[label + "-captured"] = on
            for _ in range(5): steps[label + "-captured"]()
        for mode in tr.PYG_MODES[model]:
            t = tr.build(pyg, model, n_in, n_out, pyg_mode=mode).cuda(); t.load_state_dict(init)
            steps["pyg " + mode] = tr.eager_step(t, inputs[mode], x, labels, 0); flags["pyg " + mode] = True
            for _ in range(10): steps["pyg " + mode]()
        times = {k: [] for k in steps}
        for _ in range(ROUNDS):
            for k, st in steps.items():
                set_fused(flags[k]); times[k].append(timed(st, 30))
        set_fused(True)
        med = {k: statistics.median(v) for k, v in times.items()}
        best = min(v for k, v in med.items() if k.startswith("pyg"))
        say(f"{name} {model}: " + ", ".join(f"{k} {v:.3f} ms ({best / v:.2f}x)" for k, v in med.items())
            + f"  [spread fused {min(times['fused']):.3f}-{max(times['fused']):.3f}]")
