"""Compilation on a real GPU, each case in a fresh process with its own empty kernel cache (CuPy
reads CUPY_CACHE_DIR when it is imported): a first tune builds exactly the probed candidates'
kernels, in parallel, and they verify; a later process loads them from the disk cache; a cache
filled by `autosage compile` without a GPU is the one a GPU process finds; plans say how much of
their prepare was compilation. Run on the H200 (`make test-gpu`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets"

TUNE_SCRIPT = """
import json, sys
from autosage_cli import ops
from autosage_cli.backends import native
from autosage_cli.graphs.load import load_graph
from autosage_cli.kernels import compile as kc, schedule as sched, util
from autosage_cli.scheduler import tune
op, k, heads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
g = load_graph(dataset="cora", root=sys.argv[4])
r = tune.tune(g, op, k, heads, cache=None, top_k=3)
probed = [c for c in r.candidates if c["status"] != "skipped"]
expected = sorted({tuple(x) for c in probed for x in native.kernel_refs(sched.get(c["name"]), k, "int")}
                  | {tuple(m) for m in ops.tune_modules(op, "float32", "int")})   # + the helper groups it runs
print(json.dumps({"built": sorted({tuple(rec.ref) for rec in kc.compiled_log()}),
                  "expected": [list(x) for x in expected], "candidates": probed, "timings": r.timings,
                  "module_ms": sum(rec.ms for rec in kc.compiled_log())}))
"""


def run_fresh(cache_dir: Path, *args: str, script: str | None = None, **env_extra) -> dict:
    """A new Python process on `cache_dir`; returns the JSON object on its last stdout line."""
    # AUTOSAGE_PREBUILT=0: these cases are about NVRTC and CuPy's cache, not the install-time cubins
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT), "AUTOSAGE_PREBUILT": "0",
           **env_extra}
    cmd = [sys.executable, "-c", textwrap.dedent(script), *args] if script else [
        sys.executable, "-m", "autosage_cli.cli", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cache_files(path: Path) -> set[str]:
    return {p for p in os.listdir(path) if p.endswith(".cubin")}


@pytest.mark.parametrize("op, k, heads", [("spmm", 64, 1), ("sddmm", 32, 1), ("attention", 64, 4)])
def test_a_first_tune_compiles_only_the_probed_candidates_in_parallel(tmp_path, op, k, heads):
    first = run_fresh(tmp_path, op, str(k), str(heads), str(DATASETS), script=TUNE_SCRIPT)
    assert first["built"] == first["expected"]          # nothing beyond the probed candidates (+ helpers)
    cands = first["candidates"]
    assert len(cands) == 3 and all(c["compile_ms"] > 0 for c in cands)
    assert any(c["status"] == "ok" for c in cands), cands   # thread-built kernels ran and verified
    t = first["timings"]
    # in parallel: serially it would take at least the sum over every module (the helper's too)
    assert 0 < t["compile_ms"] < first["module_ms"]
    # A new process with the same kernel cache loads the modules instead of compiling them.
    before = cache_files(tmp_path)
    again = run_fresh(tmp_path, op, str(k), str(heads), str(DATASETS), script=TUNE_SCRIPT)
    assert again["built"] == first["built"]
    assert cache_files(tmp_path) == before              # every module came from the disk cache


def test_a_cache_compiled_without_the_gpu_is_the_one_the_gpu_finds(tmp_path):
    import cupy  # noqa: F401  (cupy.cuda.compiler is imported through cupy)
    from cupy.cuda import compiler

    arch = str(compiler._get_arch())
    aot = run_fresh(tmp_path, "compile", "--op", "sddmm", "--arch", arch, "--json", CUDA_VISIBLE_DEVICES="")
    assert aot["on_device"] is False and aot["failed"] == 0
    before = cache_files(tmp_path)
    assert len(before) >= aot["kernels"]
    found = run_fresh(tmp_path, script="""
        import json
        from autosage_cli.kernels import compile as kc, util
        records = kc.compile_kernels(list(util.MODULES.values()) + kc.instantiations(["sddmm"]))
        print(json.dumps({"errors": [r.error for r in records.values() if r.error],
                          "n": len(records), "ms": sum(r.ms for r in records.values())}))
    """)
    assert found["errors"] == [] and found["n"] == aot["kernels"]
    assert cache_files(tmp_path) == before              # every module was a disk-cache hit


def test_compile_on_the_gpu_leaves_a_first_tune_nothing_to_compile(tmp_path):
    doc = run_fresh(tmp_path, "compile", "--op", "spmm", "--json")
    assert doc["on_device"] is True and doc["failed"] == 0 and doc["warm_up_s"]["spmm"] > 0
    info = run_fresh(tmp_path, "info", "--json")
    assert info["kernel_cache"]["path"] == str(tmp_path)
    assert info["kernel_cache"]["kernels"] >= doc["kernels"]
    before = cache_files(tmp_path)
    tuned = run_fresh(tmp_path, "tune", "--dataset", "cora", "--root", str(DATASETS), "--width", "64",
                      "--cache", str(tmp_path / "decisions.json"), "--json")
    assert not tuned["cache_hit"]
    assert cache_files(tmp_path) == before              # autosage's kernels and CuPy's: all cached


def test_a_plan_reports_the_compile_part_of_its_prepare(tmp_path):
    out = run_fresh(tmp_path, str(DATASETS), script="""
        import json, sys
        from autosage_cli import ops
        from autosage_cli.backends import native
        from autosage_cli.backends.base import DeviceGraph
        from autosage_cli.graphs.load import load_graph
        from autosage_cli.kernels import schedule as sched
        d = DeviceGraph.from_host(load_graph(dataset="cora", root=sys.argv[1]))
        s = sched.candidates("spmm", 32)[0]
        first, second = ops.prepare_native(d, s, 32), ops.prepare_native(d, s, 32)
        print(json.dumps([[p.compile_ms, p.prepare_ms] for p in (first, second)]))
    """)
    (c1, p1), (c2, _p2) = out
    assert 0 < c1 <= p1 and c2 == 0.0
