"""The one measurer: how autosage runs, verifies, times and compares plans, for the tuner's probe
(scheduler/probing/probe.py) and the benchmark (bench/harness.py) alike.

  GpuMeasurer        the GPU operations: device graphs, inputs, native and vendor plans (through
                     the op specs), a NaN-poisoned verification run, the float64 reference, the
                     relative error, CUDA-event timing. The benchmark's toolkit extends it; CPU
                     tests replace it with NumPy fakes of the same methods.
  compare            a verification run's output against the reference, with the dtype's
                     tolerance (`GpuMeasurer.run` makes that output: one launch, poisoned first).
  vendor_reference   THE reference rule: the first vendor output, in the op's vendor order, that
                     another vendor confirms within the dtype's tolerance (a lone vendor is
                     trusted); when none ran or none agree, the float64 reference decides. Every
                     vendor gets its error against the reference, and those beyond the tolerance
                     fail.
  best_vendor        the fastest vendor that verified (the first of equals, in vendor order).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ... import dtypes, ops as op_specs
from ...graphs.csr import CSRGraph


class GpuMeasurer:
    """The real measurements: the op specs' native and vendor plans, CUDA-event timing."""

    def to_device(self, graph: CSRGraph):
        from ...backends.base import DeviceGraph
        return DeviceGraph.from_host(graph)

    def device_features(self, dgraph):
        """The graph's features (without the exact symmetry check, as a tune's), their pass over
        the edges on the device when indptr and indices share a type."""
        from ...features import DiagonalSums, compute_features

        sums = None
        if dgraph.nnz and dgraph.indptr.dtype == dgraph.indices.dtype:
            from ...kernels import util
            sums = DiagonalSums(*util.diagonal_sums(dgraph.indptr, dgraph.indices, dgraph.n_rows))
        return compute_features(dgraph.host, symmetry=False, sums=sums)

    def vendor_names(self, op: str) -> list[str]:
        """The vendors a tune's guardrail measures (ops.guardrail_vendor_names); the benchmark's
        toolkit measures every vendor entry."""
        return op_specs.guardrail_vendor_names(op)

    def inputs(self, dgraph, op: str, k: int, heads: int, seed: int, dtype: str = dtypes.DEFAULT) -> tuple:
        """The op's random device inputs, made by the time this returns (the probe's inputs phase
        ends here, not in the first launch that waits for them)."""
        import cupy
        made = op_specs.make_inputs(op, dgraph, k, heads, seed, dtype)
        cupy.cuda.get_current_stream().synchronize()
        return made

    def prepare_native(self, dgraph, schedule, k: int, heads: int, scale=None, dtype: str = dtypes.DEFAULT,
                       **op):
        """`op`: {"op": name} for an op that runs another op's schedules (ops.native_options)."""
        return op_specs.prepare_native(dgraph, schedule, k, heads, scale, dtype, **op)

    def compile_native(self, dgraph, schedules, k: int, heads: int, dtype: str = dtypes.DEFAULT,
                       op: str | None = None) -> dict:
        """Build every candidate's kernels at once, in parallel: name -> (ms, error or None); those
        of `op`'s plans when it runs another op's schedules (ops.native_options)."""
        from ...backends import native
        ops = [op] if op else sorted({s.op for s in schedules})
        groups = {o: op_specs.get(o).helper_groups for o in ops}
        return native.compile_plans(dgraph, schedules, k, heads, dtype=dtype, helper_groups=groups,
                                    helper_ops=ops, refs_of=op_specs.kernel_refs_of(op))

    def prepare_vendor(self, dgraph, name: str, k: int, heads: int, scale=None, dtype: str = dtypes.DEFAULT):
        return op_specs.prepare_vendor(dgraph, name, k, heads, scale, dtype)

    def run(self, plan, inputs):
        """One launch into a NaN-poisoned output (so an untouched output cannot pass), synced."""
        return self.run_timed(plan, inputs)[0]

    def run_timed(self, plan, inputs) -> tuple:
        """`run`, and the CUDA-event ms of that one (cold) launch: (output, ms). The probe screens
        a vendor that is far behind on this launch alone (screen.COLD_SCREEN_RATIO)."""
        import cupy
        from ...backends import timing
        out = plan.alloc_out()
        timing.poison(out)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        plan.run(inputs, out)
        end.record()
        end.synchronize()
        return out, float(cupy.cuda.get_elapsed_time(start, end))

    def reference(self, op: str, dgraph, inputs, scale=None, dtype: str = dtypes.DEFAULT):
        """The float64 reference of the inputs as stored in `dtype`, on the device: the judge when
        the vendors cannot be. Computed on the device when it fits there (the op spec's
        device_reference: seconds on 100M edges), else by the host SciPy reference (minutes)."""
        import cupy
        on_device = op_specs.device_reference(op, dgraph, inputs, scale, dtype)
        if on_device is not None:
            return on_device
        return cupy.asarray(op_specs.reference(op, dgraph.host, [cupy.asnumpy(x) for x in inputs],
                                               scale=scale, dtype=dtype))

    def take_rows(self, array, perm):
        """array[perm] on the device: features and results moved with a graph's vertices (a
        reordering's perm[new] = old)."""
        import cupy
        return cupy.take(array, cupy.asarray(perm), axis=0)

    def rel_error(self, out, ref) -> float:
        from ...backends import timing
        return float(timing.rel_error(out, ref))

    def time(self, plan, inputs, out, repeat: int, warmup: int, max_ms: float | None = None,
             flush_l2: bool = False):
        """TimingStats of `repeat` launches after `warmup` (CUDA events around the launch only)."""
        from ...backends import timing
        return timing.time_plan(plan, inputs, out, repeat=repeat, warmup=warmup, max_ms=max_ms,
                                flush_l2=flush_l2)


def compare(measure, out, reference, tol: float) -> tuple[float, str | None]:
    """(rel. error, why it fails or None): a verification run's output against `reference`.
    NaN and infinite errors fail too."""
    error = measure.rel_error(out, reference)
    return error, None if error <= tol else f"mismatch rel_err={error:.2e}"


@dataclass
class ReferencePick:
    """The reference of one case: its output and name, and each vendor's error against it (and
    the reason of each that disagrees)."""
    output: object
    name: str
    errors: dict[str, float] = field(default_factory=dict)
    disagree: dict[str, str] = field(default_factory=dict)


def vendor_reference(measure, op: str, dgraph, inputs, outputs: dict, tol: float,
                     dtype: str = dtypes.DEFAULT) -> ReferencePick:
    """The reference rule (module docstring). `outputs` maps the vendors that ran, in the op's
    vendor order, to their outputs."""
    names = list(outputs)
    # In the narrow types vendors are less accurate than the bound our kernels meet (DType.narrow):
    # the float64 reference decides there, and a vendor fails only beyond the slack.
    exact = dtypes.info(dtype).narrow
    vendor_tol = tol * dtypes.vendor_slack(dtype)
    if not exact:
        for cand in names:
            others = [n for n in names if n != cand]
            errors = {n: measure.rel_error(outputs[n], outputs[cand]) for n in others}
            if others and not any(e <= tol for e in errors.values()):
                continue
            pick = ReferencePick(outputs[cand], cand, {cand: min(errors.values(), default=0.0), **errors})
            pick.disagree = {n: f"disagrees with {cand} rel_err={e:.2e}" for n, e in errors.items()
                             if not e <= tol}
            return pick
    why = ("no vendor ran" if not names else f"{dtype}: vendors round below the bound" if exact
           else "vendor algorithms disagree")
    name = f"float64 reference ({why})"
    pick = ReferencePick(measure.reference(op, dgraph, inputs, dtype=dtype), name)
    pick.errors = {n: measure.rel_error(outputs[n], pick.output) for n in names}
    pick.disagree = {n: f"disagrees with the {name} rel_err={e:.2e}" for n, e in pick.errors.items()
                     if not e <= vendor_tol}
    return pick


def best_vendor(items, ms):
    """The fastest of `items` by `ms(item)` (finite times only), the first of equals; None if none."""
    timed = [it for it in items if ms(it) is not None and ms(it) == ms(it) and ms(it) != float("inf")]
    return min(timed, key=ms, default=None)
