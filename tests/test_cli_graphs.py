"""`autosage inspect`, `gen` and `info` end to end through the real entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from autosage_cli.graphs.load import load_graph
from autosage_cli.graphs.synthetic import generate
from cli_helpers import run_cli

DATASETS_DIR = Path(__file__).resolve().parent.parent / "datasets"
SHIPPED = sorted(DATASETS_DIR.glob("*.mtx.gz"))


def _inspect_json(*args):
    result = run_cli("inspect", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"shipped/{p.name}")
def test_inspect_json_matches_scipy(path):
    doc = _inspect_json(str(path))
    ref = scipy.io.mmread(str(path))
    assert (doc["n_rows"], doc["n_cols"], doc["nnz"]) == (ref.shape[0], ref.shape[1], ref.nnz)
    degrees = np.diff(ref.tocsr().indptr)
    assert doc["degree"]["max"] == degrees.max() and doc["degree"]["min"] == degrees.min()
    assert doc["degree"]["mean"] == pytest.approx(degrees.mean())
    assert doc["degree"]["q50"] == pytest.approx(np.quantile(degrees, 0.5))
    assert doc["fingerprint"] == load_graph(path=path).fingerprint


def test_inspect_json_keys_and_only_json_on_stdout():
    result = run_cli("inspect", "--dataset", "cora", "--json")
    doc = json.loads(result.stdout)  # nothing else on stdout
    assert {"n_rows", "n_cols", "nnz", "degree", "fingerprint", "skew", "empty_rows", "heavy_share",
            "locality", "symmetric", "source"} <= set(doc)
    assert set(doc["degree"]) >= {"mean", "min", "max", "q50", "q90", "q99"}
    assert doc["source"]["dataset"] == "cora" and doc["n_rows"] == 2708
    assert "loaded" in result.stderr


def test_inspect_table():
    result = run_cli("inspect", str(DATASETS_DIR / "wiki-Vote.mtx.gz"))
    assert result.exit_code == 0
    for word in ("nnz", "103,689", "empty rows", "1,005", "fingerprint", "symmetric"):
        assert word in result.stdout


def test_inspect_symmetrize_and_edge_list(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("# a\n0 1\n1 2\n")
    assert _inspect_json(str(f))["nnz"] == 2
    doc = _inspect_json(str(f), "--symmetrize")
    assert doc["nnz"] == 4 and doc["symmetric"] is True


def test_inspect_synthetic_preset_dataset():
    doc = _inspect_json("--dataset", "hub-200k")
    assert doc["n_rows"] == 200_000 and doc["degree"]["max"] >= 30_000
    assert doc["source"]["generator"] == "hub-200k"


@pytest.mark.parametrize("suffix", [".npz", ".mtx"])
def test_gen_writes_the_generated_graph(tmp_path, suffix):
    out = tmp_path / f"g{suffix}"
    result = run_cli("gen", "power-law", "--param", "n=2000", "--param", "nnz=30000", "--param", "q50=8",
                     "--param", "q90=30", "--param", "q99=90", "--param", "max=400", "--seed", "7",
                     "--out", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == str(out)
    expected = generate("power-law", {"n": 2000, "nnz": 30000, "q50": 8, "q90": 30, "q99": 90, "max": 400},
                        seed=7)
    written = load_graph(path=out)
    np.testing.assert_array_equal(written.indptr, expected.indptr)
    np.testing.assert_array_equal(written.indices, expected.indices)
    np.testing.assert_allclose(written.values, expected.values, rtol=1e-6)
    assert not [p for p in tmp_path.iterdir() if p != out]  # no temporary left behind


def test_gen_output_has_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        assert run_cli("gen", "banded", "--param", "n=10", "--out", str(tmp_path / "g.npz")).exit_code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "g.npz").stat().st_mode & 0o777 == 0o644  # not the temporary file's 0600


def test_gen_preset_npz_readable_by_scipy(tmp_path):
    out = tmp_path / "er.npz"
    assert run_cli("gen", "er-200k", "--out", str(out)).exit_code == 0
    m = sp.load_npz(out)
    assert m.shape == (200_000, 200_000) and m.nnz == generate("er-200k").nnz


def test_gen_compressed_npz_is_smaller(tmp_path):
    plain, packed = tmp_path / "a.npz", tmp_path / "b.npz"
    assert run_cli("gen", "banded", "--param", "n=20000", "--param", "weighted=0", "--out", str(plain)).exit_code == 0
    assert run_cli("gen", "banded", "--param", "n=20000", "--param", "weighted=0", "--compress",
                   "--out", str(packed)).exit_code == 0
    assert packed.stat().st_size < plain.stat().st_size / 4
    assert load_graph(path=packed).fingerprint == load_graph(path=plain).fingerprint


def test_cli_help_imports_no_heavy_library():
    """`autosage --help` starts fast: the command modules import SciPy, pandas, matplotlib and CuPy
    only when a command needs them."""
    code = ("import sys; from autosage_cli.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = ('scipy', 'pandas', 'matplotlib', 'cupy')\n"
            "print('heavy:' + ','.join(m for m in heavy if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "Usage: autosage" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == "heavy:"


def test_gen_help_lists_presets_and_kinds():
    result = run_cli("gen", "--help")
    assert "reddit-like" in result.stdout and "power-law" in result.stdout


def test_info_without_gpu_says_so(monkeypatch):
    from autosage_cli import environment

    monkeypatch.setattr(environment, "gpu_status", lambda: (False, "no CUDA device visible"))
    result = run_cli("info")
    assert result.exit_code == 0
    assert "no CUDA device visible" in result.stdout and "numpy" in result.stdout
    doc = json.loads(run_cli("info", "--json").stdout)
    assert doc["device"] is None and doc["software"]["numpy"] == np.__version__
    assert set(doc) >= {"device", "software", "commit", "hostname", "timestamp"}


def test_info_with_a_device_renders_it(monkeypatch):
    from autosage_cli import environment

    fake = {"name": "NVIDIA H200", "compute_capability": "9.0", "sms": 132,
            "memory_bytes": 150_000_000_000, "l2_bytes": 62_914_560}
    monkeypatch.setattr(environment, "device_info", lambda device_id=0: fake)
    monkeypatch.setattr(environment, "gpu_status", lambda: (True, "ok"))
    monkeypatch.setattr(environment, "software_info", lambda: {"driver": "13.0", "cuda_runtime": "13.2",
                                                               "cupy": "14.2.0", "cusparse": "12600"})
    result = run_cli("info")
    assert result.exit_code == 0
    for word in ("NVIDIA H200", "9.0", "132", "60 MiB", "13.2", "12600"):
        assert word in result.stdout
    assert "no CUDA device" not in result.stdout


def test_autosage_alone_prints_the_help_and_succeeds():
    r = run_cli()
    assert r.exit_code == 0 and r.stdout.startswith("Usage: autosage")
    assert all(name in r.stdout for name in ("bench", "compile", "tune", "replay"))
