"""The results schema (bench/rows.py): column order in CSV and JSON, round trips, byte counts."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from autosage_cli.bench import report
from autosage_cli.ops import compulsory_bytes, gather_bytes
from autosage_cli.bench.rows import (ALL_COLUMNS, EXTRA_COLUMNS, SCHEMA_COLUMNS, Row,
                                     effective_tbps, speedup)
from autosage_cli.errors import AutosageError

FIXTURE = Path(__file__).parent / "fixtures" / "bench_rows.csv"

# The schema's fixed columns written out by hand, so a reordering of Row's fields fails here.
SCHEMA_ORDER = ["graph", "n_rows", "nnz", "op", "k", "heads", "dtype", "backend", "schedule", "decision",
             "ms_median", "ms_p20", "ms_p80", "prepare_ms", "rel_error", "best_vendor", "best_vendor_ms",
             "speedup_vs_best_vendor", "speedup_vs_vendor_default", "compulsory_bytes", "effective_tbps",
             "copy_tbps", "commit", "gpu", "timestamp"]


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def rows_equal(xs: list[Row], ys: list[Row]) -> bool:
    return len(xs) == len(ys) and all(same(getattr(x, c), getattr(y, c))
                                      for x, y in zip(xs, ys) for c in ALL_COLUMNS)


@pytest.fixture
def rows() -> list[Row]:
    return report.read_rows(FIXTURE)


def test_schema_columns_are_section_9_in_order():
    assert list(SCHEMA_COLUMNS) == SCHEMA_ORDER
    assert list(ALL_COLUMNS[:len(SCHEMA_ORDER)]) == SCHEMA_ORDER
    assert set(EXTRA_COLUMNS).isdisjoint(SCHEMA_ORDER)
    assert {"probe_agrees", "oracle_schedule", "oracle_ms", "tune_ms", "status"} <= set(EXTRA_COLUMNS)


def test_minibatch_columns_are_appended_after_the_training_ones():
    """New columns only ever go at the end: the mini-batch suite's follow the training suite's."""
    tail = ("loss_first", "loss_last", "first_step_ms", "floor_ms", "probes", "sample_ms",
            "reorder", "reorder_s", "amortised_ms", "speedup_vs_user_order")
    assert ALL_COLUMNS[-len(tail):] == tail
    row = Row("g", 2, 3, "minibatch-sage", 256, 1, "float32", "autosage", "graph", "probe",
              first_step_ms=900.0, floor_ms=3.5, probes=4, sample_ms=1.25)
    back = Row.from_dict({k: str(v) for k, v in row.to_dict().items()})    # a CSV line
    assert (back.first_step_ms, back.floor_ms, back.probes, back.sample_ms) == (900.0, 3.5, 4, 1.25)
    old = Row.from_dict({c: row.to_dict()[c] for c in SCHEMA_ORDER})        # a file from before them
    assert math.isnan(old.floor_ms) and old.probes == 0 and math.isnan(old.sample_ms)


def test_csv_header_and_round_trip(rows, tmp_path):
    path = tmp_path / "results.csv"
    report.write_csv(rows, path)
    with open(path, newline="") as fh:
        header = next(csv.reader(fh))
    assert header[:len(SCHEMA_ORDER)] == SCHEMA_ORDER
    assert header == list(ALL_COLUMNS)
    assert rows_equal(report.read_rows(path), rows)


def test_json_layout_and_round_trip(rows, tmp_path):
    path = tmp_path / "results.json"
    env = {"device": {"name": "NVIDIA H200"}, "commit": "abc1234"}
    report.write_json(rows, env, path, runs=[{"command": "autosage bench"}])
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    doc = json.loads(text)
    assert doc["environment"] == env
    assert doc["columns"] == list(ALL_COLUMNS)
    assert all(list(r)[:len(SCHEMA_ORDER)] == SCHEMA_ORDER for r in doc["rows"])
    assert rows_equal(report.read_rows(path), rows)
    assert report.read_runs(path) == (env, [{"command": "autosage bench"}])


def test_infinite_error_survives_json(tmp_path):
    row = Row("g", 2, 3, "spmm", 4, 1, "float32", "native", "s", "fixed", rel_error=math.inf)
    report.write_json([row], {}, tmp_path / "r.json")
    assert report.read_rows(tmp_path / "r.json")[0].rel_error == math.inf


def test_row_from_dict_needs_schema_columns():
    with pytest.raises(ValueError, match="lacks schema columns"):
        Row.from_dict({"graph": "g", "op": "spmm"})


def test_read_rows_rejects_missing_and_malformed_files(tmp_path):
    with pytest.raises(AutosageError, match="not found"):
        report.read_rows(tmp_path / "absent.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(AutosageError, match="not an autosage results file"):
        report.read_rows(bad)


def test_compulsory_bytes_per_op():
    n_rows, n_cols, nnz, k, h = 10, 12, 30, 8, 2
    sparse = (n_rows + 1) * 4 + nnz * 4 + nnz * 4
    assert compulsory_bytes("spmm", n_rows, n_cols, nnz, k) == sparse + 4 * (n_cols * k + n_rows * k)
    assert compulsory_bytes("sddmm", n_rows, n_cols, nnz, k) == sparse + 4 * (n_rows * k + n_cols * k + nnz)
    assert compulsory_bytes("attention", n_rows, n_cols, nnz, k, h) == sparse + 4 * h * k * (2 * n_rows + 2 * n_cols)
    # int64 indices (nnz >= 2^31) double the index bytes
    assert (compulsory_bytes("spmm", n_rows, n_cols, nnz, k, index_bytes=8)
            - compulsory_bytes("spmm", n_rows, n_cols, nnz, k)) == 4 * (n_rows + 1 + nnz)
    with pytest.raises(AutosageError, match="unknown op 'gemm'"):
        compulsory_bytes("gemm", 1, 1, 1, 1)
    # the dense operands and A's values in the case's element size
    indices = (n_rows + 1) * 4 + nnz * 4
    assert (compulsory_bytes("spmm", n_rows, n_cols, nnz, k) - indices
            == 2 * (compulsory_bytes("spmm", n_rows, n_cols, nnz, k, dtype="float16") - indices))


def test_gather_bound_bandwidth_and_speedup():
    assert gather_bytes("spmm", 100, 16) == 100 * 16 * 4
    assert gather_bytes("attention", 100, 64, 8) == 100 * 64 * 8 * 4 * 2
    assert gather_bytes("sddmm", 100, 16, dtype="bfloat16") == 100 * 16 * 2
    assert effective_tbps(4_170_000_000, 1.0) == pytest.approx(4.17)
    assert math.isnan(effective_tbps(100, math.nan)) and math.isnan(effective_tbps(100, 0.0))
    assert speedup(2.0, 1.0) == 2.0
    assert math.isnan(speedup(2.0, math.nan)) and math.isnan(speedup(math.nan, 1.0))
