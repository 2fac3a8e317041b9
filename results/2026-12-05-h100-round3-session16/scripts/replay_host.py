"""A captured step's epoch as the training suite times it (CUDA events around one call, synchronised),
with the replay's Graph check as shipped (flat watch) and as before (a fingerprint of every Graph
rebuilt per replay), interleaved: five rounds of 50 calls each; plus the host time of the check alone."""
import statistics, sys, time
import torch
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr, capture

def fingerprint(g):
    tensors = tuple((t.data_ptr(), t._version) for t in (g.rowptr, g.row, g.col, g.weight) if t is not None)
    return (g.shape, tensors), {k: v for k, v in g.gpu.items() if k and k[0] == "plan"}

def old_check(self):
    for ref in self._seen:
        g = ref()
        structure, plans = fingerprint(g)
        old_structure, old_plans = self._old[id(g)]
        if structure != old_structure or not all(plans.get(k) is v for k, v in old_plans.items()):
            raise RuntimeError("changed")
new_check = capture._Captured._check_graphs
dev = torch.device("cuda")
for name in sys.argv[1:] or ["cora"]:
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    n_in, n_out = tr.feature_dims(name)
    for model_name in ("gcn", "sage"):
        model = tr.build(at, model_name, n_in, n_out).to(dev)
        call = tr.captured_step(model, g, x, labels, 3)
        for _ in range(4):
            call()
        step = next(c.cell_contents for c in call.__closure__ if isinstance(c.cell_contents, capture._Captured))
        step._old = {id(r()): fingerprint(r()) for r in step._seen}
        res = {"watch": [], "fingerprints": []}
        for _ in range(5):
            for label, fn in (("watch", new_check), ("fingerprints", old_check)):
                capture._Captured._check_graphs = fn
                times = []
                for _ in range(50):
                    with tr.Timer(dev) as t:
                        call()
                    times.append(t.ms)
                res[label].append(statistics.mean(times))
            capture._Captured._check_graphs = new_check
        host = {}
        for label, fn in (("watch", new_check), ("fingerprints", old_check)):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn(step)
            host[label] = (time.perf_counter() - t0) / 2000 * 1e6
        print(f"{name} {model_name}: {len(step._seen)} Graphs; epoch ms (median of 5 rounds of 50) watch "
              f"{statistics.median(res['watch']):.4f}, fingerprints {statistics.median(res['fingerprints']):.4f}; "
              f"check alone {host['watch']:.1f} vs {host['fingerprints']:.1f} us", flush=True)
