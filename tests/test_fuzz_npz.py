"""Property-based tests of the .npz reader: damaged archives (bytes cut, flipped) and archives whose
arrays are wrong (huge or negative shapes, lengths that disagree, NaN, float or text indices, unknown
formats) through the real `autosage inspect`: a correct graph or one `Error:` line, exit code 2,
within the test's memory budget."""
from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from autosage_cli.graphs.csr import validate
from autosage_cli.graphs.load import load_graph
from cli_helpers import run_cli
from fuzz_helpers import HALF_SETTINGS, PeakMemory, assert_clean, inspected, mutate, mutations
from fuzz_helpers import memory_budget  # noqa: F401  (autouse: the fuzzed commands' budget)

BASE = sp.csr_matrix(np.array([[0, 1.5, 0, 2], [0, 0, 0, 0], [3, 0, -1, 0]], dtype=np.float64))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-npz")


def _saved(matrix, compressed: bool) -> bytes:
    buffer = io.BytesIO()
    sp.save_npz(buffer, matrix, compressed=compressed)
    return buffer.getvalue()


def _inspect_and_check(path: str) -> None:
    with PeakMemory() as peak:
        result = peak.check(lambda: run_cli("inspect", path, "--json"))
    assert_clean(result)
    doc = inspected(result)
    if doc is not None:
        graph = load_graph(path=path)
        validate(graph.indptr, graph.indices, graph.values, graph.shape)
        assert np.isfinite(graph.values).all()
        assert (doc["n_rows"], doc["n_cols"], doc["nnz"]) == (graph.n_rows, graph.n_cols, graph.nnz)


@HALF_SETTINGS   # two tests: 2000 examples of the .npz format in all
@given(layout=st.sampled_from(["csr", "coo", "csc"]), compressed=st.booleans(), steps=mutations)
def test_damaged_npz_archive(workdir, layout, compressed, steps):
    data = mutate(_saved(BASE.asformat(layout), compressed), steps)
    path = workdir / "g.npz"
    path.write_bytes(data)
    _inspect_and_check(str(path))


numbers = st.one_of(st.integers(-3, 8), st.sampled_from([2**31, 2**31 - 1, 10**9, 10**12, -2**40]))
values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5))
arrays = st.one_of(
    st.lists(numbers, min_size=0, max_size=8).map(lambda v: np.array(v, dtype=np.int64)),
    st.lists(numbers, min_size=0, max_size=8).map(lambda v: np.array(v, dtype=np.int32 if all(
        abs(x) < 2**31 for x in v) else np.int64)),
    st.lists(values, min_size=0, max_size=8).map(lambda v: np.array(v, dtype=np.float64)),
    st.lists(st.text(max_size=3), min_size=0, max_size=4).map(np.array),
    st.just(np.zeros((2, 2), dtype=np.int32)),
)


@HALF_SETTINGS   # two tests: 2000 examples of the .npz format in all
@given(fmt=st.sampled_from(["csr", "csc", "coo", "bsr", "dia", "xyz", ""]),
       shape=st.one_of(st.tuples(numbers, numbers).map(lambda s: np.array(s)),
                       st.lists(numbers, max_size=3).map(np.array)),
       members=st.fixed_dictionaries({}, optional={name: arrays for name in
                                                   ("indptr", "indices", "data", "row", "col", "offsets")}),
       compressed=st.booleans())
def test_npz_with_wrong_arrays(workdir, fmt, shape, members, compressed):
    path = workdir / "arrays.npz"
    save = np.savez_compressed if compressed else np.savez
    save(path, format=np.array(fmt), shape=shape, **members)
    _inspect_and_check(str(path))
