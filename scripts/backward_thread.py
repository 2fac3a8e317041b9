"""Which thread runs a training step's backward, and what it costs: autograd runs a CUDA backward on
a device thread of its own, where Python (our ops' backward functions, torch.compile's compiled
backward) runs several times slower than on the calling thread on the H200's host (percall.py).
`torch.autograd.set_multithreading_enabled(False)` runs it on the calling thread instead. Per
shipped small graph and model: both libraries' eager epochs (PyG in both of its modes) and their
default torch.compile epochs, with the backward on autograd's thread and on the calling thread.

  python3 scripts/backward_thread.py OUT.txt     (on a GPU, from the repository root)
  THREAD_GRAPHS, THREAD_MODELS: comma-separated subsets (default cora,pubmed and gcn,sage,gat)
"""
import os
import statistics
import sys

import torch
import torch_geometric.nn as pyg

import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr

GRAPHS = tuple(os.environ.get("THREAD_GRAPHS", "cora,pubmed").split(","))
MODELS = tuple(os.environ.get("THREAD_MODELS", "gcn,sage,gat").split(","))
STEPS, WARMUP = 30, 5


def epoch_ms(make_step, model, graph, x, labels) -> float:
    run = tr.train(make_step, model, graph, x, labels, STEPS, WARMUP)
    return statistics.median(run.times_ms)


def main(path: str) -> None:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")   # CPU: only a smoke run
    lines = []
    for name in GRAPHS:
        g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
        x, labels = tr.random_data(name, g.n_rows, dev, 0)
        n_in, n_out = tr.feature_dims(name)
        inputs = tr.pyg_inputs(g)
        for model_name in MODELS:
            torch.manual_seed(0)
            state = tr.build(pyg, model_name, n_in, n_out).state_dict()
            cases = [("ours", at, None, g)] + [(f"PyG {m}", pyg, m, inputs[m]) for m in tr.PYG_MODES[model_name]]
            for label, lib, mode, graph in cases:
                row = []
                for compiled in (False, True):
                    for threaded in (True, False):
                        model = tr.build(lib, model_name, n_in, n_out, pyg_mode=mode).to(dev)
                        model.load_state_dict(state)
                        own = at.Graph(g.rowptr, g.row, g.col, g.weight, g.shape) if lib is at else graph
                        step = (lambda *a: tr.compiled_step(*a, fullgraph=lib is at)) if compiled else tr.eager_step
                        try:
                            with torch.autograd.set_multithreading_enabled(threaded):
                                row.append(f"{epoch_ms(step, model, own, x, labels):7.2f}")
                        except Exception as exc:     # PyG's compiled sparse CSR GCN fails in dynamo
                            row.append(f"{'failed':>7s}")
                            print(f"{name} {model_name} {label} compiled={compiled}: {type(exc).__name__}: "
                                  f"{str(exc)[:160]}", file=sys.stderr)
                        tr.forget_compiled()
                line = f"{name:10s} {model_name:5s} {label:15s} " + " ".join(row)
                lines.append(line)
                print(line, flush=True)
    with open(path, "w") as out:
        out.write("ms per epoch: eager (autograd's thread, calling thread), compiled (autograd's "
                  "thread, calling thread)\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
