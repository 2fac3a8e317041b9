"""A NumPy stand-in for the benchmark's GPU toolkit (autosage_cli.bench.toolkit.GpuToolkit), so the
harness loop and the `bench` command run on CPU: plans compute SpMM with SciPy and report fixed
"times"; some are deliberately wrong or broken."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from autosage_cli.backends.timing import TimingStats, rel_error
from autosage_cli.graphs.csr import canonical_csr

# A probe's split of its time, as a real tune's timings carry it (scheduler/probing/phases.py).
PROBE_SPLIT = {"probe_gpu_ms": 480.0, "probe_upload_ms": 90.0, "probe_inputs_ms": 6.0,
               "probe_reference_ms": 2.0, "probe_vendor_prepare_ms": 45.0, "probe_vendor_timing_ms": 160.0,
               "probe_native_prepare_ms": 30.0, "probe_native_timing_ms": 330.0, "probe_verify_ms": 60.0,
               "probe_imports_ms": 0.0, "probe_other_ms": 11.0}


def small_graph(n: int = 50, density: float = 0.1, seed: int = 0):
    m = sp.random(n, n, density=density, random_state=seed, format="csr", dtype=np.float32)
    return canonical_csr(m, {"generator": "fake", "seed": seed})


class FakeSpec:
    def __init__(self, label: str = "fake-50", graph=None):
        self.label = label
        self.graph = graph if graph is not None else small_graph()

    def load(self, root, seed):
        return self.graph


@dataclass(frozen=True)
class FakeSchedule:
    name: str


@dataclass(frozen=True)
class FakeDecision:
    backend: str
    schedule: str
    reason: str = "fake decision"


@dataclass
class FakeTuneResult:
    decision: FakeDecision
    cache_hit: bool = False
    timings: dict = field(default_factory=lambda: {"graph_features_ms": 7.0})


class FakePlan:
    def __init__(self, graph, op, k, backend, schedule, ms, wrong=False, explode=False):
        self.graph, self.op, self.k, self.heads = graph, op, k, 1
        self.backend, self.schedule, self.ms = backend, schedule, ms
        self.wrong, self.explode = wrong, explode
        self.prepare_ms, self.provider = 0.25, f"fake {backend}"
        self.compile_ms = 30.0 if backend == "native" else 0.0   # natives build a kernel module

    def alloc_out(self):
        return np.empty((self.graph.n_rows, self.k), dtype=np.float32)

    def run(self, inputs, out):
        if self.explode:
            raise RuntimeError("launch failed\nsecond line")
        out[...] = self.graph.to_scipy() @ inputs[0]
        if self.wrong:
            out *= 1.5


class FakeToolkit:
    """Vendors alg1 (2.0 ms) and default (3.0 ms); torch (4.0 ms), PyG skipped; natives good
    (1.0 ms), fast (0.98 ms), wrong and broken. The probe chooses `probe_choice`, the oracle
    `oracle_choice` (names of natives or vendors)."""

    NATIVE_MS = {"spmm.good": 1.0, "spmm.fast": 0.98, "spmm.slow": 1.5, "spmm.wrong": 0.5}

    def __init__(self, probe_choice="spmm.good", oracle_choice="spmm.fast", cache_hit=False,
                 vendor_ms=None, wrong_vendor=None):
        self.probe_choice, self.oracle_choice, self.cache_hit = probe_choice, oracle_choice, cache_hit
        self.vendor_ms = {"cusparse-alg1": 2.0, "cusparse-default": 3.0} if vendor_ms is None else vendor_ms
        self.wrong_vendor = wrong_vendor
        self.tune_calls: list[dict] = []
        self.cached: set = set()     # (op, k, heads) decisions stored in "the cache"
        self.freed = 0
        self.precompiled: list = []     # the ops of each precompile call
        self.features_calls = 0
        self.free_device_bytes = 80 << 30    # what device_free_bytes reports (an H200's worth)

    def device_free_bytes(self):
        return self.free_device_bytes

    def environment(self):
        return {"device": {"name": "Fake GPU 9000"}, "software": {"cupy": "fake"}, "commit": "abc1234"}

    def copy_bandwidth_tbps(self):
        return 4.0

    def to_device(self, graph):
        return graph

    def device_features(self, dgraph):
        return {"n_rows": dgraph.n_rows, "on": "device"}

    def inputs(self, dgraph, op, k, heads, seed, dtype="float32"):
        rng = np.random.default_rng(seed)
        return (rng.uniform(-1, 1, (dgraph.n_cols, k)).astype(np.float32),)

    def vendor_names(self, op):
        return list(self.vendor_ms)

    def prepare_vendor(self, dgraph, name, k, heads, scale=None, dtype="float32"):
        return FakePlan(dgraph, "spmm", k, name, name, self.vendor_ms[name], wrong=name == self.wrong_vendor)

    def prepare_baselines(self, dgraph, op, k, heads, dtype="float32"):
        return [FakePlan(dgraph, op, k, "torch", "torch.addmm(out=)", 4.0)], [("pyg", "torch_geometric is not installed")]

    def schedules(self, op, k, heads, dtype="float32"):
        return [FakeSchedule(n) for n in ("spmm.good", "spmm.wrong", "spmm.broken")]

    def prepare_native(self, dgraph, schedule, k, heads, scale=None, dtype="float32", **op):
        if schedule.name == "spmm.broken":
            raise ValueError("does not compile")
        return FakePlan(dgraph, "spmm", k, "native", schedule.name, self.NATIVE_MS[schedule.name],
                        wrong=schedule.name == "spmm.wrong")

    def precompile(self, ops, dtype="float32"):
        self.precompiled.append(list(ops))
        return {f"{op}_fake.cu": 1.5 for op in ops}

    def graph_features(self, graph, dgraph=None):
        self.features_calls += 1
        return {"n_rows": graph.n_rows}, 7.0, 3.0

    def tune(self, graph, op, k, heads, *, cache, top_k, budget_ms, guardrail, full, seed=0, dgraph=None,
             dtype="float32"):
        self.tune_calls.append({"cache": cache, "full": full, "top_k": top_k, "dtype": dtype})
        choice = self.oracle_choice if full else self.probe_choice
        backend = "native" if choice.startswith("spmm.") else choice
        hit = cache is not None and (self.cache_hit or (op, k, heads) in self.cached)
        if cache is not None:
            self.cached.add((op, k, heads))
        timings = {"graph_features_ms": 7.0, **({} if hit else {"compile_ms": 40.0, **PROBE_SPLIT})}
        return FakeTuneResult(FakeDecision(backend, choice), cache_hit=hit, timings=timings)

    def plan_for(self, dgraph, decision, k, heads, dtype="float32"):
        if decision.backend == "native":
            return self.prepare_native(dgraph, FakeSchedule(decision.schedule), k, heads)
        return self.prepare_vendor(dgraph, decision.backend, k, heads)

    def compile_native(self, dgraph, schedules, k, heads, dtype="float32", op=None):
        return {}

    def run(self, plan, inputs):
        out = plan.alloc_out()
        out.fill(np.nan)
        plan.run(inputs, out)
        return out

    def run_timed(self, plan, inputs):
        return self.run(plan, inputs), getattr(plan, "ms", 1.0)

    def rel_error(self, out, ref):
        return rel_error(out, ref)

    def take_rows(self, array, perm):
        return np.take(array, perm, axis=0)

    def reference(self, op, dgraph, inputs, scale=None, dtype="float32"):
        self.references = getattr(self, "references", 0) + 1
        return dgraph.to_scipy().astype(np.float64) @ inputs[0].astype(np.float64)

    def time(self, plan, inputs, out, repeat, warmup, max_ms=None, flush_l2=False):
        plan.run(inputs, out)
        return TimingStats(plan.ms, plan.ms * 0.99, plan.ms * 1.02, repeat)

    def free(self):
        self.freed += 1
