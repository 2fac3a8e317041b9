"""Where our eager SAGE step's two cudaMemcpyAsync and two aten::fill_ per step come from: the
profiler's stacks and shapes for those events, and the memcpy kinds on the device side."""
import torch, torch_geometric.nn as pyg
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr
from torch.profiler import profile, ProfilerActivity

dev = torch.device("cuda")
g = tr.training_graph(load_graph("datasets/cora.mtx.gz"), dev)
x, labels = tr.random_data("cora", g.n_rows, dev, 0)
dims = tr.feature_dims("cora")
torch.manual_seed(0)
init = tr.build(pyg, "sage", *dims).state_dict()
for label, lib, inp in (("ours", at, g), ("pyg-edge", pyg, tr.pyg_inputs(g)["edge-index"])):
    m = tr.build(lib, "sage", *dims).to(dev)
    m.load_state_dict(init)
    step = tr.eager_step(m, inp, x, labels, 0)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_stack=True) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    print(f"===== {label}")
    for e in prof.key_averages():
        if "Memcpy" in e.key or "Memset" in e.key:
            print(f"device: {e.key}: {e.count} ({e.count / 10:.1f}/step)")
    for e in prof.key_averages(group_by_stack_n=8):
        if e.key in ("cudaMemcpyAsync", "aten::fill_", "aten::copy_", "aten::_local_scalar_dense", "cudaStreamSynchronize", "aten::item"):
            print(f"--- {e.key} x{e.count}: self cpu {e.self_cpu_time_total / e.count:.1f} us avg")
            for fr in e.stack[:8]:
                print("     ", fr)
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key == "aten::fill_":
            print(f"fill_ shapes {e.input_shapes} x{e.count}: self cpu {e.self_cpu_time_total / e.count:.1f} us avg")
