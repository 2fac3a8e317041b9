#!/usr/bin/env python3
"""Full-graph training epochs: autosage layers vs the same model in PyG, side by side, one CSV.

    python3 scripts/train_bench.py --out results/train.csv                       # both graphs
    python3 scripts/train_bench.py --graphs cora --models gcn,sage --steps 5     # quick check

Per graph (a synthetic preset, shipped dataset or any name `autosage inspect --dataset` takes, used
as a pattern: every edge weight 1, self-loops dropped) and model, with random features and labels (fixed seed):
  gcn          2 x GCNConv, hidden 256
  sage         3 x SAGEConv (mean), hidden 256
  transformer  TransformerConv 8 heads x 8, then 1 head (dot-product attention)
PyG's model is built first; ours gets its initial weights (load_state_dict), so both start equal.
Each epoch is forward + backward + Adam step, timed with CUDA events; `--warmup` epochs first
(tuning and PyG's caches happen there), then `--steps` timed epochs. PyG runs in its fastest mode
that works: the adjacency as a torch sparse CSR tensor where the layer accepts it (GCN with
cached=True, SAGE), else edge_index. A PyG run that fails (out of memory, say) becomes a `skipped`
row with the reason. Columns: graph, n_rows, nnz, op (train-gcn|train-sage|train-transformer),
k (hidden width), heads, dtype, backend, mode, ms_median, ms_p20, ms_p80, setup_ms, baseline_ms
(PyG's median), speedup_vs_pyg, loss_first, loss_last (after --steps), pyg_loss_last,
loss_rel_diff, status, error, gpu, timestamp.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.graphs.load import load_graph  # noqa: E402

FEATURES = {"reddit-like": (602, 41), "products-like": (100, 47)}
HIDDEN = 256
COLUMNS = ("graph", "n_rows", "nnz", "op", "k", "heads", "dtype", "backend", "mode", "ms_median",
           "ms_p20", "ms_p80", "setup_ms", "baseline_ms", "speedup_vs_pyg", "loss_first", "loss_last",
           "pyg_loss_last", "loss_rel_diff", "status", "error", "gpu", "timestamp")


class Net(torch.nn.Module):
    """A stack of layers with ReLU between them; `graph` is what every layer takes."""

    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x, graph):
        for i, layer in enumerate(self.layers):
            x = layer(x, graph)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x


def build(lib, model: str, n_in: int, n_out: int, pyg_mode: str | None = None) -> Net:
    """The model from `lib` (autosage_cli.torch or torch_geometric.nn)."""
    if model == "gcn":
        cached = {"cached": True} if pyg_mode == "sparse-csr" else {}
        return Net([lib.GCNConv(n_in, HIDDEN, **cached), lib.GCNConv(HIDDEN, n_out, **cached)])
    if model == "sage":
        return Net([lib.SAGEConv(n_in, HIDDEN), lib.SAGEConv(HIDDEN, HIDDEN), lib.SAGEConv(HIDDEN, n_out)])
    if model == "transformer":
        return Net([lib.TransformerConv(n_in, 8, heads=8), lib.TransformerConv(64, n_out, heads=1)])
    raise ValueError(f"unknown model {model!r}")


class Timer:
    """Epoch time: CUDA events on a GPU, the wall clock on the CPU (--device cpu, a smoke run)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            self.ms = self.start.elapsed_time(self.end)
        else:
            self.ms = (time.perf_counter() - self.t0) * 1e3
        return False


def train(model: Net, graph, x, labels, steps: int, warmup: int):
    """(epoch times in ms of the timed steps, losses of every step)."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times, losses = [], []
    for step in range(warmup + steps):
        with Timer(x.device) as timer:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x, graph), labels)
            loss.backward()
            opt.step()
        losses.append(loss.item())
        if step >= warmup:
            times.append(timer.ms)
    return times, losses


def pyg_inputs(graph: at.Graph):
    """PyG's graph inputs per mode: the adjacency as a torch sparse CSR tensor (rows = targets,
    PyG's `adj_t`), and the edge_index (source, target)."""
    ones = torch.ones(graph.nnz, device=graph.device)
    adj_t = torch.sparse_csr_tensor(graph.rowptr, graph.col, ones, graph.shape)
    return {"sparse-csr": adj_t, "edge-index": torch.stack([graph.col, graph.row])}


def run_pyg(pyg, model_name, dims, inputs, x, labels, args, init_state):
    """(mode, times, losses) of the first PyG mode that runs; raises the last failure."""
    modes = ["edge-index"] if model_name == "transformer" else ["sparse-csr", "edge-index"]
    failure = None
    for mode in modes:
        model = build(pyg, model_name, *dims, pyg_mode=mode).to(x.device)
        model.load_state_dict(init_state)
        try:
            return (mode, *train(model, inputs[mode], x, labels, args.steps, args.warmup))
        except (torch.cuda.OutOfMemoryError, RuntimeError, NotImplementedError) as exc:
            failure = f"{mode}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        finally:
            del model
            free_memory()
    raise RuntimeError(failure)


def free_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def stats(times):
    return tuple(float(np.percentile(times, q)) for q in (50, 20, 80)) if times else (np.nan,) * 3


def bench_graph(name: str, args, writer, stamp: dict) -> None:
    import torch_geometric.nn as pyg

    t0 = time.perf_counter()
    csr = load_graph(dataset=name, root=args.root)
    row = torch.repeat_interleave(torch.arange(csr.n_rows), torch.from_numpy(np.diff(csr.indptr)).long())
    col = torch.from_numpy(csr.indices).long()
    # Without self-loops: PyG's GCN adds them with add_self_loops on a sparse adjacency but with
    # add_remaining_self_loops on an edge_index, two functions once a graph has loops of its own.
    keep = row != col
    graph = at.Graph.from_coo(row[keep].to(args.device), col[keep].to(args.device), None, csr.shape,
                              cache=args.cache)
    load_ms = (time.perf_counter() - t0) * 1e3
    n_in, n_out = FEATURES.get(name, (args.features, args.classes))
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    x = torch.randn(graph.n_rows, n_in, device=args.device, generator=gen)
    labels = torch.randint(0, n_out, (graph.n_rows,), device=args.device, generator=gen)
    inputs = pyg_inputs(graph)
    print(f"{name}: {graph.n_rows} nodes, {graph.nnz} edges, loaded in {load_ms:.0f} ms", file=sys.stderr)
    for model_name in args.models:
        torch.manual_seed(args.seed)
        init_state = build(pyg, model_name, n_in, n_out).state_dict()
        base = {"graph": name, "n_rows": graph.n_rows, "nnz": graph.nnz, "op": f"train-{model_name}",
                "k": HIDDEN if model_name != "transformer" else 64,
                "heads": 8 if model_name == "transformer" else 1, "dtype": "float32", **stamp}
        ours = build(at, model_name, n_in, n_out).to(args.device)
        ours.load_state_dict(init_state)
        t0 = time.perf_counter()
        try:
            times, losses = train(ours, graph, x, labels, args.steps, args.warmup)
        except RuntimeError as exc:
            writer.writerow({**base, "backend": "autosage", "status": "failed", "error": str(exc)[:300]})
            continue
        finally:
            del ours
            free_memory()
        setup_ms = (time.perf_counter() - t0) * 1e3 - sum(times)
        med, p20, p80 = stats(times)
        mine = {**base, "backend": "autosage", "mode": "graph", "ms_median": med, "ms_p20": p20,
                "ms_p80": p80, "setup_ms": setup_ms, "loss_first": losses[0], "loss_last": losses[-1],
                "status": "ok"}
        try:
            mode, pyg_times, pyg_losses = run_pyg(pyg, model_name, (n_in, n_out), inputs, x, labels,
                                                  args, init_state)
        except RuntimeError as exc:
            writer.writerow({**base, "backend": "pyg", "status": "skipped", "error": str(exc)})
            writer.writerow(mine)
            print(f"  {model_name}: ours {med:.1f} ms/epoch; PyG skipped: {exc}", file=sys.stderr)
            continue
        pmed, pp20, pp80 = stats(pyg_times)
        rel = abs(losses[-1] - pyg_losses[-1]) / max(abs(pyg_losses[-1]), 1e-30)
        writer.writerow({**base, "backend": "pyg", "mode": mode, "ms_median": pmed, "ms_p20": pp20,
                         "ms_p80": pp80, "loss_first": pyg_losses[0], "loss_last": pyg_losses[-1],
                         "status": "ok"})
        writer.writerow({**mine, "baseline_ms": pmed, "speedup_vs_pyg": pmed / med,
                         "pyg_loss_last": pyg_losses[-1], "loss_rel_diff": rel})
        print(f"  {model_name}: ours {med:.1f} ms/epoch, PyG ({mode}) {pmed:.1f} ms -> {pmed / med:.2f}x; "
              f"loss after {len(losses)} steps {losses[-1]:.5f} vs {pyg_losses[-1]:.5f} (rel {rel:.1e})",
              file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", default="reddit-like,products-like")
    parser.add_argument("--models", default="gcn,sage,transformer")
    parser.add_argument("--steps", type=int, default=10, help="timed epochs (losses compared after them)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--features", type=int, default=128, help="input features of other graphs")
    parser.add_argument("--classes", type=int, default=16, help="classes of other graphs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="datasets")
    parser.add_argument("--cache", default=None, help="decision cache file (default: autosage's)")
    parser.add_argument("--out", default="results/train_bench.csv")
    parser.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run)")
    args = parser.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    args.device = torch.device(args.device)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        return fail("torch sees no CUDA device")
    if args.steps < 1 or args.warmup < 0:
        return fail("--steps must be >= 1 and --warmup >= 0")
    if unknown := sorted(set(args.models) - {"gcn", "sage", "transformer"}):
        return fail(f"unknown model {unknown[0]!r}; choose gcn, sage, transformer")
    gpu = torch.cuda.get_device_name() if args.device.type == "cuda" else "cpu"
    stamp = {"gpu": gpu, "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for name in args.graphs.split(","):
            try:
                bench_graph(name, args, writer, stamp)
            except AutosageError as exc:
                return fail(str(exc))
            f.flush()
    print(f"wrote {out}", file=sys.stderr)
    return 0


def fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
