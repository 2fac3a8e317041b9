"""Property-based tests: mutated Matrix Market files and edge lists (plain and gzip) through the real
`autosage inspect` entry point give a correct graph or one `Error:` line with exit code 2, within the
test's memory budget (fuzz_helpers says what "mutated" and "clean" mean)."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autosage_cli.graphs.csr import validate
from autosage_cli.graphs.load import load_graph
from cli_helpers import run_cli
from fuzz_helpers import FUZZ_SETTINGS, PeakMemory, assert_clean, inspected, mutate, mutations
from fuzz_helpers import memory_budget  # noqa: F401  (autouse: the fuzzed commands' budget)

MTX_BASES = {
    "real-general": "%%MatrixMarket matrix coordinate real general\n% a comment\n4 5 6\n"
                    "1 1 1.5\n2 3 -2\n4 5 0.25\n3 1 7\n1 1 2\n4 2 1e-3\n",
    "pattern-symmetric": "%%MatrixMarket matrix coordinate pattern symmetric\n5 5 4\n2 1\n3 3\n5 2\n4 1\n",
    "integer-skew": "%%MatrixMarket matrix coordinate integer skew-symmetric\n4 4 3\n2 1 3\n4 3 -1\n3 1 9\n",
    "real-hermitian": "%%MatrixMarket matrix coordinate real hermitian\n3 3 2\n2 1 0.5\n3 3 1\n",
}
EDGE_BASES = {
    "pattern": "# a SNAP-style header\n0 1\n1 2\n2 0\n3 1\n1 2\n",
    "weighted": "0 1 0.5\n1 2 2\n2 0 -1.25\n0 1 1\n# done\n",
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-text")


def _write(workdir, name: str, text: bytes, compress: bool, damage) -> str:
    path = workdir / (name + (".gz" if compress else ""))
    data = gzip.compress(text, mtime=0) if compress else text
    if compress and damage:
        data = mutate(data, damage)      # a damaged gzip stream, not only damaged text
    path.write_bytes(data)
    return str(path)


def _check_graph(path: str, doc: dict, max_n: int | None = None, max_nnz: int | None = None) -> None:
    graph = load_graph(path=path)
    validate(graph.indptr, graph.indices, graph.values, graph.shape)
    assert np.isfinite(graph.values).all()
    assert (doc["n_rows"], doc["n_cols"], doc["nnz"]) == (graph.n_rows, graph.n_cols, graph.nnz)
    if max_nnz is not None:
        assert graph.nnz <= max_nnz
    if max_n is not None:
        assert graph.n_rows <= max_n


def _inspect_mutated(workdir, name: str, text: bytes, compress: bool, damage):
    """Write the mutated file, `inspect` it under the memory check, assert a clean outcome:
    (path, the inspected document or None when it was refused with one Error: line)."""
    path = _write(workdir, name, text, compress, damage)
    with PeakMemory() as peak:
        result = peak.check(lambda: run_cli("inspect", path, "--json"))
    assert_clean(result)
    return path, inspected(result)


def _declared_entries(text: bytes) -> int | None:
    lines = [ln for ln in text.split(b"\n")[1:] if ln.strip() and not ln.lstrip().startswith(b"%")]
    try:
        return int(lines[0].split()[2])
    except (IndexError, ValueError):
        return None


@FUZZ_SETTINGS
@given(base=st.sampled_from(sorted(MTX_BASES)), steps=mutations, compress=st.booleans(),
       damage=st.one_of(st.none(), mutations))
def test_mutated_matrix_market(workdir, base, steps, compress, damage):
    text = mutate(MTX_BASES[base].encode(), steps)
    path, doc = _inspect_mutated(workdir, "g.mtx", text, compress, damage)
    if doc is not None:
        entries = _declared_entries(gzip.decompress(open(path, "rb").read()) if compress else text)
        _check_graph(path, doc, max_nnz=None if entries is None else 2 * entries)


@FUZZ_SETTINGS
@given(base=st.sampled_from(sorted(EDGE_BASES)), steps=mutations, compress=st.booleans(),
       damage=st.one_of(st.none(), mutations))
def test_mutated_edge_list(workdir, base, steps, compress, damage):
    text = mutate(EDGE_BASES[base].encode(), steps)
    path, doc = _inspect_mutated(workdir, "g.txt", text, compress, damage)
    if doc is not None:
        _check_graph(path, doc, max_nnz=text.count(b"\n") + 1)
