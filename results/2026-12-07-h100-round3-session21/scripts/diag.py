"""(1) Does Python's cyclic GC cost an eager small-graph step? ours and PyG SAGE on cora, in turns,
GC on and off. (2) Where our eager SAGE step's host time goes, against PyG's: torch.profiler's
self-CPU time per op over 20 steps, and the kernel launches per step."""
import gc, statistics, time
import torch, torch.nn.functional as F
import torch_geometric.nn as pyg
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr

dev = torch.device("cuda")
for name in ("cora", "pubmed"):
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    inputs = tr.pyg_inputs(g)
    dims = tr.feature_dims(name)
    torch.manual_seed(0)
    init = tr.build(pyg, "sage", *dims).state_dict()
    models = {}
    for label, lib, inp in (("ours", at, g), ("pyg-edge", pyg, inputs["edge-index"])):
        m = tr.build(lib, "sage", *dims).to(dev)
        m.load_state_dict(init)
        models[label] = (tr.eager_step(m, inp, x, labels, 0), m)
    for step, _ in models.values():
        for _ in range(5):
            step()
    torch.cuda.synchronize()
    times = {(l, gcmode): [] for l in models for gcmode in ("gc-on", "gc-off")}
    for r in range(6):
        for gcmode in ("gc-on", "gc-off"):
            (gc.enable if gcmode == "gc-on" else gc.disable)()
            for label, (step, _) in models.items():
                for _ in range(10):
                    torch.cuda.synchronize(); t = time.perf_counter()
                    step()
                    torch.cuda.synchronize()
                    times[(label, gcmode)].append((time.perf_counter() - t) * 1e3)
    gc.enable()
    # (0) does a turn's first epoch pay for the switch? 12 turns of 4 epochs, in alternation
    pos = {(l, i): [] for l in models for i in range(4)}
    for r in range(12):
        for label, (step, _) in models.items():
            for i in range(4):
                torch.cuda.synchronize(); t = time.perf_counter()
                step()
                torch.cuda.synchronize()
                pos[(label, i)].append((time.perf_counter() - t) * 1e3)
    for label in models:
        print(f"{name} sage {label:9s} by position in a turn of 4: " +
              ", ".join(f"{statistics.median(pos[(label, i)]):.3f}" for i in range(4)) + " ms (medians of 12)", flush=True)
    for key, v in times.items():
        print(f"{name} sage {key[0]:9s} {key[1]}: median {statistics.median(v):.3f} ms", flush=True)
    if name != "cora":
        continue
    from torch.profiler import profile, ProfilerActivity
    for label, (step, _) in models.items():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                step()
            torch.cuda.synchronize()
        ka = prof.key_averages()
        launches = sum(e.count for e in ka if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"))
        print(f"== {name} sage {label}: kernel launches per step {launches / 20:.1f}")
        print(ka.table(sort_by="self_cpu_time_total", row_limit=28, max_name_column_width=60))
