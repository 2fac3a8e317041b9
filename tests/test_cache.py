"""The decision cache: round trip, corrupt and truncated files, schema checks, stale software,
and concurrent writers."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from autosage_cli import cache as cache_mod
from autosage_cli.cache import CacheKey, DecisionCache, make_key
from autosage_cli.errors import AutosageError

from scheduler_fakes import DEVICE, SOFTWARE, small_graph


def key_for(graph, k=16, op="spmm", software=SOFTWARE, heads=1):
    return make_key(graph, op, k, "float32", heads, device=DEVICE, software=software)


ENTRY = {"decision": {"backend": "native", "schedule": "spmm.subwarp.g4.v4.t256"},
         "reason": "native ... <= 0.95 x ...", "candidates": [{"name": "x", "ms": 0.4, "status": "ok"}],
         "graph": {"source": {"path": "/tmp/g.mtx"}}}


@pytest.fixture
def graph():
    return small_graph()


def test_round_trip(tmp_path, graph):
    c = DecisionCache(tmp_path / "sub" / "decisions.json")
    key = key_for(graph)
    assert c.lookup(key) is None
    stored = c.store(key, ENTRY)
    assert stored["id"] == key.id
    got = DecisionCache(c.path).lookup(key)
    assert got["decision"] == ENTRY["decision"] and got["candidates"] == ENTRY["candidates"]
    assert got["software"] == key.software and got["key"]["graph"] == graph.fingerprint
    assert got["created"] and got["updated"]
    assert CacheKey.from_dict(got["key"]) == key
    doc = json.loads(c.path.read_text())
    assert doc["schema"] == cache_mod.SCHEMA and doc["version"] == cache_mod.SCHEMA_VERSION
    # Another K, op or heads is another entry.
    assert c.lookup(key_for(graph, k=32)) is None
    assert c.lookup(key_for(graph, op="sddmm")) is None
    assert [e["id"] for e in c.entries()] == [key.id]


def test_key_covers_the_whole_graph(graph):
    from autosage_cli.graphs.csr import from_arrays
    values = graph.values.copy()
    values[len(values) // 2] += 1.0          # one value in the middle differs
    other = from_arrays(graph.indptr, graph.indices, values, graph.shape)
    assert key_for(other).id != key_for(graph).id


def test_stale_software_is_a_miss_with_a_message(tmp_path, graph):
    c = DecisionCache(tmp_path / "d.json")
    c.store(key_for(graph), ENTRY)
    newer = dict(SOFTWARE, cuda_sources="sources-v2")
    found = c.find(key_for(graph, software=newer))
    assert found.entry is None
    assert "cuda_sources sources-v1 -> sources-v2" in found.stale and "re-tuning" in found.stale
    # Storing the re-tuned decision replaces the stale one (same slot), keeping its creation time.
    before = c.lookup(key_for(graph))["created"]
    c.store(key_for(graph, software=newer), dict(ENTRY, reason="re-tuned"))
    assert c.lookup(key_for(graph)) is None
    fresh = c.lookup(key_for(graph, software=newer))
    assert fresh["reason"] == "re-tuned" and fresh["created"] == before
    assert len(c.entries()) == 1


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "not-an-object"])
def test_corrupt_file_is_moved_aside_and_tuning_goes_on(tmp_path, graph, damage, capsys):
    path = tmp_path / "d.json"
    c = DecisionCache(path)
    c.store(key_for(graph), ENTRY)
    good = path.read_bytes()
    bad = {"truncated": good[: len(good) // 2], "garbage": b"\x00\xffnot json",
           "empty": b"", "not-an-object": b"[1, 2, 3]"}[damage]
    path.write_bytes(bad)
    assert c.lookup(key_for(graph)) is None            # a miss: tuning goes on
    aside = list(tmp_path.glob("d.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == bad      # never deleted, bytes preserved
    assert "corrupt" in capsys.readouterr().err
    c.store(key_for(graph), ENTRY)                      # and the cache works again
    assert c.lookup(key_for(graph)) is not None


def test_read_only_cache_reports_corruption_without_moving(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"schema": "autosage-decisions", "vers')
    with pytest.raises(AutosageError, match="corrupt"):
        DecisionCache(path, read_only=True).entries()
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))


def test_unknown_schema_version_is_an_error_naming_it(tmp_path, graph):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"schema": cache_mod.SCHEMA, "version": 99, "entries": {}}))
    with pytest.raises(AutosageError, match="schema version 99"):
        DecisionCache(path).lookup(key_for(graph))
    with pytest.raises(AutosageError, match="schema version 99"):
        DecisionCache(path).store(key_for(graph), ENTRY)
    assert json.loads(path.read_text())["version"] == 99     # left alone


def test_a_foreign_json_file_is_refused_not_moved(tmp_path, graph):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"theme": "dark"}))
    with pytest.raises(AutosageError, match="not an autosage decision cache"):
        DecisionCache(path).lookup(key_for(graph))
    assert path.exists()


def test_probe_records_appended_beside_the_cache(tmp_path, graph):
    c = DecisionCache(tmp_path / "decisions.json")
    c.store(key_for(graph), ENTRY, probe_records=[{"name": "a", "ms": 0.1}, {"name": "b", "rel_error": float("inf")}])
    c.store(key_for(graph, k=8), ENTRY, probe_records=[{"name": "c"}])
    assert c.probes_path == tmp_path / "decisions.probes.jsonl"
    lines = [json.loads(x) for x in c.probes_path.read_text().splitlines()]
    assert [r["name"] for r in lines] == ["a", "b", "c"]
    assert lines[1]["rel_error"] == "inf" and lines[0]["key"] == key_for(graph).id


def test_non_finite_numbers_are_stored_as_strings(tmp_path, graph):
    c = DecisionCache(tmp_path / "d.json")
    c.store(key_for(graph), dict(ENTRY, speedup=float("inf")))
    json.loads(c.path.read_text())     # strict JSON
    assert c.lookup(key_for(graph))["speedup"] == "inf"


def test_default_path_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_mod.default_path() == tmp_path / "autosage" / "decisions.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_mod.default_path() == Path.home() / ".cache" / "autosage" / "decisions.json"


def test_no_temp_files_left_behind(tmp_path, graph):
    c = DecisionCache(tmp_path / "d.json")
    for k in (1, 2, 4):
        c.store(key_for(graph, k=k), ENTRY)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert not leftovers


# ------------------------------------------------------------------ concurrency

WRITERS, ENTRIES_EACH = 8, 6


def _writer(path: str, worker: int, barrier) -> None:
    c = DecisionCache(path)
    barrier.wait()                       # all processes start writing at once
    for i in range(ENTRIES_EACH):
        key = CacheKey(DEVICE, SOFTWARE, f"graph-{worker}", "spmm", i + 1, "float32", 1)
        c.store(key, {"decision": {"backend": "native", "schedule": f"w{worker}.{i}"}},
                probe_records=[{"worker": worker, "i": i}])


def test_eight_processes_writing_one_cache_lose_no_entry(tmp_path):
    path = str(tmp_path / "shared.json")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_writer, args=(path, w, barrier)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    entries = DecisionCache(path).entries()
    assert len(entries) == WRITERS * ENTRIES_EACH
    assert {e["decision"]["schedule"] for e in entries} == {
        f"w{w}.{i}" for w in range(WRITERS) for i in range(ENTRIES_EACH)}
    probes = Path(path).with_name("shared.probes.jsonl").read_text().splitlines()
    assert len(probes) == WRITERS * ENTRIES_EACH
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_an_unchanged_file_is_parsed_once_per_process_and_a_replaced_one_again(tmp_path, graph, monkeypatch):
    path = tmp_path / "decisions.json"
    key, other = key_for(graph), key_for(graph, k=32)
    DecisionCache(path).store(key, ENTRY)
    assert "\n " not in path.read_text() and '": ' not in path.read_text()   # written compact
    parsed = []
    real_parse = DecisionCache._parse
    monkeypatch.setattr(DecisionCache, "_parse", lambda self, raw: parsed.append(1) or real_parse(self, raw))
    for _ in range(3):                        # fresh objects, as the benchmark makes one per tune
        assert DecisionCache(path).lookup(key)["decision"] == ENTRY["decision"]
    assert parsed == []                       # this process wrote it: nothing to parse
    # Another writer (another process) replaces the file: the next read parses it.
    doc = json.loads(path.read_text())
    doc["entries"][other.id] = dict(doc["entries"][key.id])
    tmp = path.with_name("other.json")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
    assert DecisionCache(path).lookup(other) is not None and len(parsed) == 1
    assert DecisionCache(path).lookup(other) is not None and len(parsed) == 1


def test_a_failed_write_leaves_the_remembered_document_as_the_file_is(tmp_path, graph, monkeypatch):
    path = tmp_path / "decisions.json"
    key, other = key_for(graph), key_for(graph, k=32)
    DecisionCache(path).store(key, ENTRY)

    def no_space(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cache_mod.tempfile, "mkstemp", no_space)
    with pytest.raises(OSError):
        DecisionCache(path).store(other, ENTRY)
    monkeypatch.undo()
    assert DecisionCache(path).lookup(other) is None and DecisionCache(path).lookup(key) is not None
