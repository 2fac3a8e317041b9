"""The stream SpMM family on the GPU, on what its edge windows must get right: a hub row spread
over a hundred windows (its partials combined by the last window to finish), rows that end exactly
on a window edge or fill one window exactly, runs of empty rows (written as zeros), a graph without
nonzeros, repeated launches of one plan and bitwise equal results from run to run (the crossing
rows' partials are summed in window order, never by atomics).
Results against the float64 reference; outputs poisoned with NaN first."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.backends.timing import poison
from autosage_cli.graphs.csr import canonical_csr
from autosage_cli.kernels.schedule import Schedule, registry

from test_native_gpu import case, run_checked
from test_spmm_parreduce_gpu import hub_and_empty_rows

pytestmark = pytest.mark.gpu

STREAM = [s for s in registry("spmm") if s.family == "stream"]


def window_edge_rows(seed: int = 5):
    """Rows whose lengths are every stream schedule's window (threads x unroll) and one more or
    less, twice the window, and runs of empty rows between them: row ends fall on window edges."""
    rng = np.random.default_rng(seed)
    widths = sorted({s.threads * s.unroll for s in STREAM})
    deg = []
    for w in widths:
        deg += [w, w, 0, 0, w - 1, 1, 2 * w, 0, w + 1, 3]
    deg = np.asarray(deg * 3, dtype=np.int64)
    n_cols = 50_000
    rows = np.repeat(np.arange(deg.size), deg)
    cols = rng.integers(0, n_cols, rows.size)
    m = sp.csr_matrix((rng.uniform(-1.0, 1.0, rows.size), (rows, cols)), shape=(deg.size, n_cols))
    m.sum_duplicates()
    return canonical_csr(m, {"generator": "window_edge_rows"})


@pytest.fixture(scope="module")
def graphs():
    from autosage_cli.backends.base import DeviceGraph

    out = {}
    for name, csr in (("hub_and_empty_rows", hub_and_empty_rows()), ("window_edge_rows", window_edge_rows())):
        out[name] = (csr, DeviceGraph.from_host(csr))
    return out


@pytest.mark.parametrize("schedule", STREAM, ids=lambda s: s.name)
def test_hub_window_edges_and_every_width_of_the_band(schedule: Schedule, graphs):
    from autosage_cli import ops

    failures = []
    for name, (csr, dgraph) in graphs.items():
        for k in range(schedule.tile // 2 + 1, schedule.tile + 1):
            try:
                inputs, ref = case("spmm", name, csr, dgraph, k)
                plan = ops.prepare_native(dgraph, schedule, k)
                failures += [f"{name} K={k}: {p}" for p in run_checked(plan, inputs, ref)]
                if len(plan.launches) != 2:
                    failures.append(f"{name} K={k}: {len(plan.launches)} launches, expected the "
                                    "windows and the crossing rows")
            except Exception as exc:  # report and go on
                failures.append(f"{name} K={k}: {type(exc).__name__}: {exc}")
    assert not failures, f"{schedule.name}:\n" + "\n".join(failures)


@pytest.mark.parametrize("schedule", [s for s in STREAM if s.unroll == min(t.unroll for t in STREAM)],
                         ids=lambda s: s.name)
def test_results_are_bitwise_equal_from_run_to_run(schedule: Schedule, graphs):
    import cupy

    from autosage_cli import ops

    csr, dgraph = graphs["hub_and_empty_rows"]
    assert csr.row_degrees().max() > 100 * schedule.threads * schedule.unroll
    k = schedule.tile
    inputs, _ = case("spmm", "hub_and_empty_rows", csr, dgraph, k)
    plan = ops.prepare_native(dgraph, schedule, k)
    outs = []
    for _ in range(4):
        out = poison(plan.alloc_out())
        plan.run(inputs, out)
        outs.append(out)
    cupy.cuda.get_current_stream().synchronize()
    for out in outs[1:]:
        assert bool((out.view(cupy.uint32) == outs[0].view(cupy.uint32)).all())


def test_a_graph_without_nonzeros_is_all_zeros():
    import cupy

    from autosage_cli import ops
    from autosage_cli.backends.base import DeviceGraph

    csr = canonical_csr(sp.csr_matrix((3000, 40), dtype=np.float64), {"generator": "no-edges"})
    dgraph = DeviceGraph.from_host(csr)
    for s in STREAM:
        k = s.tile
        plan = ops.prepare_native(dgraph, s, k)
        out = poison(plan.alloc_out())
        plan.run((cupy.ones((40, k), dtype=cupy.float32),), out)
        assert bool((out == 0).all()), s.name
