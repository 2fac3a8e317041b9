"""The op specs and the measurer on the GPU: for every op, inputs of the spec's shapes and dtype, a
native and every vendor plan prepared through the spec with outputs of the spec's shape, verified
against the spec's float64 reference with the dtype's tolerance; and the one reference rule on
real vendor outputs."""
from __future__ import annotations

import pytest

from autosage_cli import dtypes, ops
from autosage_cli.kernels.schedule import candidates
from autosage_cli.scheduler.probing.measure import GpuMeasurer, best_vendor, compare, vendor_reference

from scheduler_fakes import small_graph

pytestmark = pytest.mark.gpu

CASES = [("spmm", 16, 1), ("sddmm", 16, 1), ("attention", 16, 2)]


@pytest.fixture(scope="module")
def measure():
    return GpuMeasurer()


@pytest.fixture(scope="module")
def dgraph(measure):
    return measure.to_device(small_graph(n=400, seed=3))


@pytest.mark.parametrize("op,k,heads", CASES)
def test_plans_through_the_spec_match_its_shapes_and_reference(measure, dgraph, op, k, heads):
    spec = ops.get(op)
    inputs = measure.inputs(dgraph, op, k, heads, seed=1, dtype="float32")
    assert [tuple(x.shape) for x in inputs] == spec.input_shapes(dgraph, k, heads)
    assert all(str(x.dtype) == "float32" for x in inputs)
    reference = measure.reference(op, dgraph, inputs)
    tol = dtypes.tolerance("float32")
    schedule = candidates(op, k, heads)[0]
    plans = [measure.prepare_native(dgraph, schedule, k, heads, None, "float32")]
    plans += [measure.prepare_vendor(dgraph, name, k, heads, None, "float32") for name in spec.vendor_names()]
    for plan in plans:
        assert plan.dtype == "float32"
        out = measure.run(plan, inputs)
        assert tuple(out.shape) == spec.output_shape(dgraph, k, heads)
        error, failure = compare(measure, out, reference, tol)
        assert failure is None, (plan.backend, plan.schedule, error)


@pytest.mark.parametrize("op,k,heads", CASES)
def test_the_reference_rule_on_real_vendors(measure, dgraph, op, k, heads):
    inputs = measure.inputs(dgraph, op, k, heads, seed=2)
    names = ops.vendor_names(op)
    outputs = {n: measure.run(measure.prepare_vendor(dgraph, n, k, heads), inputs) for n in names}
    pick = vendor_reference(measure, op, dgraph, inputs, outputs, dtypes.tolerance("float32"))
    # every vendor agrees here, so the reference is the first in vendor order
    assert pick.name == names[0] and not pick.disagree
    assert set(pick.errors) == set(names)
    times = {n: measure.time(measure.prepare_vendor(dgraph, n, k, heads), inputs, outputs[n], 3, 1).median_ms
             for n in names}
    assert best_vendor(names, times.get) == min(names, key=times.get)
