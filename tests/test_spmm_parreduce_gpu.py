"""The parreduce SpMM family on the GPU, on what its persistent groups must get right: a hub row
of more than 100k nonzeros (walked by a warp, or by a whole-warp group), many empty rows (written as
zeros), far more rows than resident groups (each group strides over many rows and prefetches the
next one's bounds), every K from 1 to 8 (unaligned ones included), and repeated launches of one
plan. Results against the float64 reference; outputs poisoned with NaN first."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.graphs.csr import canonical_csr
from autosage_cli.kernels.schedule import Schedule, registry

from test_native_gpu import case, run_checked

pytestmark = pytest.mark.gpu

PARREDUCE = [s for s in registry("spmm") if s.family == "parreduce"]
HUB_DEGREE = 120_000


def hub_and_empty_rows(seed: int = 3):
    """300k rows: ~35% empty, the rest 1-64 nonzeros, row 150_001 a hub of 120k nonzeros, rows
    10 and 299_999 of 3000 (heavy for every narrow group)."""
    rng = np.random.default_rng(seed)
    n, n_cols = 300_000, 200_000
    deg = np.where(rng.random(n) < 0.35, 0, rng.integers(1, 65, n))
    deg[[10, 150_001, 299_999]] = (3000, HUB_DEGREE, 3000)
    rows = np.repeat(np.arange(n), deg)
    cols = np.concatenate([rng.choice(n_cols, size=d, replace=False) if d > 64 else
                           rng.integers(0, n_cols, size=d) for d in deg])
    m = sp.csr_matrix((rng.uniform(-1.0, 1.0, rows.size), (rows, cols)), shape=(n, n_cols))
    return canonical_csr(m, {"generator": "hub_and_empty_rows"})


@pytest.fixture(scope="module")
def graph():
    from autosage_cli.backends.base import DeviceGraph

    csr = hub_and_empty_rows()
    assert csr.row_degrees().max() > 100_000 and (csr.row_degrees() == 0).sum() > 90_000
    return csr, DeviceGraph.from_host(csr)


@pytest.mark.parametrize("schedule", PARREDUCE, ids=lambda s: s.name)
def test_hub_empty_rows_and_every_width_of_the_band(schedule: Schedule, graph):
    from autosage_cli import ops

    csr, dgraph = graph
    failures = []
    for k in range(schedule.tile // 2 + 1, schedule.tile + 1):
        try:
            inputs, ref = case("spmm", "hub_and_empty_rows", csr, dgraph, k)
            plan = ops.prepare_native(dgraph, schedule, k)
            failures += [f"K={k}: {p}" for p in run_checked(plan, inputs, ref)]
        except Exception as exc:  # report and go on
            failures.append(f"K={k}: {type(exc).__name__}: {exc}")
    assert not failures, f"{schedule.name}:\n" + "\n".join(failures)


@pytest.mark.parametrize("lanes", (8, 32))
def test_grid_holds_only_resident_blocks_and_groups_stride_over_many_rows(lanes, graph):
    from autosage_cli import ops
    from autosage_cli.backends.native_spmm import resident_blocks

    csr, dgraph = graph
    s = next(s for s in PARREDUCE if s.lanes == lanes and s.tile == 2)
    plan = ops.prepare_native(dgraph, s, 2)
    [(_, grid, block, _, _, _)] = plan.launches
    assert grid[0] <= resident_blocks(plan.kernel, s.threads)
    assert grid[0] * block[0] // lanes < csr.n_rows // 4    # every group takes several rows
    inputs, ref = case("spmm", "hub_and_empty_rows", csr, dgraph, 2)
    for _ in range(3):    # run_checked runs twice; more launches of one plan stay right
        assert not run_checked(plan, inputs, ref)


def test_all_ones_values_and_a_graph_smaller_than_one_block(graph):
    from autosage_cli import ops
    from autosage_cli.backends.base import DeviceGraph

    rng = np.random.default_rng(9)
    tiny = sp.random(5, 7, density=0.5, random_state=rng, data_rvs=np.ones, format="csr")
    csr = canonical_csr(tiny, {"generator": "tiny-pattern"})
    dgraph = DeviceGraph.from_host(csr)
    for s in PARREDUCE:
        k = s.tile
        inputs, ref = case("spmm", "tiny-pattern", csr, dgraph, k)
        plan = ops.prepare_native(dgraph, s, k)
        assert plan.values_all_ones
        assert not run_checked(plan, inputs, ref), s.name
