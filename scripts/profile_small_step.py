"""Where an eager small-graph training step's time goes, ours against PyG: on cora and pubmed (the
shipped graphs), GAT, GCN and SAGE as the training suite builds them (same weights and data), PyG on
each of its modes (edge_index, sparse CSR). Per model: two means of 100 steps each, the plans our
step ran (backend, schedule, whether it launches packed) and how many of its launches went through
CuPy, then the torch profiler's CUDA kernel count per step and self-CPU table for ours and PyG's
fastest mode, and a cProfile of 50 of our steps.

  python3 scripts/profile_small_step.py OUT.txt      (on a GPU, from the repository root)
  PROFILE_GRAPHS, PROFILE_MODELS: comma-separated subsets (default cora,pubmed and gat,gcn,sage)
  PROFILE_CAPTURED=1: also our captured step (the training suite's `captured` mode): its replay's
  time and the kernels one replay runs (what bounds a step with no host work left)
  PROFILE_COMPILED=1: also our step under torch.compile (default mode, fullgraph, as the suite's
  `compiled` rows): its time, the torch profiler's tables and a cProfile
  PROFILE_PYG=0: ours only (a large graph, where PyG's modes run out of memory or take seconds);
  PROFILE_GRAPHS then takes any dataset name `autosage bench --dataset` takes (products-like)
"""
import cProfile
import gc
import io
import os
import pstats
import sys
import time

import torch
import torch_geometric.nn as pyg
from torch.profiler import ProfilerActivity, profile

import autosage_cli.torch as at
from autosage_cli.bench.suites import resolve_graph
from autosage_cli.torch import training as tr

GRAPHS = tuple(os.environ.get("PROFILE_GRAPHS", "cora,pubmed").split(","))
MODELS = tuple(os.environ.get("PROFILE_MODELS", "gat,gcn,sage").split(","))
PROFILED = MODELS               # the models whose steps are profiled, beside being timed
CAPTURED = os.environ.get("PROFILE_CAPTURED") == "1"
COMPILED = os.environ.get("PROFILE_COMPILED") == "1"
WITH_PYG = os.environ.get("PROFILE_PYG", "1") == "1"


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
    # the host table says where the launches' time goes; the device table which kernels bound a
    # captured replay of the same step (its GPU work is the eager step's)
    return kernels / steps, (events.table(sort_by="self_cpu_time_total", row_limit=25) + "\n"
                             + events.table(sort_by="self_device_time_total", row_limit=20))


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


def plans_report() -> str:
    """Every prepared plan of every live Graph: op, width, backend, schedule, packed or not."""
    from autosage_cli.torch.graph import Graph

    lines = []

    def is_graph(o) -> bool:
        try:
            return isinstance(o, Graph)
        except ReferenceError:      # a weak proxy (torch.compile leaves some) whose object is gone
            return False

    for graph in (o for o in gc.get_objects() if is_graph(o)):
        for key, plan in graph.gpu.items():
            if isinstance(key, tuple) and key and key[0] == "plan":
                packs = getattr(plan, "packed", None)
                try:
                    packed = packs is not None and (packs() if packs.__code__.co_argcount == 1 else packs(False)) is not None
                except Exception as exc:   # a diagnostic: say why, go on
                    packed = f"? {exc}"
                lines.append(f"    {graph.describe()}: {key[1:]} -> {getattr(plan, 'backend', '?')} "
                             f"{getattr(plan, 'schedule', '?')} packed={packed}")
    return "\n".join(sorted(set(lines)))


def cupy_launches(step, steps: int = 10) -> float:
    """How many times per step our ops entered CuPy's stream context (a launch not packed)."""
    from autosage_cli.torch import cuda

    count = [0]
    original = cuda._on_torch_stream.__enter__

    def counted(self):
        count[0] += 1
        return original(self)
    cuda._on_torch_stream.__enter__ = counted
    try:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    finally:
        cuda._on_torch_stream.__enter__ = original
    return count[0] / steps


def main(path: str) -> None:
    with open(path, "w") as out:
        def say(text: str) -> None:
            print(text, file=out, flush=True)
            print(text, flush=True)

        for name in GRAPHS:
            g = tr.training_graph(resolve_graph(name).load("datasets", 0), "cuda")
            x, labels = tr.random_data(name, g.n_rows, g.device, 0)
            pyg_inputs = tr.pyg_inputs(g)
            n_in, n_out = tr.feature_dims(name)
            for model_name in MODELS:
                torch.manual_seed(0)
                init = tr.build(pyg, model_name, n_in, n_out).state_dict()
                ours = tr.build(at, model_name, n_in, n_out).cuda()
                ours.load_state_dict(init)
                steps = {"ours": tr.eager_step(ours, g, x, labels, 0)}
                for mode in tr.PYG_MODES[model_name] if WITH_PYG else ():   # as the training suite builds PyG per mode
                    theirs = tr.build(pyg, model_name, n_in, n_out, pyg_mode=mode).cuda()
                    theirs.load_state_dict(init)
                    steps[f"pyg {mode}"] = tr.eager_step(theirs, pyg_inputs[mode], x, labels, 0)
                for label, step in list(steps.items()):   # plans, tunes and caches happen here
                    try:
                        for _ in range(10):
                            step()
                    except Exception as exc:   # a PyG mode that does not run: say so, time the others
                        say(f"  {label} does not run: {type(exc).__name__}: {str(exc)[:200]}")
                        del steps[label]
                times = {label: (timed(step, 100), timed(step, 100)) for label, step in steps.items()}
                a, a2 = times["ours"]
                say(f"== {name} {model_name} ({g.describe()}): ours {a:.3f}/{a2:.3f} ms; " + "; ".join(
                    f"{label} {b:.3f}/{b2:.3f} ms -> {b / a:.2f}x/{b2 / a2:.2f}x"
                    for label, (b, b2) in times.items() if label != "ours"))
                say(plans_report())
                say(f"  ours: {cupy_launches(steps['ours']):.0f} launches through CuPy per step")
                if model_name not in PROFILED:
                    continue
                theirs = [label for label in times if label != "ours"]
                for label in ["ours"] + ([min(theirs, key=lambda label: times[label][1])] if theirs else []):
                    kernels, table = torch_profile(steps[label])
                    say(f"  {label}: {kernels:.0f} CUDA kernels per step")
                    say(table)
                say(python_profile(steps["ours"]))
                if COMPILED:
                    compiled = tr.compiled_step(ours, g, x, labels, 0, fullgraph=True)
                    for _ in range(10):
                        compiled()
                    say(f"  ours compiled: {timed(compiled, 100):.3f}/{timed(compiled, 100):.3f} ms per step")
                    kernels, table = torch_profile(compiled)
                    say(f"  ours compiled: {kernels:.0f} CUDA kernels per step")
                    say(table)
                    say(python_profile(compiled))
                    tr.forget_compiled()
                if CAPTURED:
                    replay = tr.captured_step(ours, g, x, labels, 3)
                    say(f"  ours captured: {timed(replay, 100):.3f}/{timed(replay, 100):.3f} ms per replay")
                    kernels, table = torch_profile(replay)
                    say(f"  ours captured: {kernels:.0f} CUDA kernels per replay")
                    say(table)


if __name__ == "__main__":
    main(sys.argv[1])
