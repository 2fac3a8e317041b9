"""Bad input of every kind gives one line `Error: …` naming the problem and exit code 2 — never a
traceback — through the real `autosage` entry point."""
from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from autosage_cli.graphs import ogb
from cli_helpers import assert_one_line_error as _assert_one_line_error, run_cli

DATASETS_DIR = Path(__file__).resolve().parent.parent / "datasets"
MM = "%%MatrixMarket matrix coordinate real general\n"


def _file(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return str(path)


def _truncated_gzip(tmp_path: Path) -> str:
    data = gzip.compress((MM + "3 3 3\n1 1 1\n2 2 2\n3 3 3\n").encode() * 1)
    return _file(tmp_path, "cut.mtx.gz", data[: len(data) // 2])


# (id, argv builder, words the message must contain)
CASES = [
    ("missing-file", lambda t: ["inspect", str(t / "nope.mtx")], ["no such file"]),
    ("directory", lambda t: ["inspect", str(t)], ["is a directory"]),
    ("unknown-extension", lambda t: ["inspect", _file(t, "g.xyz", "0 1\n")], ["unknown graph file extension"]),
    ("bad-banner", lambda t: ["inspect", _file(t, "b.mtx", "%%MatrixMarkt matrix coordinate real general\n2 2 1\n1 1 1\n")],
     ["not a valid Matrix Market file", "banner"]),
    ("truncated-entries", lambda t: ["inspect", _file(t, "t.mtx", MM + "3 3 3\n1 1 1.0\n2 2 2.0\n")], ["Truncated"]),
    ("truncated-gzip", lambda t: ["inspect", _truncated_gzip(t)], ["cut.mtx.gz"]),
    ("non-numeric-value", lambda t: ["inspect", _file(t, "n.mtx", MM + "2 2 1\n1 1 abc\n")], ["Invalid floating-point"]),
    ("non-numeric-index", lambda t: ["inspect", _file(t, "i.mtx", MM + "2 2 1\nx 1 1\n")], ["Invalid integer"]),
    ("index-out-of-range", lambda t: ["inspect", _file(t, "o.mtx", MM + "2 2 1\n3 1 1\n")], ["out of bounds"]),
    ("nan-value", lambda t: ["inspect", _file(t, "nan.mtx", MM + "2 2 1\n1 1 nan\n")], ["NaN or Inf"]),
    ("inf-value", lambda t: ["inspect", _file(t, "inf.mtx", MM + "2 2 1\n1 1 inf\n")], ["NaN or Inf"]),
    ("float32-overflow", lambda t: ["inspect", _file(t, "big.mtx", MM + "2 2 1\n1 1 1e300\n")], ["NaN or Inf"]),
    ("negative-dimensions", lambda t: ["inspect", _file(t, "neg.mtx", MM + "-2 2 0\n")], ["negative"]),
    ("zero-dimensions", lambda t: ["inspect", _file(t, "zero.mtx", MM + "0 0 0\n")], ["must be positive"]),
    ("complex-values", lambda t: ["inspect", _file(t, "c.mtx", "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 2\n")],
     ["complex"]),
    ("npz-not-sparse", lambda t: ["inspect", _dense_npz(t)], ["not a SciPy sparse .npz"]),
    ("npz-not-a-zip", lambda t: ["inspect", _file(t, "junk.npz", b"not a zip at all")], ["not a SciPy sparse .npz"]),
    # arrays SciPy would convert wrongly or whose indices its C++ trusts (an indptr that goes back
    # corrupted the heap and killed the process)
    ("npz-indptr-goes-back", lambda t: ["inspect", _npz(t, indptr=[0, 3, 2, 2])], ["non-decreasing"]),
    ("npz-bsr-indptr-goes-back", lambda t: ["inspect", _npz(t, "bsr", shape=[4, 4], indptr=[0, 2, 1],
                                                          indices=[0, 1], data=np.ones((2, 2, 2)))],
     ["non-decreasing"]),
    ("npz-float-indices", lambda t: ["inspect", _npz(t, indices=np.array([1.5, 0.0]))],
     ["indices array holds float64 values", "must be integers"]),
    ("npz-nan-indptr", lambda t: ["inspect", _npz(t, indptr=np.array([0, 1, np.nan, 2]))], ["indptr array holds float64"]),
    ("npz-nan-dia-offsets", lambda t: ["inspect", _npz(t, "dia", offsets=np.array([np.nan]), data=np.ones((1, 3)))],
     ["offsets array holds float64"]),
    ("npz-complex-values", lambda t: ["inspect", _npz(t, data=np.array([1 + 1j, 2]))], ["complex128", "real numbers"]),
    ("npz-text-values", lambda t: ["inspect", _npz(t, data=np.array(["a", "b"]))], ["data array holds str"]),
    ("npz-index-beyond-int64", lambda t: ["inspect", _npz(t, indices=np.array([1, 2**63], dtype=np.uint64))],
     ["indices must be >= 0"]),
    ("empty-edge-list", lambda t: ["inspect", _file(t, "e.txt", "# only comments\n")], ["no edges"]),
    ("edge-list-text", lambda t: ["inspect", _file(t, "w.txt", "0 1\n1 two\n")], ["non-numeric target id", "'two'", "edge 2"]),
    ("edge-list-negative", lambda t: ["inspect", _file(t, "m.txt", "0 1\n-3 1\n")], ["negative source id"]),
    # a float too large for int64: named as written, with no NumPy cast warning before the line
    ("edge-list-huge-negative", lambda t: ["inspect", _file(t, "h.txt", "1 -1e30\n")],
     ["negative target id -1e+30 in edge 1"]),
    ("edge-list-huge", lambda t: ["inspect", _file(t, "h.txt", "1 1e30\n")], ["target id 1e+30 in edge 1 is too large"]),
    ("edge-list-fraction", lambda t: ["inspect", _file(t, "f.txt", "0 1.5\n")], ["not an integer"]),
    ("edge-list-columns", lambda t: ["inspect", _file(t, "k.txt", "0 1 2 3\n")], ["expected 2 or 3 columns"]),
    ("edge-list-ragged", lambda t: ["inspect", _file(t, "r.txt", "0 1\n1 2 3\n")],
     ["cannot parse", "line 2 has 3 columns, the lines before it 2"]),
    ("edge-list-mixed-delimiters", lambda t: ["inspect", _file(t, "d.txt", "0,1\n1\t2\n")],
     ["line 2 has 2 columns, the lines before it 1", "spaces or tabs"]),
    ("edge-list-commas", lambda t: ["inspect", _file(t, "c.txt", "0,1\n1,2\n")], ["found 1", "spaces or tabs"]),
    ("unknown-dataset", lambda t: ["inspect", "--dataset", "no-such-graph"], ["unknown dataset", "cora"]),
    ("ogb-root-without-files", lambda t: ["inspect", "--dataset", "ogbn-products", "--root", str(t)],
     ["edge.csv.gz not found", "autosage[ogb]"]),
    ("reddit-root-without-files", lambda t: ["inspect", "--dataset", "reddit", "--root", str(t)], ["reddit_graph.npz"]),
    ("path-and-dataset", lambda t: ["inspect", str(DATASETS_DIR / "cora.mtx.gz"), "--dataset", "cora"], ["exactly one"]),
    ("symmetrize-non-square", lambda t: ["inspect", "--symmetrize", _file(t, "ns.mtx", MM + "2 3 1\n1 3 1\n")], ["non-square"]),
    ("gen-n-zero", lambda t: ["gen", "erdos-renyi", "--param", "n=0", "--param", "p=0.1", "--out", str(t / "g.npz")],
     ["n must be > 0"]),
    ("gen-n-negative", lambda t: ["gen", "uniform", "--param", "n=-4", "--param", "degree=1", "--out", str(t / "g.npz")],
     ["n must be > 0"]),
    ("gen-p-above-one", lambda t: ["gen", "erdos-renyi", "--param", "n=10", "--param", "p=1.5", "--out", str(t / "g.npz")],
     ["p must be in [0, 1]"]),
    ("gen-unknown-preset", lambda t: ["gen", "reddit-ish", "--out", str(t / "g.npz")], ["unknown preset or generator"]),
    ("gen-unknown-param", lambda t: ["gen", "er-200k", "--param", "density=3", "--out", str(t / "g.npz")],
     ["unknown parameter 'density'"]),
    ("gen-non-numeric-param", lambda t: ["gen", "er-200k", "--param", "p=lots", "--out", str(t / "g.npz")],
     ["must be a number"]),
    ("gen-malformed-param", lambda t: ["gen", "er-200k", "--param", "p", "--out", str(t / "g.npz")], ["NAME=VALUE"]),
    ("gen-missing-param", lambda t: ["gen", "uniform", "--param", "n=10", "--out", str(t / "g.npz")], ["needs parameter degree"]),
    ("gen-impossible-quantiles", lambda t: ["gen", "power-law", *_p(n=1000, nnz=900000, q50=5, q90=9, q99=20, max=50),
                                             "--out", str(t / "g.npz")], ["impossible"]),
    ("gen-unknown-extension", lambda t: ["gen", "er-200k", "--out", str(t / "g.csv")], ["unknown output extension"]),
    ("gen-missing-directory", lambda t: ["gen", "banded", "--param", "n=10", "--out", str(t / "no" / "g.npz")],
     ["does not exist"]),
    ("bench-negative-seed", lambda t: ["bench", "--dry-run", "--dataset", "cora", "--seed", "-1", "--out", str(t / "r")],
     ["--seed", "-1"]),
    ("plot-directory", lambda t: ["plot", str(t)], ["is a directory", "results.csv"]),
    ("gen-negative-seed", lambda t: ["gen", "banded", "--param", "n=10", "--seed", "-1", "--out", str(t / "g.npz")],
     ["seed"]),
]


def _p(**params):
    out = []
    for k, v in params.items():
        out += ["--param", f"{k}={v}"]
    return out


def _npz(tmp_path: Path, fmt: str = "csr", **members) -> str:
    """An .npz laid out as scipy.sparse.save_npz writes one: a 3x3 CSR with two entries unless
    `members` replace some arrays."""
    arrays = {"shape": [3, 3], "indptr": [0, 1, 2, 2], "indices": [1, 0], "data": [1.0, 2.0], **members}
    if fmt == "dia":
        arrays = {k: v for k, v in arrays.items() if k not in ("indptr", "indices")}
    path = tmp_path / f"{fmt}.npz"
    np.savez(path, format=np.array(fmt), **{k: np.asarray(v) for k, v in arrays.items()})
    return str(path)


def _dense_npz(tmp_path: Path) -> str:
    path = tmp_path / "dense.npz"
    np.savez(path, a=np.ones(3))
    return str(path)


# A warning would print before the `Error:` line outside pytest (which captures warnings): here it
# fails the case.
@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_error(case, tmp_path, monkeypatch):
    monkeypatch.setattr(ogb, "ogb_installed", lambda: False)  # as in CI: no ogb, so no download
    _, argv, words = case
    _assert_one_line_error(run_cli(*argv(tmp_path)), words)


# The commands that write a graph file: each refuses an output it cannot write in one line.
WRITERS = {"gen": lambda out: ["gen", "banded", "--param", "n=10", "--out", out],
           "reorder": lambda out: ["reorder", str(DATASETS_DIR / "cora.mtx.gz"), "--out", out]}


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root can write anywhere")
@pytest.mark.parametrize("command", WRITERS)
def test_unwritable_output_directory(tmp_path, command):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = run_cli(*WRITERS[command](str(locked / "g.npz")))
    finally:
        locked.chmod(0o700)
    _assert_one_line_error(result, ["cannot write"])


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs Linux sysfs")
@pytest.mark.parametrize("command", WRITERS)
def test_output_directory_nobody_may_write(command):
    # sysfs refuses new files even to root, so this runs where the chmod test above cannot.
    _assert_one_line_error(run_cli(*WRITERS[command]("/sys/g.npz")), ["cannot write"])


def test_output_path_that_is_a_directory(tmp_path):
    target = tmp_path / "taken.npz"
    target.mkdir()
    _assert_one_line_error(run_cli("gen", "banded", "--param", "n=10", "--out", str(target)), ["is a directory"])


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    import scipy.sparse as sp

    def explode(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sp, "save_npz", explode)
    out = tmp_path / "g.npz"
    _assert_one_line_error(run_cli("gen", "banded", "--param", "n=10", "--out", str(out)), ["No space left"])
    assert list(tmp_path.iterdir()) == []


def test_empty_graph_is_not_an_error(tmp_path):
    result = run_cli("inspect", _file(tmp_path, "empty.mtx", MM + "3 4 0\n"), "--json")
    assert result.exit_code == 0 and '"nnz": 0' in result.stdout


def test_at_least_fifteen_kinds():
    assert len(CASES) >= 15


# /proc refuses every new file, to root too, where os.access says root may write: each path a
# command writes is refused up front, before any work (gen would have generated the graph first).
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux procfs")
@pytest.mark.parametrize("argv, words", [
    (["gen", "banded", "--param", "n=10", "--out", "/proc/g.npz"], ["cannot write /proc/g.npz", "refuses new files"]),
    (["reorder", str(DATASETS_DIR / "cora.mtx.gz"), "--out", "/proc/g.npz"], ["cannot write /proc/g.npz"]),
    (["tune", str(DATASETS_DIR / "cora.mtx.gz"), "-k", "8", "--dry-run", "--cache", "/proc/autosage/d.json"],
     ["cache's directory /proc/autosage", "/proc refuses new files"]),
    (["bench", "--dry-run", "--dataset", "cora", "--ops", "spmm", "--widths", "8", "--out", "/proc/run"],
     ["--out /proc/run", "refuses new files"]),
], ids=["gen", "reorder", "tune-cache", "bench-out"])
def test_a_file_system_that_refuses_new_files_is_found_before_any_work(argv, words, monkeypatch):
    from autosage_cli.graphs import synthetic

    def never(*args, **kwargs):
        raise AssertionError("generated a graph for an output that cannot be written")

    monkeypatch.setattr(synthetic, "generate", never)
    _assert_one_line_error(run_cli(*argv), words)
