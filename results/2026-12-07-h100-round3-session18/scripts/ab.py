"""A/B of a first layer as GEMMs autograd records (fused_layer.gemms_only) against our one node,
eager training steps of the suite's SAGE and GCN, with PyG's eager modes in the same process.
Interleaved rounds: each round runs every variant for STEPS back-to-back steps (after a warm-up),
the median of the rounds' per-step times is reported."""
import statistics, sys, time
import torch
import autosage_cli.torch as at
import torch_geometric.nn as pyg
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr, fused_layer

ROUNDS, STEPS = int(__import__("os").environ.get("ROUNDS", 7)), 30
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
real_gemms_only = fused_layer.gemms_only


def timed_round(step):
    sync()
    t = time.perf_counter()
    for _ in range(STEPS):
        step()
    sync()
    return (time.perf_counter() - t) / STEPS * 1e3


for name in sys.argv[1:]:
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    dims = tr.feature_dims(name)
    inputs = tr.pyg_inputs(g)
    for model_name in ("sage", "gcn"):
        torch.manual_seed(0)
        ours = tr.build(at, model_name, *dims).to(dev)
        state = ours.state_dict()
        variants = {}
        for label, on in (("gemms-only", True), ("node", False)):
            model = tr.build(at, model_name, *dims).to(dev)
            model.load_state_dict(state)
            variants[label] = (model, g, on)
        for mode in tr.PYG_MODES[model_name]:
            model = tr.build(pyg, model_name, *dims, pyg_mode=mode).to(dev)
            model.load_state_dict(state)
            variants[f"pyg-{mode}"] = (model, inputs[mode], None)
        steps = {}
        for label, (model, graph, on) in variants.items():
            fused_layer.gemms_only = real_gemms_only if on in (True, None) else (lambda *a: False)
            steps[label] = tr.eager_step(model, graph, x, labels, 3)
            for _ in range(5):
                steps[label]()
        times = {label: [] for label in steps}
        for _ in range(ROUNDS):
            for label, step in steps.items():
                on = variants[label][2]
                fused_layer.gemms_only = real_gemms_only if on in (True, None) else (lambda *a: False)
                times[label].append(timed_round(step))
        fused_layer.gemms_only = real_gemms_only
        med = {label: statistics.median(v) for label, v in times.items()}
        pyg_best = min(v for k, v in med.items() if k.startswith("pyg"))
        print(f"{name} {model_name}: " + "  ".join(f"{k} {v:.3f} ms" for k, v in med.items())
              + f"  | vs PyG's faster: gemms-only {pyg_best / med['gemms-only']:.2f}x, node {pyg_best / med['node']:.2f}x",
              flush=True)
