"""Memory budgets before allocation, validation before the GPU check (`--dry-run`), clean failures
when memory runs out or CUDA faults, and the cache's recovery from dead writers and bad entries."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scipy.sparse as sp

from autosage_cli import budget, ops
from autosage_cli.bench import report
from autosage_cli.cache import DecisionCache
from autosage_cli.errors import (EXIT_CUDA_FAULT, EXIT_OUT_OF_MEMORY, CudaFault, OutOfMemory,
                                 is_sticky_cuda_fault, resource_error)
from autosage_cli.graphs import load as load_mod
from cli_helpers import message_lines, run_cli

import bench_fakes
from test_bench_cli import fake_gpu, mtx  # noqa: F401  (fixtures)
from test_cache import ENTRY, key_for
from scheduler_fakes import small_graph

REPO = Path(__file__).resolve().parent.parent
MM = "%%MatrixMarket matrix coordinate real general\n"


def _one_error(result, code=2, words=()):
    lines = message_lines(result.stderr)
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ---- budgets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, text, words", [
    ("rows.mtx", MM + "1000000000 1000000000 1\n1 1 1\n", ["1000000000x1000000000", "of host memory", "available"]),
    ("entries.mtx", MM + "5 5 900000000000\n1 1 1\n", ["declares 900000000000 entries", "at most"]),
    ("ids.txt", "0 2147483646\n", ["2147483647 nodes", "of host memory"]),
])
def test_allocation_bombs_are_refused_under_a_memory_limit(tmp_path, name, text, words):
    """Through the real entry point, in a process limited to 1 GiB of address space: one line,
    exit code 2, within 5 s of the process's CPU time (its wall time, on a busy 2-core machine,
    is not what a refusal costs)."""
    path = tmp_path / name
    path.write_text(text)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from autosage_cli.cli import main; main(sys.argv[1:])")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-c", code, "inspect", str(path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 5
    assert proc.returncode == 2, proc.stderr
    lines = message_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and all(w in lines[0] for w in words), lines
    assert "RLIMIT_AS" in lines[0] or "declares" in lines[0]


def test_memory_limit_variable_caps_the_budget(tmp_path, monkeypatch):
    path = tmp_path / "g.mtx"
    path.write_text(MM + "2000000 2000000 1\n1 1 1\n")           # ~140 MiB of rows
    assert run_cli("inspect", str(path), "--json").exit_code == 0
    monkeypatch.setenv(budget.LIMIT_ENV, "64M")
    _one_error(run_cli("inspect", str(path)), words=["64.0 MiB available (AUTOSAGE_MEMORY_LIMIT)"])
    monkeypatch.setenv(budget.LIMIT_ENV, "lots")
    _one_error(run_cli("inspect", str(path)), words=["AUTOSAGE_MEMORY_LIMIT must be a number of bytes"])


def test_npz_is_sized_from_its_headers(tmp_path):
    path = tmp_path / "wide.npz"
    sp.save_npz(path, sp.coo_matrix(([1.0], ([0], [0])), shape=(10**9, 10**9)))
    _one_error(run_cli("inspect", str(path)), words=["1000000000x1000000000 graph with 1 nonzeros", "host memory"])


def test_generator_budget_and_output_path_come_first(tmp_path, monkeypatch):
    started = time.process_time()   # CPU time: a refusal does no work, however busy the machine
    _one_error(run_cli("gen", "reddit-like", "--out", str(tmp_path / "no" / "x.npz")), words=["does not exist"])
    monkeypatch.setenv(budget.LIMIT_ENV, "1G")
    _one_error(run_cli("gen", "reddit-like", "--out", str(tmp_path / "x.npz")),
               words=["generating reddit-like", "GiB of host memory", "1.0 GiB available"])
    assert time.process_time() - started < 5 and list(tmp_path.iterdir()) == []


def test_case_estimates_grow_with_width_and_heads():
    small = ops.device_bytes("spmm", 1000, 1000, 10_000, 4)
    assert ops.device_bytes("spmm", 1000, 1000, 10_000, 64) > small
    one = ops.device_bytes("attention", 1000, 1000, 10_000, 64, heads=1)
    assert ops.device_bytes("attention", 1000, 1000, 10_000, 64, heads=8) > 7 * one / 2
    assert budget.graph_bytes(10, 10, 100) == 11 * 4 + 100 * 8
    assert budget.parse_bytes("1.5G") == 3 << 29 and budget.format_bytes(3 << 29) == "1.5 GiB"


# ---- running out, CUDA faults -------------------------------------------------------------------

def _cuda_exception(module: str, name: str, base=Exception):
    return type(name, (base,), {"__module__": module})


def test_resource_errors_are_classified():
    oom = _cuda_exception("cupy.cuda.memory", "OutOfMemoryError", MemoryError)("Out of memory allocating 8 GiB")
    assert isinstance(resource_error(oom), OutOfMemory) and "GPU memory" in str(resource_error(oom))
    host = resource_error(MemoryError())
    assert isinstance(host, OutOfMemory) and "host memory" in str(host)
    fault = _cuda_exception("cupy_backends.cuda.api.runtime", "CUDARuntimeError")(
        "cudaErrorIllegalAddress: an illegal memory access was encountered")
    assert isinstance(resource_error(fault), CudaFault) and is_sticky_cuda_fault(fault)
    alloc = _cuda_exception("cupy_backends.cuda.libs.cusparse", "CUSPARSEError")("CUSPARSE_STATUS_ALLOC_FAILED")
    assert isinstance(resource_error(alloc), OutOfMemory) and not is_sticky_cuda_fault(alloc)
    assert resource_error(ValueError("a bug")) is None


@pytest.mark.parametrize("exc, code, words", [
    (MemoryError(), EXIT_OUT_OF_MEMORY, ["out of host memory"]),
    (_cuda_exception("cupy.cuda.memory", "OutOfMemoryError", MemoryError)("Out of memory"), EXIT_OUT_OF_MEMORY,
     ["out of GPU memory"]),
    (_cuda_exception("cupy_backends.cuda.api.driver", "CUDADriverError")("CUDA_ERROR_LAUNCH_FAILED: unspecified "
                                                                         "launch failure"), EXIT_CUDA_FAULT,
     ["CUDA fault", "CUDA_ERROR_LAUNCH_FAILED"]),
])
def test_running_out_is_one_line_with_its_exit_code(monkeypatch, exc, code, words):
    def explode(*args, **kwargs):
        raise exc
    monkeypatch.setattr(load_mod, "load_graph", explode)
    _one_error(run_cli("inspect", "--dataset", "cora"), code=code, words=words)


def _bench_failing_at_k16(monkeypatch, out, mtx, error: Exception):
    """`bench` on K = 4, 16, 64 with the fake GPU raising `error` when K = 16's inputs are made."""
    real = bench_fakes.FakeToolkit.inputs

    def make_inputs(self, dgraph, op, k, heads, seed, dtype="float32"):
        if k == 16:
            raise error
        return real(self, dgraph, op, k, heads, seed, dtype)
    monkeypatch.setattr(bench_fakes.FakeToolkit, "inputs", make_inputs)
    return run_cli("bench", "--dataset", mtx, "--ops", "spmm", "--widths", "4,16,64", "--out", str(out))


def test_bench_records_out_of_memory_and_goes_on(fake_gpu, monkeypatch, tmp_path, mtx):  # noqa: F811
    oom = _cuda_exception("cupy.cuda.memory", "OutOfMemoryError", MemoryError)
    out = tmp_path / "run"
    result = _bench_failing_at_k16(monkeypatch, out, mtx, oom("Out of memory allocating 1,048,576 bytes"))
    assert result.exit_code == 0, result.stderr
    rows = report.read_rows(out / "results.csv")
    failed = [r for r in rows if r.k == 16]
    assert len(failed) == 1 and failed[0].status == "failed" and "out of GPU memory" in failed[0].error
    assert {r.k for r in rows if r.status == "ok"} == {4, 64}


def test_bench_stops_gpu_work_after_a_sticky_fault_and_keeps_its_rows(fake_gpu, monkeypatch, tmp_path, mtx):  # noqa: F811
    fault = _cuda_exception("cupy_backends.cuda.api.runtime", "CUDARuntimeError")
    out = tmp_path / "run"
    result = _bench_failing_at_k16(monkeypatch, out, mtx,
                                   fault("cudaErrorIllegalAddress: an illegal memory access was encountered"))
    assert result.exit_code == EXIT_CUDA_FAULT
    assert result.stderr.strip().splitlines()[-1].startswith("Error: CUDA fault: CUDARuntimeError")
    rows = {r.k: r for r in report.read_rows(out / "results.csv") if r.backend == "autosage"}
    assert rows[4].status == "ok" and rows[16].status == "failed" and "cudaErrorIllegalAddress" in rows[16].error
    assert rows[64].status == "failed" and rows[64].error.startswith("not run: the CUDA context is unusable")


def test_bench_case_that_does_not_fit_the_device_is_a_failed_row(fake_gpu, monkeypatch, tmp_path, mtx):  # noqa: F811
    monkeypatch.setattr(bench_fakes.FakeToolkit, "device_free_bytes", lambda self: 200_000)
    out = tmp_path / "run"
    result = run_cli("bench", "--dataset", mtx, "--ops", "spmm,sddmm", "--widths", "1,256", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    rows = report.read_rows(out / "results.csv")
    big = [r for r in rows if r.k == 256 and r.op == "spmm"]
    assert len(big) == 1 and big[0].status == "failed" and "of GPU memory" in big[0].error
    assert any(r.k == 1 and r.status == "ok" for r in rows)


# ---- validation before the GPU, --dry-run -------------------------------------------------------

def _no_gpu(monkeypatch):
    from autosage_cli import capability
    capability.gpu_status.cache_clear()
    monkeypatch.setattr(capability, "gpu_status", lambda: (False, "no CUDA device visible"))


def test_tune_dry_run_needs_no_gpu(monkeypatch, tmp_path):
    _no_gpu(monkeypatch)
    result = run_cli("tune", "--dataset", "cora", "--width", "32", "--op", "sddmm", "--dry-run", "--json",
                     "--cache", str(tmp_path / "c.json"))
    assert result.exit_code == 0, result.stderr
    [case] = json.loads(result.stdout)["cases"]
    assert (case["graph"], case["op"], case["k"], case["n_rows"], case["nnz"]) == ("cora", "sddmm", 32, 2708, 13264)
    assert case["device_bytes"] > case["nnz"] * 4 and not (tmp_path / "c.json").exists()
    plain = run_cli("tune", "--dataset", "cora", "--width", "32", "--dry-run")
    assert plain.exit_code == 0 and "dry run" in plain.stdout and "cora" in plain.stdout


def test_tune_validates_the_graph_and_cache_before_asking_for_a_gpu(monkeypatch, tmp_path):
    _no_gpu(monkeypatch)
    bad = tmp_path / "upper.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n2 1 1\n1 3 1\n")
    _one_error(run_cli("tune", str(bad), "--width", "8"), words=["line 4", "above the diagonal"])
    _one_error(run_cli("tune", "--dataset", "cora", "--width", "8", "--cache", str(tmp_path)),
               words=["is a directory"])
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"schema": "something-else"}')
    _one_error(run_cli("tune", "--dataset", "cora", "--width", "8", "--cache", str(foreign)),
               words=["not an autosage decision cache"])
    _one_error(run_cli("tune", "--dataset", "cora", "--width", "8"),
               words=["needs a CUDA GPU", "--dry-run validates the run without one"])


def test_bench_dry_run_lists_cases_and_validates_files(monkeypatch, tmp_path, mtx):  # noqa: F811
    _no_gpu(monkeypatch)
    result = run_cli("bench", "--dataset", mtx, "--dataset", "er-200k", "--ops", "spmm,attention",
                     "--widths", "4,64", "--heads", "1,8", "--dry-run", "--json", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.stderr
    cases = json.loads(result.stdout)["cases"]
    assert len(cases) == 2 * (2 + 2 * 2)
    tiny = [c for c in cases if c["graph"] == "tiny"]
    assert all(c["exact"] and c["n_rows"] == 30 for c in tiny)
    er = [c for c in cases if c["graph"] == "er-200k"]
    assert all(not c["exact"] and c["n_rows"] == 200_000 for c in er)
    h8 = next(c for c in er if c["op"] == "attention" and c["heads"] == 8 and c["k"] == 64)
    h1 = next(c for c in er if c["op"] == "attention" and c["heads"] == 1 and c["k"] == 64)
    assert h8["device_bytes"] > 4 * h1["device_bytes"] and not (tmp_path / "run").exists()

    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n")
    _one_error(run_cli("bench", "--dataset", str(bad), "--dry-run"), words=["dense 'array'"])
    _one_error(run_cli("bench", "--dataset", str(bad)), words=["dense 'array'"])   # before the GPU check
    monkeypatch.setenv(budget.LIMIT_ENV, "100M")
    _one_error(run_cli("bench", "--dataset", "uniform-1m"), words=["generating uniform-1m", "100.0 MiB available"])


# ---- the cache ----------------------------------------------------------------------------------

def test_stale_temporary_files_of_dead_writers_are_removed(tmp_path):
    path = tmp_path / "decisions.json"
    cache = DecisionCache(path)
    graph = small_graph()
    cache.store(key_for(graph), ENTRY)
    # What writers killed mid-write leave behind: their temporary files, beside the cache.
    code = ("import os, sys, tempfile; fd, name = tempfile.mkstemp(dir=sys.argv[1], prefix='.decisions.json.', "
            "suffix='.tmp'); os.write(fd, b'{\"half\": '); os.kill(os.getpid(), 9)")
    for _ in range(3):
        subprocess.run([sys.executable, "-c", code, str(tmp_path)])
    unrelated = tmp_path / ".other.json.abc.tmp"
    unrelated.write_text("not ours")
    assert len(list(tmp_path.glob(".decisions.json.*.tmp"))) == 3
    cache.store(key_for(graph, k=32), ENTRY)
    assert list(tmp_path.glob(".decisions.json.*.tmp")) == [] and unrelated.exists()
    assert len(DecisionCache(path).entries()) == 2


def test_malformed_entry_is_named_and_skipped(tmp_path):
    warnings = []
    path = tmp_path / "d.json"
    cache = DecisionCache(path, warn=warnings.append)
    graph = small_graph()
    good, bad = key_for(graph, k=4), key_for(graph, k=8)
    cache.store(good, ENTRY)
    cache.store(bad, ENTRY)
    doc = json.loads(path.read_text())
    doc["entries"][bad.id]["k"] = "eight"
    doc["entries"][bad.id]["decision"]["schedule"] = ["not", "a", "name"]
    path.write_text(json.dumps(doc))
    assert [e["id"] for e in cache.entries()] == [good.id]
    assert len(warnings) == 1 and bad.id in warnings[0] and "decision.schedule" in warnings[0]
    assert cache.lookup(good) is not None
    found = cache.find(bad)
    assert found.entry is None and bad.id in found.stale and "re-tuning" in found.stale
    cache.store(bad, ENTRY)                    # re-tuning replaces it
    assert {e["id"] for e in cache.entries()} == {good.id, bad.id}
