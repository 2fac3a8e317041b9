"""Canonical CSR: construction, validation, dtypes and the whole-content fingerprint."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.errors import AutosageError
from autosage_cli.graphs.csr import (FINGERPRINT_CHUNK, FINGERPRINT_VERSION, canonical_csr,
                                    fingerprint_arrays, from_arrays, validate)


def _graph():
    # Unsorted columns and a duplicate (0, 1) that must be summed.
    rows = np.array([0, 0, 0, 2, 2])
    cols = np.array([3, 1, 1, 0, 2])
    vals = np.array([1.0, 2.0, 0.5, 4.0, 5.0])
    return canonical_csr(sp.coo_matrix((vals, (rows, cols)), shape=(3, 4)), {"path": "/x"})


def test_canonical_sorts_sums_and_types():
    g = _graph()
    assert g.shape == (3, 4) and g.nnz == 4
    assert g.indptr.tolist() == [0, 2, 2, 4]
    assert g.indices.tolist() == [1, 3, 0, 2]
    assert g.values.tolist() == [2.5, 1.0, 4.0, 5.0]
    assert g.indptr.dtype == np.int32 and g.indices.dtype == np.int32 and g.values.dtype == np.float32
    assert g.row_degrees().tolist() == [2, 0, 2]
    assert g.source == {"path": "/x"}
    np.testing.assert_array_equal(g.to_scipy().toarray(), [[0, 2.5, 0, 1], [0, 0, 0, 0], [4, 0, 5, 0]])


def test_empty_graph_is_valid():
    g = canonical_csr(sp.csr_matrix((5, 7)))
    assert g.nnz == 0 and g.shape == (5, 7) and g.indptr.tolist() == [0] * 6


@pytest.mark.parametrize("indptr, indices, values, shape, message", [
    ([0, 1, 2], [0, 5], [1, 1], (2, 3), "out of range"),
    ([0, 1, 2], [0, -1], [1, 1], (2, 3), "out of range"),
    ([0, 2, 1], [0, 1], [1, 1], (2, 3), "indptr"),
    ([0, 1, 0], [], [], (2, 3), "not monotone"),
    ([0, 2, 2], [1, 0], [1, 1], (2, 3), "sorted and unique"),
    ([0, 2, 2], [1, 1], [1, 1], (2, 3), "sorted and unique"),
    ([0, 1, 2], [0, 1], [1, np.nan], (2, 3), "NaN or Inf"),
    ([0, 1, 2], [0, 1], [np.inf, 1], (2, 3), "NaN or Inf"),
    ([0, 1], [0], [1, 2], (1, 3), "values"),
    ([0, 1], [0], [1], (0, 3), "positive"),
    ([0, 1, 1], [0], [1], (1, 3), r"n_rows \+ 1"),
])
def test_from_arrays_rejects_non_canonical(indptr, indices, values, shape, message):
    with pytest.raises(AutosageError, match=message):
        from_arrays(np.array(indptr), np.array(indices, dtype=np.int64), np.array(values, dtype=float),
                    shape)


def test_adjacent_rows_may_repeat_a_column():
    # Row boundaries are not steps: column 2 ending row 0 and starting row 1 is fine.
    g = from_arrays([0, 2, 3], [1, 2, 2], [1, 1, 1], (2, 3))
    assert g.nnz == 3


def test_float32_overflow_is_caught():
    with pytest.raises(AutosageError, match="NaN or Inf"):
        canonical_csr(sp.csr_matrix(np.array([[1e300]])))


def test_fingerprint_covers_everything():
    base = _graph()
    fp = base.fingerprint
    assert fp == _graph().fingerprint and len(fp) == 40
    variants = [
        from_arrays(base.indptr, base.indices, base.values * np.float32(2), base.shape),  # a value
        from_arrays(base.indptr, [1, 3, 0, 3], base.values, base.shape),                # an index
        from_arrays([0, 1, 2, 4], [1, 3, 0, 2], base.values, base.shape),               # indptr
        from_arrays(base.indptr, base.indices, base.values, (3, 5)),                     # shape
    ]
    prints = {fp} | {v.fingerprint for v in variants}
    assert len(prints) == 1 + len(variants)


def test_fingerprint_sees_the_middle_of_big_arrays():
    # The seed hashed only the first and last 1024 entries; a change in the middle must show.
    n = 10_000
    indptr = np.arange(n + 1)
    indices = np.arange(n)
    values = np.ones(n)
    a = from_arrays(indptr, indices, values, (n, n))
    values[n // 2] = 2.0
    b = from_arrays(indptr, indices, values, (n, n))
    assert a.fingerprint != b.fingerprint


def test_validate_accepts_canonical_arrays():
    g = _graph()
    validate(g.indptr, g.indices, g.values, g.shape)  # does not raise


def test_wide_indices_are_checked_before_narrowing():
    with pytest.raises(AutosageError, match="out of range"):
        from_arrays([0, 1], np.array([2**32 + 1], dtype=np.int64), [1.0], (1, 3))


def _flip(arr, byte):
    out = arr.copy()
    out.view(np.uint8)[byte] ^= 1
    return out


def test_tree_fingerprint_sees_every_byte_and_the_shape():
    # A 64-byte chunk size makes each array several chunks with a partial last one, so a flipped
    # byte in the first, a middle and the very last chunk must each change the digest.
    rng = np.random.default_rng(1)
    arrays = (np.arange(41, dtype=np.int32), rng.integers(0, 40, 301).astype(np.int32),
              rng.random(301).astype(np.float32))
    assert all(a.nbytes % 64 and a.nbytes > 2 * 64 for a in arrays)

    def fp(arrs, shape=(40, 40)):
        return fingerprint_arrays(shape, arrs, chunk_bytes=64)

    base = fp(arrays)
    seen = {base}
    for i, arr in enumerate(arrays):
        for byte in (0, 1, 64 + 5, arr.nbytes // 2, arr.nbytes - 64, arr.nbytes - 1):
            changed = list(arrays)
            changed[i] = _flip(arr, byte)
            seen.add(fp(changed))
    seen |= {fp(arrays, (40, 41)), fp(arrays, (41, 40))}
    assert len(seen) == 1 + 3 * 6 + 2
    assert fp(arrays) == base  # the inputs were not modified


def test_tree_fingerprint_pins_dtypes_and_array_boundaries():
    a = np.arange(32, dtype=np.int32)
    b = np.arange(32, 64, dtype=np.int32)
    c = np.ones(8, dtype=np.float32)
    base = fingerprint_arrays((4, 4), (a, b, c), chunk_bytes=64)
    # The same bytes split differently between the arrays, or read as another dtype.
    both = np.concatenate([a, b])
    assert fingerprint_arrays((4, 4), (both[:16], both[16:], c), chunk_bytes=64) != base
    assert fingerprint_arrays((4, 4), (a, b, c.view(np.int32)), chunk_bytes=64) != base
    # An empty array is still an array of its own.
    empty = np.zeros(0, dtype=np.int32)
    assert fingerprint_arrays((4, 4), (a, empty, b), chunk_bytes=64) != \
        fingerprint_arrays((4, 4), (a, b, empty), chunk_bytes=64)


@pytest.mark.parametrize("chunk_bytes", [16, 64, 1000, FINGERPRINT_CHUNK])
def test_tree_fingerprint_ignores_the_worker_count(chunk_bytes):
    g = _graph()
    big = from_arrays(np.arange(2001), np.arange(2000), np.linspace(1, 2, 2000), (2000, 2000))
    for graph in (g, big):
        arrays = (graph.indptr, graph.indices, graph.values)
        prints = {fingerprint_arrays(graph.shape, arrays, chunk_bytes=chunk_bytes, workers=w)
                  for w in (None, 1, 2, 3, 8)}
        assert len(prints) == 1
    assert g.fingerprint == fingerprint_arrays(g.shape, (g.indptr, g.indices, g.values))
    assert FINGERPRINT_VERSION != "csr-blake2b-v1"  # the sequential hash: its cache keys must miss


def test_tree_fingerprint_rejects_a_bad_chunk_size():
    with pytest.raises(ValueError):
        fingerprint_arrays((1, 1), (np.zeros(2),), chunk_bytes=0)
