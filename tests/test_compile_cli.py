"""`autosage compile` and the kernel cache in `autosage info`, on CPU.

The command is driven with the NVRTC step replaced by a recorder (what is compiled, for which
architecture, with what progress and summary); where NVRTC can actually be loaded without a GPU,
one real compile checks that the cache fills and a second run finds it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autosage_cli.kernels import aot
from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import util

from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_nvrtc(monkeypatch, tmp_path):
    """No GPU; NVRTC 'present'; every device-free build records (ref, arch) and writes one cache
    file, as CuPy would. `broken` expressions fail."""
    built, broken = [], set()
    cache = tmp_path / "kernel_cache"
    cache.mkdir()
    monkeypatch.setenv("CUPY_CACHE_DIR", str(cache))
    monkeypatch.setattr(aot, "nvrtc_version", lambda: (13, 0))
    monkeypatch.setattr(aot, "device_arch", lambda: None)
    monkeypatch.setattr(aot, "_device_free", lambda: __import__("contextlib").nullcontext())

    def build(ref, arch):
        if ref.expression in broken:
            raise RuntimeError(f"CompileException: {ref.source_file}(12): error: expected a ')'")
        built.append((ref, arch))
        (cache / f"{abs(hash(ref)):x}.cubin").write_bytes(b"\x7fELF" + b"0" * 60)
    monkeypatch.setattr(aot, "_build_into_cache", build)
    return built, broken, cache


def test_compiles_every_instantiation_of_the_ops_for_sm90_without_a_gpu(fake_nvrtc):
    built, _, cache = fake_nvrtc
    r = run_cli("compile", "--op", "sddmm", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    refs = list(util.MODULES.values()) + kcompile.instantiations(["sddmm"])   # every helper group first
    assert sorted(ref for ref, _ in built) == sorted(refs) and {a for _, a in built} == {"90"}
    assert doc["kernels"] == len(refs) and doc["failed"] == 0 and doc["arch"] == "sm_90"
    assert doc["on_device"] is False
    assert doc["cache"] == {"path": str(cache), "kernels": len(refs), "bytes": 64 * len(refs)}
    assert f"compiled {len(refs)}/{len(refs)} kernels" in r.stderr       # progress on stderr


def test_attention_brings_the_kernels_its_pipeline_runs_and_arch_is_normalized(fake_nvrtc):
    built, _, _ = fake_nvrtc
    r = run_cli("compile", "--op", "attention", "--arch", "sm_100", "--workers", "3")
    assert r.exit_code == 0, r.stderr
    files = {ref.source_file for ref, _ in built}
    assert {"attention_fused.cu", "attention_softmax.cu", "sddmm_edge.cu", "spmm_split.cu"} <= files
    assert {a for _, a in built} == {"100"}
    assert "sm_100" in r.stdout and "kernel cache:" in r.stdout


def test_a_kernel_that_fails_is_named_and_the_exit_code_says_so(fake_nvrtc):
    built, broken, _ = fake_nvrtc
    refs = list(util.MODULES.values()) + kcompile.instantiations(["spmm"])
    bad = kcompile.instantiations(["spmm"])[3]
    broken.add(bad.expression)
    r = run_cli("compile", "--op", "spmm")
    assert r.exit_code == 2
    assert f"failed: {bad.source_file} {bad.expression}: RuntimeError: CompileException" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (f"Error: 1 of {len(refs)} kernels failed to compile "
                                                  f"(first: {bad.expression})")
    assert len(built) == len(refs) - 1                   # the others still compiled


@pytest.mark.parametrize("args, message", [
    (("--op", "gemm"), "unknown op 'gemm' in --op"),
    (("--dtype", "float64"), "unknown dtype 'float64'; known: float32, float16, bfloat16"),
    (("--arch", "hopper"), "--arch must look like 90, sm_90 or 9.0"),
    (("--workers", "0"), "--workers must be >= 1"),
])
def test_bad_options_are_one_line_exit_2(args, message, fake_nvrtc):
    r = run_cli("compile", *args)
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: {message}") and r.stderr.count("\n") == 1
    assert fake_nvrtc[0] == []


def test_without_nvrtc_compile_says_so_in_one_line(monkeypatch):
    from autosage_cli.errors import AutosageError

    def missing():
        raise AutosageError("NVRTC is not available, so kernels cannot be compiled here (libnvrtc.so.13)")
    monkeypatch.setattr(aot, "nvrtc_version", missing)
    r = run_cli("compile", "--op", "spmm")
    assert r.exit_code == 2 and r.stderr.startswith("Error: NVRTC is not available")
    assert r.stderr.count("\n") == 1


@pytest.mark.parametrize("text, arch", [("90", "90"), ("sm_90", "90"), ("9.0", "90"), ("compute_80", "80"),
                                        ("sm_90a", "90a"), ("12.0", "120")])
def test_normalize_arch(text, arch):
    assert aot.normalize_arch(text) == arch


def test_info_says_where_kernels_are_cached_and_how_many(monkeypatch, tmp_path):
    for i in range(3):
        (tmp_path / f"{i}.cubin").write_bytes(b"x" * 100)
    (tmp_path / "tmpabc").write_bytes(b"partial write")  # not a finished kernel
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    doc = json.loads(run_cli("info", "--json").stdout)
    assert doc["kernel_cache"] == {"path": str(tmp_path), "kernels": 3, "bytes": 300}
    table = run_cli("info").stdout
    assert "kernel cache" in table and "3 compiled kernels" in table
    monkeypatch.delenv("CUPY_CACHE_DIR")
    assert aot.kernel_cache_dir() == Path.home() / ".cupy" / "kernel_cache"


def _nvrtc_loads() -> bool:
    try:
        aot.nvrtc_version()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _nvrtc_loads(), reason="NVRTC cannot be loaded on this machine")
def test_real_nvrtc_fills_the_cache_and_a_second_run_finds_it(tmp_path):
    """Two processes (CuPy reads CUPY_CACHE_DIR when imported): the second compiles nothing new."""
    env = {**os.environ, "CUPY_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "autosage_cli.cli", "compile", "--op", "sddmm", "--json"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["failed"] == 0 and doc["cache"]["kernels"] >= doc["kernels"]
    before = sorted(os.listdir(tmp_path))
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and sorted(os.listdir(tmp_path)) == before
    assert json.loads(second.stdout)["wall_s"] < doc["wall_s"]


def test_on_the_gpu_compile_also_warms_cupys_kernels_unless_kernels_only(fake_nvrtc, monkeypatch):
    from autosage_cli.scheduler import warmup
    warmed = []
    real = aot.compile_ahead

    def on_device(refs, arch, workers, on_done):
        result = real(refs, arch, workers, on_done)
        result.on_device = True
        return result
    monkeypatch.setattr(aot, "compile_ahead", on_device)
    monkeypatch.setattr(warmup, "warm_up", lambda ops: warmed.append(list(ops)) or {op: 0.5 for op in ops})
    doc = json.loads(run_cli("compile", "--op", "spmm,sddmm", "--json").stdout)
    assert warmed == [["spmm", "sddmm"]] and doc["warm_up_s"] == {"spmm": 0.5, "sddmm": 0.5}
    doc = json.loads(run_cli("compile", "--op", "spmm", "--json", "--kernels-only").stdout)
    assert len(warmed) == 1 and doc["warm_up_s"] is None


def test_warm_up_tunes_a_tiny_graph_once_per_op_probing_every_candidate(monkeypatch):
    from autosage_cli.kernels import schedule as sched
    from autosage_cli.scheduler import tune as tune_mod
    from autosage_cli.scheduler import warmup
    calls = []
    monkeypatch.setattr(tune_mod, "tune", lambda g, op, k, heads, **kw: calls.append((g, op, k, heads, kw)))
    seconds = warmup.warm_up(["spmm", "attention"])
    assert set(seconds) == {"spmm", "attention"}
    assert [(op, k, h) for _, op, k, h, _ in calls] == [("spmm", 64, 1), ("attention", 64, 4)]
    graph, kw = calls[0][0], calls[0][4]
    assert graph.nnz < 100_000 and kw["cache"] is None
    assert kw["top_k"] >= len(sched.registry("spmm")) + len(sched.registry("attention"))


def test_compile_without_op_builds_the_ops_layers_run_not_every_fused_epilogue():
    from autosage_cli import ops as op_specs
    from autosage_cli.commands.compile import parse_ops

    chosen = parse_ops(())
    assert {"spmm", "sddmm", "attention", "attention-additive", "spmm-bias"} <= set(chosen)
    assert not {"spmm-relu", "spmm-bias-relu", "spmm-scale"} & set(chosen)
    assert parse_ops(("spmm-relu",)) == ("spmm-relu",) and set(chosen) < set(op_specs.names())
