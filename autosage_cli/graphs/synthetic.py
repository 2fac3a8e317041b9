"""Synthetic graphs: generator kinds with checked parameters, the named benchmark presets, and
`generate(name_or_kind, params=None, seed=0) -> CSRGraph`.

Every kind takes two common parameters: `weighted` (1: values hashed from each edge into [0.5, 1.5),
0: all 1.0) and `shuffle` (1: node ids permuted at random, rows and columns alike, after generation —
the same graph under other names). Same name, parameters and seed → the same graph, bit for bit
(numpy's PCG64 streams; the fingerprint test pins it). That is why a large one is kept on disk
once generated (graphs.generated: keyed by kind, parameters, seed and the generators' code).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import budget
from ..errors import AutosageError
from . import generated, generators
from .csr import CSRGraph, from_arrays
from .edges import csr_from_keys, edge_values, relabel_keys

# Generators index with int32 ids and sort int64 keys: keep within both.
MAX_NODES = 2**31 - 2
MAX_NNZ = 2**31 - 2
SHUFFLE_STREAM = 0x5EED  # the permutation comes from its own stream, so shuffling changes no edge


@dataclass(frozen=True)
class Param:
    type: type                       # int or float
    default: float | int | None      # None: required
    check: Callable[[float], bool]
    rule: str                        # what `check` demands, for the error message
    help: str = ""


@dataclass(frozen=True)
class Kind:
    build: Callable[..., np.ndarray]             # (rng, params) -> sorted unique keys
    params: dict[str, Param]
    nodes: Callable[[dict], int]                  # n of the n × n result
    expected_nnz: Callable[[dict], float]         # for the size guard, before anything is allocated
    cross_check: Callable[[dict], str | None] = lambda p: None  # rules that involve several params
    help: str = ""


def _positive(x): return x > 0
def _non_negative(x): return x >= 0
def _probability(x): return 0 <= x <= 1
def _flag(x): return x in (0, 1)


COMMON = {
    "weighted": Param(int, 1, _flag, "0 or 1", "1: values in [0.5, 1.5) hashed from each edge; 0: all 1.0"),
    "shuffle": Param(int, 0, _flag, "0 or 1", "1: permute node ids at random (rows and columns)"),
}


def _degree_rule(p: dict) -> str | None:
    if p["degree"] > p["n"]:
        return f"degree={p['degree']} exceeds n={p['n']}"
    return None


def _hub_rule(p: dict) -> str | None:
    if p["hubs"] > p["n"]:
        return f"hubs={p['hubs']} exceeds n={p['n']}"
    if p["hub_degree"] > p["n"]:
        return f"hub_degree={p['hub_degree']} exceeds n={p['n']}"
    return None


def _rmat_rule(p: dict) -> str | None:
    if p["a"] + p["b"] + p["c"] > 1 + 1e-12:
        return f"a + b + c = {p['a'] + p['b'] + p['c']:g} exceeds 1"
    return None


def _power_law_rule(p: dict) -> str | None:
    if p["max"] > p["n"]:
        return f"max={p['max']:g} exceeds n={p['n']}"
    return None


KINDS: dict[str, Kind] = {
    "erdos-renyi": Kind(
        build=lambda rng, p: generators.erdos_renyi(rng, p["n"], p["p"]),
        params={"n": Param(int, None, _positive, "> 0", "rows = columns"),
                "p": Param(float, None, _probability, "in [0, 1]", "edge probability")},
        nodes=lambda p: p["n"], expected_nnz=lambda p: p["n"] * p["n"] * p["p"],
        help="G(n, p): each (row, col) independently with probability p"),
    "uniform": Kind(
        build=lambda rng, p: generators.uniform(rng, p["n"], p["degree"]),
        params={"n": Param(int, None, _positive, "> 0", "rows = columns"),
                "degree": Param(int, None, _non_negative, ">= 0", "distinct random columns per row")},
        nodes=lambda p: p["n"], expected_nnz=lambda p: p["n"] * p["degree"], cross_check=_degree_rule,
        help="every row has the same number of uniformly random columns"),
    "power-law": Kind(
        build=lambda rng, p: generators.power_law(rng, p["n"], p["nnz"], p["q50"], p["q90"], p["q99"],
                                                  p["max"], p["min"], p["locality"], p["block"]),
        params={"n": Param(int, None, _positive, "> 0", "rows = columns"),
                "nnz": Param(int, None, _positive, "> 0", "target nonzeros"),
                "q50": Param(float, None, _positive, "> 0", "target median row degree"),
                "q90": Param(float, None, _positive, "> 0", "target 90th percentile row degree"),
                "q99": Param(float, None, _positive, "> 0", "target 99th percentile row degree"),
                "max": Param(float, None, _positive, "> 0", "target largest row degree"),
                "min": Param(float, 1, lambda x: x >= 1, ">= 1", "smallest row degree"),
                "locality": Param(float, 0.0, _probability, "in [0, 1]",
                                  "share of each row's edges inside its community block"),
                "block": Param(int, 2048, _positive, "> 0", "community block size (contiguous ids)")},
        nodes=lambda p: p["n"], expected_nnz=lambda p: p["nnz"], cross_check=_power_law_rule,
        help="Chung-Lu with row degrees calibrated to n, nnz, q50/q90/q99 and max, plus locality"),
    "rmat": Kind(
        build=lambda rng, p: generators.rmat(rng, p["scale"], p["edge_factor"], p["a"], p["b"], p["c"]),
        params={"scale": Param(int, None, lambda x: 1 <= x <= 30, "in [1, 30]", "n = 2**scale"),
                "edge_factor": Param(float, 16.0, _positive, "> 0", "edges drawn = edge_factor * n"),
                "a": Param(float, 0.57, _probability, "in [0, 1]", "top-left quadrant probability"),
                "b": Param(float, 0.19, _probability, "in [0, 1]", "top-right quadrant probability"),
                "c": Param(float, 0.19, _probability, "in [0, 1]", "bottom-left quadrant probability")},
        nodes=lambda p: 1 << p["scale"], expected_nnz=lambda p: p["edge_factor"] * (1 << p["scale"]),
        cross_check=_rmat_rule, help="R-MAT recursive matrix (Graph500 a, b, c = 0.57, 0.19, 0.19)"),
    "hub": Kind(
        build=lambda rng, p: generators.hub(rng, p["n"], p["hubs"], p["hub_degree"], p["background"]),
        params={"n": Param(int, None, _positive, "> 0", "rows = columns"),
                "hubs": Param(int, 4, _non_negative, ">= 0", "number of hub rows"),
                "hub_degree": Param(int, None, _non_negative, ">= 0", "distinct columns per hub row"),
                "background": Param(float, 0.5, _non_negative, ">= 0",
                                    "random background edges per row (round(background * n) in all)")},
        nodes=lambda p: p["n"],
        expected_nnz=lambda p: p["hubs"] * p["hub_degree"] + p["background"] * p["n"],
        cross_check=_hub_rule, help="a few very long rows on a sparse random background"),
    "banded": Kind(
        build=lambda rng, p: generators.banded(p["n"], p["bandwidth"]),
        params={"n": Param(int, None, _positive, "> 0", "rows = columns"),
                "bandwidth": Param(int, 8, _non_negative, ">= 0",
                                   "row i holds columns i - bandwidth .. i + bandwidth")},
        nodes=lambda p: p["n"], expected_nnz=lambda p: p["n"] * (2 * p["bandwidth"] + 1),
        help="a band around the diagonal"),
}

KIND_ALIASES = {"er": "erdos-renyi", "chung-lu": "power-law", "r-mat": "rmat"}

# The benchmark's graph presets. reddit/products targets are those of the real graphs (reddit: DGL/PyG's
# reddit_graph.npz, 114,615,892 nonzeros; ogbn-products with OGB's inverse edges, 123,718,280).
# rmat-20 uses edge factor 16 (Graph500's) and shuffled ids as Graph500 does; banded-1m a half-width
# of 8 (17 per row, ~17M nonzeros, next to uniform-1m's 16M).
_REDDIT = {"n": 232_965, "nnz": 114_615_892, "q50": 230, "q90": 1198, "q99": 3805, "max": 21_700,
           "locality": 0.8, "block": 2048}
_PRODUCTS = {"n": 2_449_029, "nnz": 123_718_280, "q50": 26, "q90": 114, "q99": 378, "max": 17_500,
             "locality": 0.8, "block": 2048}
PRESETS: dict[str, tuple[str, dict]] = {
    "er-200k": ("erdos-renyi", {"n": 200_000, "p": 2e-5}),
    "hub-200k": ("hub", {"n": 200_000, "hubs": 4, "hub_degree": 30_000, "background": 0.5}),
    "uniform-1m": ("uniform", {"n": 1_000_000, "degree": 16}),
    "reddit-like": ("power-law", dict(_REDDIT)),
    "products-like": ("power-law", dict(_PRODUCTS)),
    "products-like-shuffled": ("power-law", {**_PRODUCTS, "shuffle": 1}),
    "rmat-20": ("rmat", {"scale": 20, "edge_factor": 16, "shuffle": 1}),
    "banded-1m": ("banded", {"n": 1_000_000, "bandwidth": 8}),
}


def names() -> list[str]:
    return sorted(PRESETS) + sorted(KINDS)


def _coerce(kind_name: str, name: str, spec: Param, raw) -> int | float:
    if isinstance(raw, bool):
        raw = int(raw)
    if isinstance(raw, str):
        text = raw.strip()
        try:
            raw = float(text)
        except ValueError:
            raise AutosageError(f"{kind_name} parameter {name} must be a number, got {text!r}") from None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise AutosageError(f"{kind_name} parameter {name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise AutosageError(f"{kind_name} parameter {name} must be finite, got {raw!r}")
    if spec.type is int:
        if value != int(value):
            raise AutosageError(f"{kind_name} parameter {name} must be an integer, got {raw!r}")
        value = int(value)
    if not spec.check(value):
        raise AutosageError(f"{kind_name} parameter {name} must be {spec.rule}, got {value:g}")
    return value


def resolve(name_or_kind: str, params: dict | None = None) -> tuple[str, dict]:
    """(kind name, full checked parameters) for a preset or kind name plus overrides."""
    key = str(name_or_kind).strip().lower()
    params = dict(params or {})
    if key in PRESETS:
        kind_name, base = PRESETS[key]
        merged = {**base, **params}
    else:
        kind_name = KIND_ALIASES.get(key, key)
        if kind_name not in KINDS:
            raise AutosageError(f"unknown preset or generator {name_or_kind!r} (presets: "
                                f"{', '.join(sorted(PRESETS))}; kinds: {', '.join(sorted(KINDS))})")
        merged = params
    kind = KINDS[kind_name]
    specs = {**kind.params, **COMMON}
    unknown = sorted(set(merged) - set(specs))
    if unknown:
        raise AutosageError(f"unknown parameter {unknown[0]!r} for {kind_name} "
                            f"(known: {', '.join(specs)})")
    resolved = {}
    for name, spec in specs.items():
        if name in merged:
            resolved[name] = _coerce(kind_name, name, spec, merged[name])
        elif spec.default is None:
            raise AutosageError(f"{kind_name} needs parameter {name} ({spec.help})")
        else:
            resolved[name] = spec.default
    problem = kind.cross_check(resolved)
    if problem:
        raise AutosageError(f"{kind_name}: {problem}")
    n = kind.nodes(resolved)
    if n > MAX_NODES or kind.expected_nnz(resolved) > MAX_NNZ:
        raise AutosageError(f"{kind_name} with these parameters is too large "
                            f"(n={n}, ~{kind.expected_nnz(resolved):.3g} nonzeros; limit {MAX_NNZ})")
    return kind_name, resolved


def check_budget(name_or_kind: str, params: dict | None = None) -> tuple[int, int]:
    """(n, expected nonzeros) of a preset or kind with these parameters; BudgetError when building
    it would need more host memory than is available."""
    kind_name, resolved = resolve(name_or_kind, params)
    kind = KINDS[kind_name]
    n, nnz = kind.nodes(resolved), int(kind.expected_nnz(resolved))
    budget.require_host(budget.graph_host_bytes(n, n, nnz),
                        f"generating {name_or_kind} (n={n}, ~{nnz} nonzeros)")
    return n, nnz


def generate(name_or_kind: str, params: dict | None = None, seed: int = 0) -> CSRGraph:
    """A preset (`reddit-like`, …) or a kind (`power-law`, …) with parameter overrides, as a
    canonical CSRGraph whose source records generator, full parameters and seed."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise AutosageError(f"seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    check_budget(name_or_kind, params)
    kind_name, resolved = resolve(name_or_kind, params)
    kind = KINDS[kind_name]
    label = str(name_or_kind).strip().lower()
    source = {"generator": KIND_ALIASES.get(label, label), "params": resolved, "seed": seed}
    if kind.expected_nnz(resolved) < generated.CACHE_MIN_NNZ:
        return _generated(kind, resolved, seed, source)
    key = generated.key_of(kind_name, resolved, seed)   # a preset and its kind share entries
    graph = generated.load(key, source)
    if graph is None:
        graph = _generated(kind, resolved, seed, source)
        generated.store(key, graph)
    return graph


def _generated(kind: Kind, resolved: dict, seed: int, source: dict) -> CSRGraph:
    n = kind.nodes(resolved)
    keys = kind.build(np.random.default_rng(seed), resolved)
    weighted = bool(resolved["weighted"])
    if resolved["shuffle"]:
        perm = np.random.default_rng([seed, SHUFFLE_STREAM]).permutation(n).astype(np.int64)
        keys = relabel_keys(keys, n, perm)
        inverse = np.empty_like(perm)
        inverse[perm] = np.arange(n, dtype=np.int64)
        values = edge_values(keys, seed, weighted, relabelled_from=(n, inverse))
    else:
        values = edge_values(keys, seed, weighted)
    indptr, indices = csr_from_keys(keys, n, n)
    del keys
    return from_arrays(indptr, indices, values, (n, n), source)
