"""scripts/train_bench.py as a CPU smoke run: every model trains on cora in both libraries from the
same initial weights, the CSV has a row per library and model, and the losses agree."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: the training benchmark needs it")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: no PyG baseline")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_bench.py"


@pytest.mark.slow
def test_cpu_smoke_run_writes_matching_losses(tmp_path):
    out = tmp_path / "train.csv"
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--graphs", "cora",
                          "--steps", "2", "--warmup", "1", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = list(csv.DictReader(out.open()))
    assert [(r["op"], r["backend"]) for r in rows] == [
        (f"train-{m}", b) for m in ("gcn", "sage", "transformer") for b in ("pyg", "autosage")]
    for ours in rows[1::2]:
        assert ours["status"] == "ok" and float(ours["ms_median"]) > 0
        assert float(ours["loss_rel_diff"]) < 1e-4, ours
        assert float(ours["loss_last"]) != float(ours["loss_first"])  # it trained


def test_bad_arguments_get_one_error_line(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--models", "gat",
                          "--out", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == "Error: unknown model 'gat'; choose gcn, sage, transformer"
