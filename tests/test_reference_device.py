"""The device float64 reference (backends/reference_device.py) is the host reference's arithmetic:
run here through NumPy on a CPU, it matches backends/reference.py on graphs with empty rows, a hub
row and several heads, in every dtype (inputs as stored, A's values rounded to the type). The CuPy
run of the same code is checked against the host in tests/test_reference_device_gpu.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.backends import reference, reference_device
from autosage_cli.dtypes import to_storage
from autosage_cli.graphs.csr import canonical_csr


def graph():
    m = sp.random(40, 30, density=0.15, random_state=2, format="lil", dtype=np.float32)
    m[3, :] = np.linspace(0.5, 1.5, 30)     # a hub row
    m[::7, :] = 0                            # empty rows
    return canonical_csr(m.tocsr())


def host_dgraph(csr):
    """A DeviceGraph's fields, on the host."""
    return SimpleNamespace(indptr=csr.indptr, indices=csr.indices, values=csr.values.astype(np.float32),
                           n_rows=csr.n_rows, n_cols=csr.n_cols, nnz=csr.nnz)


def stored(shape, dtype, seed):
    return to_storage(np.random.default_rng(seed).uniform(-2, 2, shape), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op,shapes,scale", [
    ("spmm", lambda g: [(g.n_cols, 5)], None),
    ("sddmm", lambda g: [(g.n_rows, 6), (g.n_cols, 6)], None),
    ("attention", lambda g: [(g.n_rows, 3, 4), (g.n_cols, 3, 4), (g.n_cols, 3, 4)], None),
    ("attention", lambda g: [(g.n_rows, 1, 8), (g.n_cols, 1, 8), (g.n_cols, 1, 8)], 0.7),
])
def test_the_device_arithmetic_is_the_host_reference(dtype, op, shapes, scale):
    csr = graph()
    inputs = [stored(s, dtype, i) for i, s in enumerate(shapes(csr))]
    host = getattr(reference, f"{op}_reference")(csr, inputs, scale, dtype=dtype)
    mine = getattr(reference_device, op)(host_dgraph(csr), inputs, scale, dtype, np)
    assert mine.shape == host.shape and mine.dtype == np.float64
    np.testing.assert_allclose(mine, host, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("heads,d,slope", [(3, 4, 0.2), (1, 8, 0.05)])
def test_the_additive_device_arithmetic_is_the_host_reference(dtype, heads, d, slope):
    csr = graph()
    rng = np.random.default_rng(heads)
    a_dst = rng.uniform(-2, 2, (csr.n_rows, heads)).astype(np.float32)   # float32 in every dtype
    a_src = rng.uniform(-2, 2, (csr.n_cols, heads)).astype(np.float32)
    inputs = [a_dst, a_src, stored((csr.n_cols, heads, d), dtype, 5)]
    host = reference.additive_reference(csr, inputs, slope, dtype)
    mine = reference_device.additive(host_dgraph(csr), inputs, None, dtype, np, negative_slope=slope)
    assert mine.shape == host.shape == (csr.n_rows, heads, d) and mine.dtype == np.float64
    np.testing.assert_allclose(mine, host, rtol=1e-12, atol=1e-12)
    assert not mine[::7].any() and mine[3].any()   # the empty rows, the hub row


def test_a_graph_without_edges_gives_zeros():
    csr = canonical_csr(sp.csr_matrix((5, 4), dtype=np.float32))
    q = stored((5, 2, 3), "float32", 0)
    out = reference_device.attention(host_dgraph(csr), [q, q[:4], q[:4]], None, "float32", np)
    assert out.shape == (5, 2, 3) and not out.any()


def test_the_memory_estimate_counts_inputs_edges_and_chunks():
    dg = SimpleNamespace(nnz=1000)
    inputs = [np.empty((10, 2, 4)), np.empty((20, 2, 4))]
    got = reference_device.device_bytes(dg, inputs, out_elements=80, per_edge=3)
    assert got == 8 * (80 + 160 + 80 + 5 * 1000 + 3 * reference_device._CHUNK_ELEMENTS)
