"""The edge-parallel SpMM families (vector, parreduce and stream, K <= 8) on the GPU: every width of every schedule's
band (test_native_gpu's widths miss K = 2, 6, 7, 8), and B / C views whose pointer or leading
dimension rule out the kernel's vector loads (it must fall back to scalar loads, not misread).
Shapes and the float64 reference are test_native_gpu's."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.backends.timing import poison, rel_error
from autosage_cli.kernels.schedule import Schedule, registry

from test_native_gpu import TOL, build_graphs, case, run_checked

pytestmark = pytest.mark.gpu

VECTOR = [s for s in registry("spmm") if s.family in ("vector", "parreduce", "stream")]


@pytest.fixture(scope="module")
def graphs():
    from autosage_cli.backends.base import DeviceGraph

    return {name: (csr, DeviceGraph.from_host(csr)) for name, csr in build_graphs().items()}


@pytest.mark.parametrize("schedule", VECTOR, ids=lambda s: s.name)
def test_every_width_of_the_band_matches_reference(schedule: Schedule, graphs):
    from autosage_cli import ops

    failures = []
    for k in range(schedule.tile // 2 + 1, schedule.tile + 1):
        for name, (csr, dgraph) in graphs.items():
            try:
                inputs, ref = case("spmm", name, csr, dgraph, k)
                plan = ops.prepare_native(dgraph, schedule, k)
                failures += [f"K={k} {name}: {p}" for p in run_checked(plan, inputs, ref)]
            except Exception as exc:  # report and go on
                failures.append(f"K={k} {name}: {type(exc).__name__}: {exc}")
    assert not failures, f"{schedule.name}:\n" + "\n".join(failures)


@pytest.mark.parametrize("schedule", [s for s in VECTOR if s.tile > 1], ids=lambda s: s.name)
def test_unaligned_and_strided_views_fall_back_to_scalar_loads(schedule: Schedule, graphs):
    import cupy

    from autosage_cli import ops

    k = schedule.tile
    failures = []
    for name in ("half_in_one_row", "pattern", "medium_power_law"):
        csr, dgraph = graphs[name]
        plan = ops.prepare_native(dgraph, schedule, k)
        rng = cupy.random.default_rng(11)
        vals = rng.uniform(-1, 1, csr.nnz, dtype=cupy.float32)
        a = sp.csr_matrix((vals.get().astype(np.float64), csr.indices, csr.indptr), shape=csr.shape)
        # (ldb, element offset of B's base): aligned and wider than K (vector loads), odd ld,
        # base shifted by one float (both scalar).
        for ldb, shift in ((3 * k, 0), (k + 1, 0), (k, 1), (2 * k + 1, 1)):
            buf = rng.uniform(-1, 1, csr.n_cols * ldb + shift, dtype=cupy.float32)
            B = buf[shift:].reshape(csr.n_cols, ldb)[:, :k]
            ldc = k + 3
            out = poison(cupy.empty((csr.n_rows, ldc), dtype=cupy.float32))
            plan.launch(vals, B, out[:, :k], ldb, ldc)
            err = rel_error(out[:, :k], a @ B.get().astype(np.float64))
            if not err < TOL:
                failures.append(f"{name} ldb={ldb} shift={shift}: rel error {err:.3g}")
            if not bool(cupy.isnan(out[:, k:]).all()):
                failures.append(f"{name} ldb={ldb} shift={shift}: wrote past column K")
    assert not failures, f"{schedule.name}:\n" + "\n".join(failures)
