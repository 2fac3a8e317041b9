"""The float64 reference on the device (backends/reference_device.py through the measurer) against
the host SciPy reference, for every op and dtype; and the host fallback when it would not fit."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli import ops
from autosage_cli.backends import reference_device
from autosage_cli.graphs.csr import canonical_csr
from autosage_cli.scheduler.probing.measure import GpuMeasurer

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def dgraph():
    from autosage_cli.backends.base import DeviceGraph

    m = sp.random(500, 400, density=0.03, random_state=4, format="lil", dtype=np.float32)
    m[9, :] = np.linspace(0.5, 1.5, 400)   # a hub row
    m[::11, :] = 0                          # empty rows
    return DeviceGraph.from_host(canonical_csr(m.tocsr()))


def _host(op, dgraph, inputs, scale, dtype):
    return ops.reference(op, dgraph.host, [x.get() for x in inputs], scale=scale, dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op,k,heads,scale", [("spmm", 33, 1, None), ("sddmm", 24, 1, None),
                                               ("attention", 16, 4, None), ("attention", 64, 1, 0.3),
                                               # a warp per (row, head): d below, across and above
                                               # the warp's 32 lanes
                                               ("attention", 1, 2, None), ("attention", 33, 3, None),
                                               ("attention", 100, 1, None),
                                               # the GAT score: one scalar per edge, d across lanes
                                               ("attention-additive", 8, 8, None),
                                               ("attention-additive", 33, 3, None),
                                               ("attention-additive", 1, 2, None)])
def test_the_device_reference_is_the_host_reference(dgraph, dtype, op, k, heads, scale):
    inputs = ops.make_inputs(op, dgraph, k, heads, seed=3, dtype=dtype)
    got = ops.device_reference(op, dgraph, inputs, scale, dtype)   # None would be the host fallback
    assert got is not None and type(got).__module__.startswith("cupy") and str(got.dtype) == "float64"
    host = _host(op, dgraph, inputs, scale, dtype)
    np.testing.assert_allclose(got.get(), host, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(GpuMeasurer().reference(op, dgraph, inputs, scale, dtype).get(), host,
                               rtol=1e-11, atol=1e-11)


def test_the_host_reference_when_the_device_cannot_hold_it(dgraph, monkeypatch):
    from autosage_cli.backends import memory

    inputs = ops.make_inputs("attention", dgraph, 16, 2, seed=1, dtype="bfloat16")
    monkeypatch.setattr(memory, "device_free_bytes", lambda: 1 << 20)
    assert ops.device_reference("attention", dgraph, inputs, None, "bfloat16") is None
    got = GpuMeasurer().reference("attention", dgraph, inputs, None, "bfloat16")
    np.testing.assert_allclose(got.get(), _host("attention", dgraph, inputs, None, "bfloat16"), rtol=1e-12)
    assert reference_device.device_bytes(dgraph, inputs, 10, 3) > 1 << 20


@pytest.mark.parametrize("op", ["attention", "attention-additive"])
def test_the_attention_reference_walks_a_grid_smaller_than_its_warps(dgraph, monkeypatch, op):
    """One block of 8 warps strides over all (row, head) pairs: the same bits as a warp each."""
    from autosage_cli.kernels import util

    inputs = ops.make_inputs(op, dgraph, 40, 3, seed=5, dtype="bfloat16")
    full = ops.device_reference(op, dgraph, inputs, None, "bfloat16").get()
    monkeypatch.setattr(util, "MAX_BLOCKS", 1)
    strided = ops.device_reference(op, dgraph, inputs, None, "bfloat16").get()
    np.testing.assert_array_equal(strided, full)
    assert np.abs(full).sum() > 0
