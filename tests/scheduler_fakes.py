"""CPU fakes for the scheduler tests: graph features, a power-law graph and a NumPy Measurer whose
plans compute the real float64 result (or a deliberately wrong one) and report chosen times."""
from __future__ import annotations

from autosage_cli.features import GraphFeatures

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from autosage_cli.ops import input_shapes
from autosage_cli.graphs.csr import canonical_csr

DEVICE = {"name": "Fake H200", "compute_capability": "9.0", "sms": 132, "memory_bytes": 141 * 2**30,
          "l2_bytes": 60 * 2**20}
SOFTWARE = {"driver": "580.0", "cuda_runtime": "13.2", "cupy": "14.2.0", "cusparse": "12.6",
            "cuda_sources": "sources-v1"}


# The GraphFeatures fields the cost model reads, with neutral defaults for the rest.
_FEATURE_DEFAULTS = dict(degree_cv=0.0, skew=0.0, empty_rows=0, heavy_share=0.0,
                         locality=1.0 / 3.0, symmetric=False)


_POSITIONAL = ("n_rows", "n_cols", "nnz", "degree_mean", "degree_min", "degree_max", "degree_q50",
               "degree_q90", "degree_q99")


def Features(*values, **fields) -> GraphFeatures:
    """A real GraphFeatures from the nine size/degree fields in order plus keyword overrides, the
    rest defaulted as above (locality 1/3 is what random columns give)."""
    return GraphFeatures(**{**_FEATURE_DEFAULTS, **dict(zip(_POSITIONAL, values)), **fields})


UNIFORM_1M = Features(1_000_000, 1_000_000, 16_000_000, 16.0, 3, 36, 16, 21, 26)
HUB_200K = Features(200_000, 200_000, 220_000, 1.1, 0, 30_000, 1, 2, 3, skew=40.0)
REDDIT_LIKE = Features(232_965, 232_965, 114_600_000, 492.0, 1, 21_700, 230, 1198, 3805, locality=0.07)


def features_of(graph) -> Features:
    d = graph.row_degrees()
    q50, q90, q99 = np.percentile(d, [50, 90, 99])
    return Features(graph.n_rows, graph.n_cols, graph.nnz, float(d.mean()), int(d.min()),
                    int(d.max()), float(q50), float(q90), float(q99))


def power_law_graph(n: int = 40_000, mean_degree: float = 20.0, seed: int = 0, alpha: float = 1.3,
                    max_degree: int | None = None):
    """Rows with Pareto-distributed degrees (a few hubs, many short rows), random columns."""
    rng = np.random.default_rng(seed)
    raw = rng.pareto(alpha, n) + 1.0
    degrees = np.minimum(np.maximum(1, np.round(raw * mean_degree / raw.mean())),
                         max_degree or n // 2).astype(np.int64)
    rows = np.repeat(np.arange(n), degrees)
    cols = rng.integers(0, n, rows.size)
    m = sp.coo_matrix((rng.uniform(0.5, 1.5, rows.size), (rows, cols)), shape=(n, n))
    return canonical_csr(m, {"generator": "test-power-law", "params": {"n": n}, "seed": seed})


def small_graph(n: int = 300, seed: int = 1):
    return power_law_graph(n=n, mean_degree=6.0, seed=seed)


# ------------------------------------------------------------------ measurer

class FakePlan:
    def __init__(self, graph, op, k, heads, name, ms, wrong=False, crash=False):
        self.graph, self.op, self.k, self.heads = graph, op, k, heads
        self.name, self.ms, self.wrong, self.crash = name, ms, wrong, crash
        self.prepare_ms = 0.5


def reference_result(op, graph, inputs, scale=None):
    from autosage_cli.ops import reference
    return reference(op, graph, inputs, scale=scale)


@dataclass
class FakeMeasurer:
    """vendor_ms / native_ms: name -> median ms (natives default to `default_native_ms`);
    wrong: names whose output is off by ~1%; broken: names whose prepare raises (a compile
    error); crash: names whose run raises (a launch error)."""
    vendor_ms: dict = field(default_factory=lambda: {"cusparse-alg1": 1.0, "cusparse-alg2": 0.8})
    native_ms: dict = field(default_factory=dict)
    default_native_ms: float = 0.5
    wrong: set = field(default_factory=set)
    broken: set = field(default_factory=set)
    crash: set = field(default_factory=set)
    calls: dict = field(default_factory=lambda: {"prepare": 0, "run": 0, "time": 0})
    timed: list = field(default_factory=list)

    def to_device(self, graph):
        self.calls["to_device"] = self.calls.get("to_device", 0) + 1
        return SimpleNamespace(host=graph, n_rows=graph.n_rows, n_cols=graph.n_cols, nnz=graph.nnz)

    def device_features(self, dgraph):
        from autosage_cli.features import compute_features
        self.calls["device_features"] = self.calls.get("device_features", 0) + 1
        return compute_features(dgraph.host, symmetry=False)

    def vendor_names(self, op):
        return list(self.vendor_ms)

    def inputs(self, dgraph, op, k, heads, seed, dtype="float32"):
        self.dtypes_seen = getattr(self, "dtypes_seen", []) + [dtype]
        rng = np.random.default_rng(seed)
        return tuple(rng.uniform(-1, 1, s) for s in input_shapes(op, dgraph.host, k, heads))

    def _plan(self, dgraph, name, k, heads, ms):
        self.calls["prepare"] += 1
        if name in self.broken:
            raise RuntimeError(f"nvrtc: compilation of {name} failed\n  error: bad template")
        return FakePlan(dgraph.host, None, k, heads, name, ms, name in self.wrong, name in self.crash)

    def prepare_native(self, dgraph, schedule, k, heads, scale=None, dtype="float32"):
        return self._plan(dgraph, schedule.name, k, heads,
                          self.native_ms.get(schedule.name, self.default_native_ms))

    def prepare_vendor(self, dgraph, name, k, heads, scale=None, dtype="float32"):
        return self._plan(dgraph, name, k, heads, self.vendor_ms[name])

    def run(self, plan, inputs):
        self.calls["run"] += 1
        if plan.crash:
            raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
        op = "spmm" if len(inputs) == 1 else ("sddmm" if len(inputs) == 2 else "attention")
        out = reference_result(op, plan.graph, inputs)
        return out * 1.01 + 1e-3 if plan.wrong else out

    def reference(self, op, dgraph, inputs, scale=None, dtype="float32"):
        return reference_result(op, dgraph.host, inputs, scale)

    def take_rows(self, array, perm):
        return np.take(array, perm, axis=0)

    def rel_error(self, out, ref):
        denom = np.linalg.norm(ref)
        return float(np.linalg.norm(out - ref) / (denom if denom else 1.0))

    def time(self, plan, inputs, out, repeat, warmup, max_ms=None):
        from autosage_cli.backends.timing import check_warmup

        check_warmup(warmup, max_ms)   # the GPU timer's contract
        self.calls["time"] += 1
        self.timed.append(plan.name)
        reps = repeat if max_ms is None else max(3, min(repeat, int(max_ms / plan.ms)))
        return SimpleNamespace(median_ms=plan.ms, p20_ms=plan.ms * 0.95, p80_ms=plan.ms * 1.05,
                               repeats=reps)


def patch_tune_command(monkeypatch, make_measure, graph=None):
    """`autosage tune` on CPU: a GPU is "there", `graph` (small_graph()) is what any --dataset loads,
    and every tune measures with `make_measure()` on the fake device."""
    from autosage_cli import capability
    from autosage_cli.backends import memory
    from autosage_cli.commands import tune as tune_cmd
    from autosage_cli.scheduler import tune as tune_mod

    graph = graph if graph is not None else small_graph()
    monkeypatch.setattr(capability, "require_gpu", lambda what="", hint="": None)
    monkeypatch.setattr(memory, "device_free_bytes", lambda: 80 << 30)
    monkeypatch.setattr(tune_cmd, "load_input_graph", lambda path, dataset, root: graph)
    real = tune_mod.tune
    monkeypatch.setattr(tune_mod, "tune", lambda g, op, k, heads=1, **kw: real(
        g, op, k, heads, measure=make_measure(), device_info=DEVICE, software_info=SOFTWARE, **kw))
