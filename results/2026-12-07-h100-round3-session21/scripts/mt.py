"""Eager steps with autograd's backward on its device thread (the default) and on the calling
thread (torch.autograd.set_multithreading_enabled(False)): ours and PyG, every model, in turns."""
import statistics, time
import torch, torch_geometric.nn as pyg
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr
from torch.profiler import profile, ProfilerActivity

dev = torch.device("cuda")
for name in ("cora", "pubmed"):
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    inputs = tr.pyg_inputs(g)
    dims = tr.feature_dims(name)
    for model_name in ("sage", "gcn", "gat"):
        torch.manual_seed(0)
        init = tr.build(pyg, model_name, *dims).state_dict()
        steps = {}
        best_pyg = {"gcn": "sparse-csr", "sage": "edge-index", "gat": "edge-index"}[model_name]
        for label, lib, inp, mode in (("ours", at, g, None), ("pyg", pyg, inputs[best_pyg], best_pyg)):
            m = tr.build(lib, model_name, *dims, pyg_mode=mode).to(dev)
            m.load_state_dict(init)
            steps[label] = tr.eager_step(m, inp, x, labels, 0)
        for s in steps.values():
            for _ in range(5):
                s()
        times = {(l, mt): [] for l in steps for mt in (True, False)}
        for r in range(6):
            for mt in (True, False):
                with torch.autograd.set_multithreading_enabled(mt):
                    for label, s in steps.items():
                        for _ in range(5):
                            torch.cuda.synchronize(); t = time.perf_counter()
                            s()
                            torch.cuda.synchronize()
                            times[(label, mt)].append((time.perf_counter() - t) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name} {model_name}: ours {med[('ours', True)]:.3f} / {med[('ours', False)]:.3f} ms (device thread / calling thread), "
              f"pyg {med[('pyg', True)]:.3f} / {med[('pyg', False)]:.3f} ms; ratio {med[('pyg', True)] / med[('ours', True)]:.2f}x / "
              f"{med[('pyg', False)] / med[('ours', False)]:.2f}x", flush=True)
        if name == "cora" and model_name == "sage":
            for mt in (True, False):
                with torch.autograd.set_multithreading_enabled(mt):
                    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                        for _ in range(10):
                            steps["ours"]()
                        torch.cuda.synchronize()
                for e in prof.key_averages(group_by_input_shape=True):
                    if e.key == "aten::fill_":
                        print(f"  multithreading {mt}: fill_ {e.input_shapes} self cpu {e.self_cpu_time_total / e.count:.1f} us avg")
