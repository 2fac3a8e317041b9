"""Decisions that carry over: a decision made on one graph serves later graphs of the same kind.

A mini-batch loop hands the model a new sampled subgraph every step, the transposes of its backward
pass and the normalised graphs of its layers with it. Probing each (hundreds of milliseconds) or
even hashing and copying each to the host (milliseconds) costs more than the step. So graphs up to
`KIND_MAX_NNZ` edges are matched by *kind* instead of by fingerprint:

  kind     the question (op, K, heads, dtype, whether A carries values), this machine (device and
           software, as the cache key records them), the tuning settings, and the graph's features
           within a tolerance of the graph the decision was probed on (`kind_change`): sizes
           within SIZE_RATIO, the row-degree quantiles within DEGREE_RATIO, the share of empty rows
           within EMPTY_GAP. The features are computed on the device and cross as a few scalars
           (autosage_cli.torch.Graph.structure_stats): the graph itself is never copied.
  new kind the first graph of a kind is tuned as itself (`scheduler.tune`: exact cache lookup, else
           a probe within the budget, with every native candidate verified and the guardrail
           against the best vendor), and its entry in the decision cache records the kind: its
           features and the decision for *other* graphs of the kind (`carry`). Later processes load
           those entries once and probe nothing for graphs of a known kind.
  carry    the best verified candidate whose plan needs no host pass over the graph (no row
           partition built on the host: `Family.reads_host_graph`), held to the same guardrail
           against the best vendor measured in that probe. The graph that was probed keeps its own
           decision (recognised by a structure checksum), any family included: a full graph trained
           for many epochs prepares its plan once.
  tune off the kind's decision when one is known, else the vendor default; never a probe.
  host     a vendor decision whose GPU time is shorter than a cuSPARSE call's host time gives way
           to the kind's fastest verified native where that costs less per call, host time
           counted (`host_paced`): these graphs' steps are paced by the host, not the GPU.

Graphs above KIND_MAX_NNZ are tuned by fingerprint, as the API does: their probe costs little
next to their kernels, and a host pass is paid once per graph.

Everything a step asks here is answered from memory: no file is read or written (except once per
new kind), no package metadata is read, no source is hashed (environment and cuda_sources compute
those once per process). `probe_count()` tells how many probes the table ran.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from types import SimpleNamespace

from ... import cache as cache_mod
from ...kernels.schedule import family_of
from . import select

KIND_MAX_NNZ = 8_000_000
SIZE_RATIO = 1.5          # n_rows, n_cols, nnz of one kind differ by at most this factor
DEGREE_RATIO = 2.0        # and each of (q50, q90, q99, max) + 1 of the row degrees
EMPTY_GAP = 0.15          # and the share of empty rows by at most this much
DEGREE_FEATURES = ("deg_q50", "deg_q90", "deg_q99", "deg_max")


def kind_change(recorded: dict, features: dict) -> str | None:
    """None when `features` are of the kind of `recorded` (both from Graph.kind_features), else
    the first feature that differs too much, for the message of a new probe."""
    for name in ("n_rows", "n_cols", "nnz"):
        a, b = max(recorded[name], 1), max(features[name], 1)
        if max(a, b) > SIZE_RATIO * min(a, b):
            return f"{name} {features[name]} vs {recorded[name]}"
    for name in DEGREE_FEATURES:
        a, b = recorded[name] + 1, features[name] + 1
        if max(a, b) > DEGREE_RATIO * min(a, b):
            return f"{name} {features[name]} vs {recorded[name]}"
    if abs(recorded["empty_share"] - features["empty_share"]) > EMPTY_GAP:
        return f"empty_share {features['empty_share']:.2f} vs {recorded['empty_share']:.2f}"
    return None


def reads_host_graph(record: dict) -> bool:
    """Whether a probed native candidate's plan builds work lists from the graph on the host."""
    from .plans import schedule_of_decision

    schedule = schedule_of_decision({"schedule": record["name"], "params": record.get("params")})
    return family_of(schedule.family).reads_host_graph(schedule)


# Launch layouts (Family.plan) whose launches depend on the graph's shape alone, not on its
# contents: what a static graph (a captured mini-batch step's) may run, since one captured launch
# serves every batch of its capacity.
SHAPE_ONLY_PLANS = frozenset({"rows", "edges"})


def shape_only(record: dict) -> bool:
    """Whether a native candidate (a probe record or a decision) launches by the graph's shape."""
    from .plans import schedule_of_decision

    name = record.get("name") or record.get("schedule")
    schedule = schedule_of_decision({"schedule": name, "params": record.get("params")})
    return family_of(schedule.family).plan in SHAPE_ONLY_PLANS


def _timed(records: list[dict]) -> list[SimpleNamespace]:
    """The records that ran and were verified (status ok, a time), as select.decide reads them."""
    return [SimpleNamespace(**r) for r in records if r.get("status") == "ok" and r.get("ms") is not None]


def _on_device(natives: list[SimpleNamespace]) -> list[SimpleNamespace]:
    return [r for r in natives if not reads_host_graph(vars(r))]


def carry_decision(candidates: list[dict], vendor: list[dict], guardrail: float) -> dict:
    """The decision for other graphs of a probed graph's kind, from its probe records: the best
    verified native candidate that prepares on the device, against the best vendor timed on the
    same part of the graph (the whole graph, or the sample)."""
    vendors = _timed(vendor)
    where = {getattr(v, "graph", None) for v in vendors} - {None}
    natives = [r for r in _on_device(_timed(candidates)) if not where or getattr(r, "graph", None) in where]
    if not natives and not vendors:
        # an op without vendors (the additive score) whose verified candidates all build host work
        # lists: the best of those, at a host pass per new graph, rather than nothing to run
        natives = _timed(candidates)
    return select.decide(natives, vendors, guardrail).to_dict()


def fastest_native(candidates: list[dict]) -> dict | None:
    """The probed graph's fastest verified native candidate, of any family (its own host work
    lists are its own), or None: what its calls run where the host paces them (host_paced)."""
    natives = _timed(candidates)
    return select.decide(natives, []).to_dict() if natives else None


def native_decision(candidates: list[dict], guardrail: float = select.DEFAULT_GUARDRAIL,
                    static: bool = False) -> dict | None:
    """The decision when a vendor plan cannot run (a captured CUDA graph: CuPy refuses cuSPARSE calls
    during stream capture): the best verified native candidate whose plan builds no host work
    lists (with `static`, also launching by the graph's shape alone: SHAPE_ONLY_PLANS), or None
    when none was verified."""
    natives = _on_device(_timed(candidates))
    if static:
        natives = [r for r in natives if shape_only(vars(r))]
    if not natives:
        return None
    decision = select.decide(natives, [], guardrail).to_dict()
    decision["reason"] = (f"native {decision['schedule']}: the fastest verified native plan, for a "
                          + ("static graph (a captured mini-batch step: its launches by the graph's shape)"
                             if static else "captured step (CUDA-graph capture cannot record CuPy's cuSPARSE calls)"))
    return decision


# Host microseconds one call of a prepared plan costs the torch path, measured on the H200's host
# (scripts/percall.py, SpMM on cora: 33 us packed native, 93 us cuSPARSE, where torch.relu took
# 9 us): a packed native launch, and a cuSPARSE call through CuPy (its descriptors, buffer and
# handle on every call).
HOST_US = {"native": 30.0, "vendor": 90.0}


def call_us(backend: str, gpu_ms: float) -> float:
    """What one call costs a step in which the host runs ahead of the GPU: the longer of its host
    time and its GPU time (the shorter hides under the other's)."""
    return max(HOST_US["native" if backend == "native" else "vendor"], gpu_ms * 1e3)


def host_paced(chosen: dict | None, native: dict | None,
               guardrail: float = select.DEFAULT_GUARDRAIL) -> dict | None:
    """The kind's verified native decision instead of a vendor one whose GPU time is shorter than
    its host time, when the native call costs at most `guardrail` x the vendor's (call_us): on
    such a call the vendor's host cost decides, which the probe's GPU clock does not see. Vendor
    calls that take the GPU longer than their host time keep the probe's decision (and graphs that
    small are probed whole, so both times are of the same graph)."""
    if not chosen or not native or chosen.get("backend") == "native":
        return chosen
    vendor_ms, native_ms = chosen.get("vendor_ms"), native.get("native_ms")
    if vendor_ms is None or native_ms is None or vendor_ms * 1e3 >= HOST_US["vendor"]:
        return chosen       # a vendor call the GPU paces: the probe's guardrail stands
    ours, theirs = call_us("native", native_ms), call_us(chosen["backend"], vendor_ms)
    if ours > guardrail * theirs:
        return chosen
    return {**native, "vendor_ms": vendor_ms, "speedup": theirs / ours,
            "reason": f"native {native['schedule']} {ours:.0f} us a call <= {guardrail:g} x "
                      f"{chosen['backend']} {theirs:.0f} us (the longer of host and GPU time: "
                      f"host {HOST_US['native']:.0f} us against {HOST_US['vendor']:.0f} us)"}


@dataclass
class Kind:
    features: dict
    checksum: int | None        # of the graph that was probed (None: not known)
    decision: dict              # that graph's own decision
    carry: dict                 # the decision for other graphs of the kind
    entry_id: str = ""
    native: dict | None = None  # the decision where no vendor plan may run (native_decision)
    static: dict | None = None  # ... nor one whose launches depend on the graph's contents
    own_native: dict | None = None   # the probed graph's fastest verified native (fastest_native)

    def decision_for(self, checksum: int, capturable: bool = False, static: bool = False) -> dict | None:
        """The graph's decision; with `capturable`, a native one; with `static` (a static graph's),
        a native one that launches by the graph's shape (None: the kind has none); else a vendor
        decision gives way to the native one where the host paces the call (host_paced)."""
        own = checksum == self.checksum
        chosen = self.decision if own else self.carry
        native = chosen.get("backend") == "native"
        if static:
            return chosen if native and shape_only(chosen) else self.static
        if capturable and not native:
            return self.native
        return host_paced(chosen, (self.own_native or self.native) if own else self.native)


class KindTable:
    """The kinds known to this process, per scope (cache file, machine, settings, question)."""

    def __init__(self):
        self._kinds: dict[tuple, list[Kind]] = {}
        self._loaded: set = set()
        self._lock = threading.Lock()
        self.probes = 0

    def find(self, scope: tuple, features: dict) -> Kind | None:
        for kind in self._kinds.get(scope, ()):
            if kind_change(kind.features, features) is None:
                return kind
        return None

    def add(self, scope: tuple, kind: Kind) -> None:
        self._kinds.setdefault(scope, []).append(kind)

    def load(self, store: cache_mod.DecisionCache, scope_of) -> None:
        """The kinds recorded in `store`, read once per cache file and process. `scope_of(entry)`
        gives an entry's scope, or None for one this process cannot use (other machine, software
        or settings)."""
        path = str(store.path)
        if path in self._loaded:
            return
        self._loaded.add(path)
        if not store.path.is_file():
            return
        for entry in store.entries():
            recorded = entry.get("kind")
            scope = scope_of(entry) if isinstance(recorded, dict) else None
            if scope is not None:
                candidates = entry.get("candidates") or []
                self.add(scope, Kind(recorded["features"], recorded.get("checksum"), entry["decision"],
                                     recorded["carry"], entry["id"], native_decision(candidates),
                                     native_decision(candidates, static=True), fastest_native(candidates)))

    def clear(self) -> None:
        with self._lock:
            self._kinds.clear()
            self._loaded.clear()
            self.probes = 0
        _BASES.clear()
        _STORES.clear()


TABLE = KindTable()


def probe_count() -> int:
    """Probes (tunes that timed candidates) the kind table ran in this process."""
    return TABLE.probes


def _digest(obj) -> str:
    return cache_mod._digest(cache_mod.jsonable(obj))


def _scope(path: str, device: dict, software: dict, settings: dict, question: tuple) -> tuple:
    return (path, _digest(cache_mod.device_key(device or {})), _digest(cache_mod.software_key(software)),
            _digest(settings), *question)


_BASES: dict[str, tuple] = {}


def _base_scope(path: str) -> tuple:
    """(cache path, machine, settings) of this process's lookups, worked out once per cache file:
    the machine and the schedule space do not change within a process."""
    if path not in _BASES:
        from .. import tune as tuner

        device, software = tuner.machine()
        settings = tuner.decision_settings(tuner.DEFAULT_TOP_K, tuner.probe.DEFAULT_BUDGET_MS,
                                           select.DEFAULT_GUARDRAIL, None, False)
        _BASES[path] = _scope(path, device, software, settings, ())
    return _BASES[path]


def _entry_scope(path: str, entry: dict) -> tuple | None:
    key = entry.get("key") or {}
    try:
        question = (entry["op"], int(entry["k"]), int(entry["heads"]), entry.get("dtype") or "float32",
                    bool(entry["kind"]["weighted"]))
        return _scope(path, key["device"], entry["software"], entry["settings"], question)
    except (KeyError, TypeError, ValueError):
        return None


_STORES: dict = {}


def _store(cache) -> cache_mod.DecisionCache:
    """The DecisionCache of a Graph's `cache` option (None: the default file), one per option value
    and process: resolving the default path reads the environment (0.2 ms a call)."""
    if isinstance(cache, cache_mod.DecisionCache):
        return cache
    key = None if cache is None else str(cache)
    if key not in _STORES:
        _STORES[key] = cache_mod.DecisionCache(cache)
    return _STORES[key]


def decide(features: dict, checksum: int, question: tuple, *, cache=None, tune: bool = True,
           host_graph=None, say=None, capturable: bool = False, own_host: bool = True,
           static: bool = False) -> dict | None:
    """The decision (a Decision dict) for a graph of `features` and `checksum` on `question` =
    (op, k, heads, dtype, weighted): the kind's, or, for a new kind, its own from a tune of
    `host_graph()` (the graph's CSRGraph, built only then), recorded with the kind. None when tuning
    is off and the kind is not known (the caller runs the vendor default), or, with `capturable`
    (a native decision is needed), when the kind has no verified native candidate."""
    from .. import tune as tuner

    op, k, heads, dtype, weighted = question
    store = _store(cache)
    scope = (*_base_scope(str(store.path)), *question)
    with TABLE._lock:
        TABLE.load(store, lambda entry: _entry_scope(str(store.path), entry))
        known = TABLE.find(scope, features) is not None
    if not known and not tune:
        return None

    def tuned() -> Kind:
        graph = replayable(host_graph(), store)
        result = tuner.lookup_or_tune(graph, op, k, heads, cache=store, dtype=dtype, progress=say)
        carry = carry_decision(result.candidates, result.vendor, select.DEFAULT_GUARDRAIL)
        if not result.cache_hit:
            TABLE.probes += 1
            store.annotate(result.key_id, {"kind": {"features": features, "checksum": checksum,
                                                    "weighted": bool(weighted), "carry": carry}})
        return Kind(features, checksum, result.decision.to_dict(), carry, result.key_id or "",
                    native_decision(result.candidates), native_decision(result.candidates, static=True),
                    fastest_native(result.candidates))

    # a graph whose host CSR is another's (a graph of every listing: its coalesced graph's) was not
    # the graph probed even when the tune ran on that CSR: it gets the kind's decision for other
    # graphs, whose plan needs no host pass (a host work list of the other CSR would be wrong)
    return lookup(scope, features, checksum if own_host else None, tuned, capturable, static)


def replayable(graph, store: cache_mod.DecisionCache):
    """`graph` with a source `autosage replay` can reload: a graph built in memory (a sampled
    batch) is saved once, as a SciPy .npz beside the cache (`<stem>.graphs/<fingerprint>.npz`), so
    the decision of its kind can be re-checked later on the graph it was probed on. The path is
    recorded relative to the cache's folder (`beside_cache`), so the cache and its folder of graphs
    replay wherever they are copied together."""
    import dataclasses

    from ...graphs.csr import replayable_source

    if replayable_source(graph.source):
        return graph
    import scipy.sparse as sp

    relative = f"{store.path.stem}.graphs/{graph.fingerprint[:32]}.npz"
    path = store.path.parent / relative
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        # uncompressed: zlib takes ~0.3 s for a 440k-edge batch, and a first mini-batch step saves
        # one graph per op and width it probes (the file is ~2x larger)
        sp.save_npz(str(path), graph.to_scipy(), compressed=False)
    return dataclasses.replace(graph, source={**graph.source, "path": relative, "beside_cache": True})


def lookup(scope: tuple, features: dict, checksum: int, make, capturable: bool = False,
           static: bool = False) -> dict | None:
    """The decision of the kind of `features` in `scope` for the graph of `checksum` (see
    Kind.decision_for; for a static graph, the kind's own where it has no static one); `make()` decides a new kind (a Kind) the first time one is seen."""
    with TABLE._lock:
        kind = TABLE.find(scope, features)
    if kind is None:
        kind = make()
        with TABLE._lock:
            TABLE.add(scope, kind)
    chosen = kind.decision_for(checksum, capturable, static)
    if chosen is None and static:
        # no verified plan of the kind launches by the shape alone: the kind's own, which eager
        # steps run and a capture refuses (torch/static_graph.refuse_in_capture)
        chosen = kind.decision_for(checksum, capturable)
    return chosen
