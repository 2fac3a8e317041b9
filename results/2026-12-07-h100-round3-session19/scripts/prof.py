"""Why a compiled step is slower than eager, and where an eager SAGE step's host time goes.
(1) eager vs compiled (fullgraph, default mode) medians for GCN and SAGE on cora and pubmed, with
    each mode's kernel time per step (torch.profiler CUDA) and kernel count;
(2) profiler tables (self CPU, self CUDA) of compiled and eager pubmed GCN;
(3) cProfile of compiled pubmed GCN and of eager cora SAGE.
The Inductor output code of every compiled graph is copied under $OUT/inductor."""
import cProfile, glob, io, os, pstats, shutil, statistics, sys, time
import torch, torch.nn.functional as F
import autosage_cli.torch as at
from autosage_cli.graphs.load import load_graph
from autosage_cli.torch import training as tr
from torch.profiler import profile, ProfilerActivity

dev = torch.device("cuda")
OUT = sys.argv[1]


def setup(name, model_name):
    g = tr.training_graph(load_graph(f"datasets/{name}.mtx.gz"), dev)
    x, labels = tr.random_data(name, g.n_rows, dev, 0)
    torch.manual_seed(0)
    return g, x, labels, tr.build(at, model_name, *tr.feature_dims(name)).to(dev)


def make(mode, name, model_name):
    g, x, labels, model = setup(name, model_name)
    if mode == "eager":
        return tr.eager_step(model, g, x, labels, 3)
    return tr.compiled_step(model, g, x, labels, 3, fullgraph=True)


def timed(step, n=40):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); step(); torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def kernel_time(step, n=20):
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    ev = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time for e in ev) / n, len(ev) / n


def tables(step, label, n=20):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    ka = p.key_averages()
    with open(f"{OUT}/{label}-profile.txt", "w") as f:
        f.write(ka.table(sort_by="self_cuda_time_total", row_limit=30))
        f.write("\n\n")
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=45))
        f.write("\n\n")
        f.write(ka.table(sort_by="cpu_time_total", row_limit=45))


def cprof(step, label, n=50):
    pr = cProfile.Profile(); pr.enable()
    for _ in range(n):
        step()
    torch.cuda.synchronize(); pr.disable()
    s = io.StringIO(); st = pstats.Stats(pr, stream=s)
    st.sort_stats("tottime").print_stats(40); st.sort_stats("cumulative").print_stats(50)
    open(f"{OUT}/{label}-cprofile.txt", "w").write(s.getvalue())


for name in ("pubmed", "cora"):
    for model_name in ("gcn", "sage"):
        for mode in ("eager", "compiled", "eager"):
            step = make(mode, name, model_name)
            for _ in range(10):
                step()
            ms = timed(step)
            kt, kn = kernel_time(step)
            print(f"{name} {model_name} {mode}: {ms:.3f} ms wall, {kt:.1f} us kernels, {kn:.0f} kernels/step", flush=True)
            label = f"{name}-{model_name}-{mode}"
            if name == "pubmed" and model_name == "gcn":
                tables(step, label)
                if mode == "compiled":
                    cprof(step, label)
            if name == "cora" and model_name == "sage" and mode == "eager":
                cprof(step, label)
            del step
            tr.forget_compiled()
            tr.free_memory()

root = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
if root:
    os.makedirs(f"{OUT}/inductor", exist_ok=True)
    for f in glob.glob(f"{root}/**/*.py", recursive=True):
        if "autosage" in open(f, errors="ignore").read():
            shutil.copy(f, f"{OUT}/inductor/{os.path.basename(f)}")
