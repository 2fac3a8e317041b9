"""Property-based tests of the decision cache: a real cache file (made by `tune` with the fake
measurer) with damaged bytes or with a field replaced by a value of another type. `autosage replay
--dry-run` must answer cleanly (exit 0 or 1 with its table, or one `Error:` line with exit 2), and
a lookup must find the entry, report it as malformed or miss, never crash; a hit must render."""
from __future__ import annotations

import copy
import io
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from autosage_cli.cache import DecisionCache, make_key
from autosage_cli.commands.tune import render_table
from autosage_cli.errors import AutosageError
from autosage_cli.scheduler import tune as tune_mod
from cli_helpers import run_cli
from fuzz_helpers import HALF_SETTINGS, PeakMemory, assert_clean, mutate, mutations
from fuzz_helpers import memory_budget  # noqa: F401  (autouse: the fuzzed commands' budget)
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of
from test_replay import write_mtx

@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(workdir, graph, the cache document) with two decisions on a graph file."""
    workdir = tmp_path_factory.mktemp("fuzz-cache")
    graph = write_mtx(workdir / "g.mtx")
    cache = DecisionCache(workdir / "base.json")
    for k in (4, 8):
        tune_mod.tune(graph, "spmm", k, cache=cache, measure=FakeMeasurer(), device_info=DEVICE,
                      software_info=SOFTWARE, features=features_of(graph))
    return workdir, graph, json.loads(cache.path.read_text())


def _check(workdir, graph, data: bytes) -> None:
    path = workdir / "fuzzed.json"
    path.write_bytes(data)
    with PeakMemory() as peak:
        result = peak.check(lambda: run_cli("replay", str(path), "--dry-run", "--json"))
    assert_clean(result, allowed_codes=(0, 1))
    if result.exit_code in (0, 1):
        doc = json.loads(result.stdout)
        assert doc["ok"] == (result.exit_code == 0)
    cache = DecisionCache(path, warn=lambda message: None)
    # the key `tune` makes, settings included: an entry made under other settings is stale for it
    settings = tune_mod.decision_settings(tune_mod.DEFAULT_TOP_K, tune_mod.probe.DEFAULT_BUDGET_MS,
                                          tune_mod.DEFAULT_GUARDRAIL, None, False)
    key = make_key(graph, "spmm", 4, "float32", 1, device=DEVICE, software=SOFTWARE, settings=settings)
    try:
        found = cache.find(key)
    except AutosageError:
        return   # a foreign schema or version: named in one line
    if found.entry is not None:
        result = tune_mod.tune(graph, "spmm", 4, cache=cache, measure=FakeMeasurer(), device_info=DEVICE,
                               software_info=SOFTWARE, features=features_of(graph))
        assert result.cache_hit
        render_table(result, Console(file=io.StringIO(), width=200))


@HALF_SETTINGS   # two tests: 2000 examples of the cache format in all
@given(steps=mutations)
def test_damaged_cache_bytes(base, steps):
    workdir, graph, doc = base
    _check(workdir, graph, mutate(json.dumps(doc, indent=1).encode(), steps))


wrong_values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.just(math.nan),
                         st.floats(), st.text(max_size=5), st.just([]), st.just({}),
                         st.lists(st.integers(), max_size=2), st.just({"name": 3}))


def _replace(doc, path: list[int], value, delete: bool):
    """Walk `path` (each step picks a key or an item by index, modulo its size) and replace or
    delete what it reaches."""
    node = doc
    for depth, step in enumerate(path):
        keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return doc
        key = keys[step % len(keys)]
        child = node[key]
        if depth == len(path) - 1 or not isinstance(child, (dict, list)) or not child:
            if delete:
                del node[key]
            else:
                node[key] = value
            return doc
        node = child
    return doc


@HALF_SETTINGS   # two tests: 2000 examples of the cache format in all
@given(path=st.lists(st.integers(0, 40), min_size=1, max_size=6), value=wrong_values, delete=st.booleans())
def test_cache_fields_of_the_wrong_type(base, path, value, delete):
    workdir, graph, doc = base
    fuzzed = _replace(copy.deepcopy(doc), path, value, delete)
    _check(workdir, graph, json.dumps(fuzzed).encode())
