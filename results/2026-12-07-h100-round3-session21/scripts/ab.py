"""A/B in turns: the fused SAGE node's root GEMM with its ReLU as torch._addmm_activation on a
matrix input (A: today; torch copies the input into the output first, a device-to-device memcpy)
against addmm_ in place and relu_ (B)."""
import statistics, time
import torch, torch_geometric.nn as pyg
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr

dev = torch.device("cuda")
original = torch._addmm_activation


def in_place(self, a, b, *args, **kw):
    return self.addmm_(a, b).relu_() if self.dim() == 2 and not args and not kw else original(self, a, b, *args, **kw)


for name in ("cora", "pubmed"):
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    dims = tr.feature_dims(name)
    torch.manual_seed(0)
    init = tr.build(pyg, "sage", *dims).state_dict()
    steps = {}
    for label, lib, inp in (("A", at, g), ("B", at, g), ("pyg", pyg, tr.pyg_inputs(g)["edge-index"])):
        m = tr.build(lib, "sage", *dims).to(dev)
        m.load_state_dict(init)
        steps[label] = tr.eager_step(m, inp, x, labels, 0)
    times = {k: [] for k in steps}
    losses = {k: [] for k in steps}
    for r in range(10):
        for label, s in steps.items():
            torch._addmm_activation = in_place if label == "B" else original
            for i in range(5):
                torch.cuda.synchronize(); t = time.perf_counter()
                loss = s()
                torch.cuda.synchronize()
                if r or i >= 2:
                    times[label].append((time.perf_counter() - t) * 1e3)
                losses[label].append(loss.item())
    torch._addmm_activation = original
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{name} sage eager: A {med['A']:.3f} ms, B {med['B']:.3f} ms, pyg {med['pyg']:.3f} ms; "
          f"last losses {losses['A'][-1]:.6f} {losses['B'][-1]:.6f} {losses['pyg'][-1]:.6f}", flush=True)
