"""Where an eager small-graph training step's time goes, ours against PyG: on cora and pubmed (the
shipped graphs), GAT, GCN and SAGE as the training suite builds them (same weights and data), PyG on
its edge_index. Per model: two means of 100 steps each, then for GAT and GCN the torch profiler's
CUDA kernel count per step and self-CPU table for both libraries, and a cProfile of 50 of our steps.

  python3 scripts/profile_small_step.py OUT.txt      (on a GPU, from the repository root)
"""
import cProfile
import io
import pstats
import sys
import time

import torch
import torch_geometric.nn as pyg
from torch.profiler import ProfilerActivity, profile

import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr

GRAPHS = ("cora", "pubmed")
MODELS = ("gat", "gcn", "sage")
PROFILED = ("gat", "gcn")        # the models whose steps are profiled, beside being timed


def timed(step, n: int) -> float:
    """Mean ms of n steps, between two device synchronisations."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


def torch_profile(step, steps: int = 10):
    """(CUDA kernels per step, the self-CPU table) of `steps` steps under the torch profiler."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    kernels = sum(e.count for e in events if e.device_type.name == "CUDA")
    return kernels / steps, events.table(sort_by="self_cpu_time_total", row_limit=25)


def python_profile(step, steps: int = 50) -> str:
    """cProfile of `steps` steps: top own time, then top cumulative."""
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    pr.disable()
    buf = io.StringIO()
    stats = pstats.Stats(pr, stream=buf)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(45)
    return buf.getvalue()


def main(path: str) -> None:
    with open(path, "w") as out:
        def say(text: str) -> None:
            print(text, file=out, flush=True)
            print(text, flush=True)

        for name in GRAPHS:
            g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), "cuda")
            x, labels = tr.random_data(name, g.n_rows, g.device, 0)
            edge_index = tr.pyg_inputs(g)["edge-index"]
            n_in, n_out = tr.FEATURES.get(name, tr.OTHER_FEATURES)
            for model_name in MODELS:
                torch.manual_seed(0)
                init = tr.build(pyg, model_name, n_in, n_out).state_dict()
                ours, theirs = (tr.build(lib, model_name, n_in, n_out).cuda() for lib in (at, pyg))
                ours.load_state_dict(init)
                theirs.load_state_dict(init)
                steps = {"ours": tr.eager_step(ours, g, x, labels, 0),
                         "pyg": tr.eager_step(theirs, edge_index, x, labels, 0)}
                for step in steps.values():   # plans, tunes and caches happen here
                    for _ in range(10):
                        step()
                a, b = timed(steps["ours"], 100), timed(steps["pyg"], 100)
                a2, b2 = timed(steps["ours"], 100), timed(steps["pyg"], 100)
                say(f"== {name} {model_name}: ours {a:.3f}/{a2:.3f} ms, PyG edge-index {b:.3f}/{b2:.3f} ms "
                    f"-> {b / a:.2f}x/{b2 / a2:.2f}x")
                if model_name not in PROFILED:
                    continue
                for label, step in steps.items():
                    kernels, table = torch_profile(step)
                    say(f"  {label}: {kernels:.0f} CUDA kernels per step")
                    say(table)
                say(python_profile(steps["ours"]))


if __name__ == "__main__":
    main(sys.argv[1])
