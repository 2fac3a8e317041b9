"""Benchmark suites: which graphs, ops, widths and head counts a run covers.

  default    about a minute on one H200: two small presets and one shipped real graph, K ∈ {4, 32,
             128}, spmm + sddmm, and attention at d = 64, H = 1 on hub-200k (the skewed one).
  kernels    the benchmark graphs (synthetic presets + every real graph in datasets/), K ∈ {1, 2,
             4, …, 256}, spmm + sddmm (the kernel benchmark; add --all-schedules to time every
             schedule, not only the tuned choice).
  kernels-small / kernels-large
             `kernels` cut in two: the graphs up to ~17M nonzeros, and the three of ~115-124M
             nonzeros (generating each of those takes ~40 s of CPU before the GPU sees it).
  attention  the attention targets: d = 64, H ∈ {1, 8} on reddit-like and products-like, plus hub-200k;
             every attention schedule is timed (fused vs our unfused is a target).
  full       kernels ∪ attention. On one H200 it does not fit one 10-minute call: run
             kernels-small, kernels-large and attention with the same --out (rows merge).
  training   not kernel cases: full-graph training epochs of GCN, GraphSAGE and GAT built from
             autosage's layers against PyG on reddit-like and products-like
             (commands/bench_training.py, autosage_cli.torch.training).
  minibatch  not kernel cases: mini-batch training steps (sampled subgraphs, a graph built per
             batch) of the same models against PyG on the same graphs
             (commands/bench_minibatch.py, autosage_cli.torch.minibatch).

Options narrow or replace parts of a suite: --dataset replaces the graphs (every listed graph gets
every op of the run), --ops filters the ops, --widths replaces K (and d for attention), --heads
replaces the attention head counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import dtypes as dtype_table, ops as op_specs
from ..errors import AutosageError

ALL_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SUITE_PRESETS = ("er-200k", "hub-200k", "uniform-1m", "reddit-like", "products-like",
                 "products-like-shuffled", "rmat-20", "banded-1m")
LARGE_PRESETS = ("reddit-like", "products-like", "products-like-shuffled")
SMALL_PRESETS = tuple(p for p in SUITE_PRESETS if p not in LARGE_PRESETS)
ATTENTION_GRAPHS = ("reddit-like", "products-like", "hub-200k")
REAL_GRAPH = "__real__"           # placeholder expanded to every real graph shipped in datasets/
DEFAULT_REAL_GRAPH = "cora"       # the default suite's real graph (Planetoid Cora, shipped)


@dataclass(frozen=True)
class OpRun:
    """An op's own graphs and widths within a suite (attention runs at d = 64 on its own graphs)."""
    graphs: tuple[str, ...] = ()
    widths: tuple[int, ...] = ()


ATTENTION_RUN = OpRun(ATTENTION_GRAPHS, (64,))


@dataclass(frozen=True)
class Suite:
    name: str
    graphs: tuple[str, ...]                 # every op's graphs, unless `per_op` gives its own
    ops: tuple[str, ...]
    widths: tuple[int, ...]
    per_op: tuple[tuple[str, OpRun], ...] = ()   # (op, its own graphs and widths)
    heads: tuple[int, ...] = (1,)           # for the multi-head ops
    repeat: int = 10
    # Ops whose every supported native schedule is timed too (decision "fixed"). The attention
    # suites time all of attention's (12-14 per d): its targets compare our best fused kernel with
    # our best unfused pipeline, and a tuned run shows only one of them.
    all_schedules: tuple[str, ...] = ()

    def graphs_of(self, op: str) -> tuple[str, ...]:
        return dict(self.per_op).get(op, OpRun()).graphs or self.graphs

    def widths_of(self, op: str) -> tuple[int, ...]:
        return dict(self.per_op).get(op, OpRun()).widths or self.widths


SUITES = {
    "default": Suite("default", ("er-200k", "hub-200k", DEFAULT_REAL_GRAPH), ("spmm", "sddmm", "attention"),
                     (4, 32, 128), per_op=(("attention", OpRun(("hub-200k",), (64,))),), heads=(1,), repeat=20),
    "kernels": Suite("kernels", SUITE_PRESETS + (REAL_GRAPH,), ("spmm", "sddmm"), ALL_WIDTHS),
    "kernels-small": Suite("kernels-small", SMALL_PRESETS + (REAL_GRAPH,), ("spmm", "sddmm"), ALL_WIDTHS),
    "kernels-large": Suite("kernels-large", LARGE_PRESETS, ("spmm", "sddmm"), ALL_WIDTHS),
    "attention": Suite("attention", (), ("attention",), (), per_op=(("attention", ATTENTION_RUN),),
                       heads=(1, 8), all_schedules=("attention",)),
    "full": Suite("full", SUITE_PRESETS + (REAL_GRAPH,), ("spmm", "sddmm", "attention"), ALL_WIDTHS,
                  per_op=(("attention", ATTENTION_RUN),), heads=(1, 8), all_schedules=("attention",)),
}


@dataclass(frozen=True)
class GraphSpec:
    """One graph of a run: a synthetic preset (generated with the run's seed), a named dataset the
    loader knows (shipped real graphs, OGB, reddit) or a file path. `reorder`: a graphs.reorder
    method that the benchmark applies after loading (bench.harness; empty: the user's order), so
    that the same graph runs in both orders."""
    label: str
    preset: str | None = None
    dataset: str | None = None
    path: str | None = None
    reorder: str = ""

    def load(self, root: str, seed: int):
        """The graph in its user's order (`reorder` is applied by the caller)."""
        from ..graphs import load, synthetic

        if self.preset:
            return synthetic.generate(self.preset, seed=seed)
        if self.dataset:
            return load.load_graph(dataset=self.dataset, root=root)
        return load.load_graph(path=self.path)


@dataclass(frozen=True)
class Case(op_specs.Case):
    """A benchmark case: the tuner's case value (ops.Case), with its label."""

    def describe(self) -> str:
        text = f"{self.op} K={self.k}" + (f" H={self.heads}" if op_specs.get(self.op).multi_head else "")
        return text if self.dtype == dtype_table.DEFAULT else f"{text} {self.dtype}"


@dataclass
class GraphWork:
    spec: GraphSpec
    cases: list[Case] = field(default_factory=list)


AUTO_REORDER = "auto"     # --reorder auto: the scheduler's reordering decision (training suite)


def parse_reorder(text: str | None, allow_auto: bool = False) -> tuple[str, ...]:
    """--reorder: reordering methods, comma-separated, each known and its library installed;
    `allow_auto`: also "auto", the scheduler's decision (the training suite's)."""
    from ..graphs.reorder import METHODS, available

    if text is None:
        return ()
    methods = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not methods:
        raise AutosageError("--reorder needs at least one method")
    known = [x for x in METHODS if x != "identity"] + ([AUTO_REORDER] if allow_auto else [])
    for m in methods:
        if m == AUTO_REORDER and not allow_auto:
            raise AutosageError("--reorder auto applies to --suite training only (the kernel "
                                "suites time every order they are given)")
        if m not in known:
            raise AutosageError(f"unknown reordering method {m!r} in --reorder; choose from "
                                f"{', '.join(known)}")
        if m == AUTO_REORDER:
            continue
        missing = available(m)
        if missing:
            raise AutosageError(f"--reorder {m} {missing}")
    return methods


def with_reorderings(work: list[GraphWork], methods: tuple[str, ...]) -> list[GraphWork]:
    """Each graph's work followed by the same cases on the graph reordered by each method."""
    import dataclasses

    out = []
    for w in work:
        out.append(w)
        out += [GraphWork(dataclasses.replace(w.spec, reorder=m), list(w.cases)) for m in methods]
    return out


SHIPPED_LOADERS = ("mtx", "npz", "edgelist")   # real graphs whose file ships in datasets/


def real_graph_names() -> list[str]:
    """The real graphs shipped in datasets/ (the registry's entries with a file that is there)."""
    from ..graphs import datasets

    return [e.name for e in datasets.entries().values()
            if e.loader in SHIPPED_LOADERS and e.file and datasets.shipped_path(e).is_file()]


def resolve_graph(name: str) -> GraphSpec:
    """A file path, or a name from the dataset registry (presets, shipped graphs, OGB, reddit);
    AutosageError naming the known datasets otherwise. OGB and reddit data that is not on disk is
    reported by the loader, in one line, when the graph is loaded."""
    from ..graphs import datasets

    if not name or not name.strip():
        raise AutosageError("empty dataset name")
    path = Path(name)
    if path.is_file():
        label = path.name
        for suffix in (".gz", ".mtx", ".npz"):
            label = label[: -len(suffix)] if label.endswith(suffix) else label
        return GraphSpec(label, path=str(path.resolve()))
    if path.suffix in (".mtx", ".gz", ".npz", ".txt") or "/" in name:
        raise AutosageError(f"graph file {name} not found")
    entry = datasets.lookup(name)
    if entry.loader == "synthetic":
        return GraphSpec(entry.name, preset=entry.name)
    return GraphSpec(entry.name, dataset=entry.name)


TRAINING = "training"             # the training suite: models and epochs, run by its own module
MINIBATCH = "minibatch"           # mini-batch training steps on sampled subgraphs, likewise
SUITE_NAMES = (*SUITES, TRAINING, MINIBATCH)


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise AutosageError(f"unknown suite {name!r}; choose one of {', '.join(SUITE_NAMES)}")
    return SUITES[name]


def _expand(names: tuple[str, ...]) -> list[str]:
    out = []
    for n in names:
        for m in (real_graph_names() if n == REAL_GRAPH else [n]):
            if m not in out:
                out.append(m)
    return out


def build_work(suite: Suite, datasets: tuple[str, ...] = (), ops: tuple[str, ...] = (),
               widths: tuple[int, ...] = (), heads: tuple[int, ...] = (),
               dtypes: tuple[str, ...] = ()) -> list[GraphWork]:
    """The run's work list, graph by graph (each graph is loaded once and freed before the next),
    one case per op, width, head count and dtype (default: float32). Raises AutosageError on an
    unknown op or graph, or a dtype an op does not accept, before anything heavy happens."""
    known = op_specs.names()
    for op in ops:
        if op not in known:
            raise AutosageError(f"unknown op {op!r}; choose from {', '.join(known)}")
    run_ops = [op for op in known if op in (ops or suite.ops)]
    run_dtypes = dtypes or (dtype_table.DEFAULT,)
    for op in run_ops:
        for dtype in run_dtypes:
            op_specs.require_dtype(op, dtype)
    per_op = {op: list(datasets) or _expand(suite.graphs_of(op)) for op in run_ops}
    work: dict[str, GraphWork] = {}
    for op in run_ops:
        op_widths = widths or suite.widths_of(op)
        op_heads = (heads or suite.heads) if op_specs.get(op).multi_head else (1,)
        for name in per_op[op]:
            if name not in work:
                work[name] = GraphWork(resolve_graph(name))
            work[name].cases += [Case(op, k, h, d) for d in run_dtypes for k in op_widths for h in op_heads]
    result = [w for w in work.values() if w.cases]
    if not result:
        raise AutosageError(f"suite {suite.name!r} has nothing to run with these options")
    return result


def with_overrides(suite: Suite, repeat: int | None, all_schedules: bool) -> Suite:
    """--repeat replaces the suite's; --all-schedules times every schedule of every op."""
    return replace(suite, repeat=repeat or suite.repeat,
                   all_schedules=op_specs.names() if all_schedules else suite.all_schedules)
