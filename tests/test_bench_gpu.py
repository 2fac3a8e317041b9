"""`autosage bench` end to end on the GPU: a tiny suite, every row accounted for and verified."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from cli_helpers import run_cli
from autosage_cli.bench import report

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """2,000 rows, ~20k random edges plus one hub row holding 1,500 neighbours (a long row)."""
    rng = np.random.default_rng(3)
    m = sp.random(2000, 2000, density=0.005, random_state=3, format="lil")
    m[7, rng.choice(2000, 1500, replace=False)] = 1.0
    path = tmp_path_factory.mktemp("graphs") / "tiny.mtx"
    scipy.io.mmwrite(str(path), sp.coo_matrix(m))
    return str(path)


def backends_per_case(path: str, op: str, k: int, heads: int = 1) -> int:
    """autosage + every vendor algorithm + every framework baseline (run or skipped)."""
    from autosage_cli import ops
    from autosage_cli.backends import baselines
    from autosage_cli.backends.base import DeviceGraph
    from autosage_cli.graphs.load import load_graph

    dgraph = DeviceGraph.from_host(load_graph(path=path))
    skipped: list = []
    plans = baselines.prepare_baselines(dgraph, ops.get(op).baselines, k, heads, None, skipped=skipped)
    return 1 + len(ops.vendor_names(op)) + len(plans) + len(skipped)


def _stream_state() -> dict:
    """What this process's streams and math flags are (the run is in-process): told when a row
    fails. A side stream left current by an earlier test's failed capture once made the torch
    baseline's row read as zeros (the bridge then ran torch on a pool stream)."""
    import cupy
    import torch

    return {"torch stream": torch.cuda.current_stream().cuda_stream,
            "cupy stream": cupy.cuda.get_current_stream().ptr,
            "tf32": torch.backends.cuda.matmul.allow_tf32}


def check_rows(rows) -> None:
    for r in rows:
        if r.status == "skipped":  # a baseline not installed here: marked with its reason
            assert r.backend in ("torch", "pyg") and r.error
            continue
        assert r.status == "ok", (r.backend, r.schedule, r.status, r.error, r.provider, _stream_state())
        assert math.isfinite(r.ms_median) and r.ms_median > 0, (r.backend, r.schedule)
        assert math.isfinite(r.rel_error) and r.rel_error <= 1e-4, (r.backend, r.schedule, r.rel_error)
        # a vendor beyond 3x the fastest keeps its one screening launch, and says so
        screened = r.repeats == 1 and r.reason.startswith("screened: one launch")
        assert r.ms_p20 <= r.ms_median <= r.ms_p80 and (r.repeats >= 10 or screened)
        assert math.isfinite(r.speedup_vs_best_vendor) and r.best_vendor
        assert r.gpu and r.copy_tbps > 0 and r.compulsory_bytes > 0


def test_tiny_suite_end_to_end(tiny, tmp_path):
    out, cache = tmp_path / "run", tmp_path / "cache.json"
    widths, ops = (4, 32), ("spmm", "sddmm")
    result = run_cli("bench", "--dataset", tiny, "--ops", ",".join(ops), "--widths", "4,32",
                     "--repeat", "10", "--out", str(out), "--cache", str(cache), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    rows = report.read_rows(out / "results.csv")
    expected = sum(backends_per_case(tiny, op, k) for op in ops for k in widths)
    assert len(rows) == expected == summary["rows"]
    check_rows(rows)
    main = [r for r in rows if report.is_main(r)]
    assert len(main) == len(ops) * len(widths) and all(r.decision == "probe" for r in main)
    for name in ("results.json", "README.md", "speedup_spmm.png", "bandwidth_sddmm.png"):
        assert (out / name).stat().st_size > 0

    # The same run again: every decision comes from the cache.
    again = run_cli("bench", "--dataset", tiny, "--ops", ",".join(ops), "--widths", "4,32",
                    "--repeat", "10", "--out", str(tmp_path / "again"), "--cache", str(cache))
    assert again.exit_code == 0, again.stderr
    main = [r for r in report.read_rows(tmp_path / "again" / "results.csv") if report.is_main(r)]
    assert len(main) == 4 and all(r.decision == "cache" for r in main)


def test_oracle_and_all_schedules(tiny, tmp_path):
    from autosage_cli.kernels.schedule import candidates

    out = tmp_path / "run"
    result = run_cli("bench", "--dataset", tiny, "--ops", "spmm", "--widths", "32", "--oracle",
                     "--all-schedules", "--repeat", "10", "--out", str(out),
                     "--cache", str(tmp_path / "cache.json"))
    assert result.exit_code == 0, result.stderr
    rows = report.read_rows(out / "results.csv")
    native = [r for r in rows if r.backend == "native"]
    assert {r.schedule for r in native} == {s.name for s in candidates("spmm", 32, 1)}
    assert len(rows) == backends_per_case(tiny, "spmm", 32) + 1 + len(native)
    check_rows(rows)
    probe = next(r for r in rows if report.is_main(r))
    oracle = next(r for r in rows if r.decision == "oracle")
    assert probe.probe_agrees in ("yes", "no") and probe.oracle_schedule == oracle.schedule


def test_attention_case(tiny, tmp_path):
    out = tmp_path / "run"
    result = run_cli("bench", "--dataset", tiny, "--ops", "attention", "--widths", "32", "--heads", "2",
                     "--repeat", "10", "--out", str(out), "--cache", str(tmp_path / "cache.json"))
    assert result.exit_code == 0, result.stderr
    rows = report.read_rows(out / "results.csv")
    assert len(rows) == backends_per_case(tiny, "attention", 32, 2)
    assert all(r.heads == 2 and r.k == 32 for r in rows)
    check_rows(rows)
