"""The op registry: one spec per op (`spmm`, `sddmm`, `attention`, `attention-additive`, then SpMM
with each fused epilogue: `spmm-bias`, `spmm-relu`, `spmm-bias-relu`, `spmm-scale`, ops/epilogue.py),
in a fixed order, and the entry points every layer above uses instead of testing an op's name.

  get(op), names(), require_dtype(op, dtype), supported_dtypes(ops), check_heads(op, heads),
  case_tolerance(op, dtype, k, max_degree)                     the verification bound
  input_shapes / output_shape / make_inputs(op, graph, k, heads, seed, dtype)
  reference(op, csr, inputs, scale=None, **options)          the float64 result
  vendor_names(op), guardrail_vendor_names(op), vendor_op(name), untuned_vendor(op),
  prepare_vendor(dgraph, name, k, heads, scale, dtype)
  prepare_native(dgraph, schedule, k, heads, scale, dtype, op=None, **options)
  candidates(op, k, heads, dtype), runs_schedule(op, schedule), native_options(op),
  kernel_refs_of(op), instantiations(ops, dtype)              an op's schedules and their kernels
  compulsory_bytes / gather_bytes / device_bytes              cost model and memory hooks
  registered(spec)                                            a spec added for one block (tests)

Every layer above reads the op list from here (`names()`: the CLI's op choices, the benchmark's
cases, the compile command, the warm-up), so a new op is its spec module and one entry in `SPECS`.
A spec that brings its kernel families (`OpSpec.families`) has them registered with the schedule
registry (kernels.schedule.register_op) here, once.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from .. import budget, dtypes as dtype_table
from ..dtypes import DTYPES
from ..errors import AutosageError
from ..kernels import schedule as schedule_registry
from . import additive, attention, epilogue, sddmm, spmm
from .case import Case  # noqa: F401  (the tuner's case value)
from .spec import OpSpec

SPECS: dict[str, OpSpec] = {s.name: s for s in (spmm.SPEC, sddmm.SPEC, attention.SPEC, additive.SPEC,
                                                *epilogue.SPECS)}
DEFAULT_DTYPE = dtype_table.DEFAULT


def _register_families(spec: OpSpec) -> None:
    if spec.families is not None and spec.name not in schedule_registry.known_ops():
        schedule_registry.register_op(spec.name, dict(spec.families))


for _spec in SPECS.values():
    _register_families(_spec)


@contextlib.contextmanager
def registered(spec: OpSpec) -> Iterator[OpSpec]:
    """`spec` in the registry (and its families in the schedule registry) for the length of a
    block, as if it had its entry in SPECS: used by tests to show that an op needs nothing else."""
    if spec.name in SPECS:
        raise ValueError(f"op {spec.name!r} exists already")
    SPECS[spec.name] = spec
    try:
        _register_families(spec)
        yield spec
    finally:
        SPECS.pop(spec.name, None)
        schedule_registry.unregister_op(spec.name)


def names() -> tuple[str, ...]:
    return tuple(SPECS)


def get(op: str) -> OpSpec:
    try:
        return SPECS[op]
    except (KeyError, TypeError):
        raise AutosageError(f"unknown op {op!r}; choose one of {', '.join(SPECS)}") from None


def require_dtype(op: str, dtype: str) -> str:
    return get(op).require_dtype(dtype)


def check_graph_values(op: str, graph, dtype: str, label: str = "the graph") -> None:
    """A one-line error before any GPU work when `op` reads the graph's values and one of them is
    beyond what `dtype` can hold (bcsstk16's stiffness entries reach 2.1e9; float16 stops at 65504)."""
    if get(op).reads_values:
        dtype_table.check_range(graph.values, dtype, label)


def supported_dtypes(ops=None) -> tuple[str, ...]:
    """The dtypes at least one of `ops` (default: every op) accepts, in table order."""
    wanted = [get(op) for op in (ops or SPECS)]
    return tuple(d for d in DTYPES if any(d in spec.dtypes for spec in wanted))


def check_heads(op: str, heads: int) -> None:
    """One head, unless the op takes several (attention)."""
    if int(heads) < 1:
        raise AutosageError(f"--heads must be >= 1, got {heads}")
    if not get(op).multi_head and int(heads) != 1:
        multi = " / ".join(s.name for s in SPECS.values() if s.multi_head)
        raise AutosageError(f"--heads applies to --op {multi} only (got {heads} with {op})")


# ------------------------------------------------------------------ operands and references

def case_tolerance(op: str, dtype: str, k: int, max_degree: int) -> float:
    """The verification bound of `op` at width k in `dtype` on a graph whose longest row has
    max_degree edges (docs/MEASUREMENT.md)."""
    return get(op).tolerance(dtype, k, max_degree)


def input_shapes(op: str, graph, k: int, heads: int = 1) -> list[tuple[int, ...]]:
    return get(op).input_shapes(graph, k, heads)


def output_shape(op: str, graph, k: int, heads: int = 1) -> tuple[int, ...]:
    return get(op).output_shape(graph, k, heads)


def make_inputs(op: str, dgraph, k: int, heads: int = 1, seed: int = 0, dtype: str = DEFAULT_DTYPE) -> tuple:
    """Random (never zero) device inputs of `op`, uniform in [-1, 1), of `dtype` (or of the
    spec's `operand_dtypes` for `dtype`)."""
    from ..backends.base import random_inputs
    kinds = get(op).operand_dtypes
    return random_inputs(input_shapes(op, dgraph, k, heads), seed, dtype,
                         operand_dtypes=kinds(dtype) if kinds else None)


def reference(op: str, csr, inputs, scale: float | None = None, **options):
    """The float64 result of `op` on `csr` and the dense `inputs` (NumPy or CuPy)."""
    return get(op).reference(csr, inputs, scale, **options)


def device_reference(op: str, dgraph, inputs, scale: float | None = None, dtype: str = DEFAULT_DTYPE):
    """The float64 result of `op` computed on the device from CuPy `inputs` stored as `dtype`, or
    None when the op has no device reference or it does not fit in device memory."""
    compute = get(op).device_reference
    return None if compute is None else compute(dgraph, inputs, scale, dtype)


# ------------------------------------------------------------------ plans

def vendor_names(op: str) -> list[str]:
    """The vendor entries of `op`, in a stable order. Imports no GPU library."""
    return list(get(op).vendor_names())


def guardrail_vendor_names(op: str) -> list[str]:
    """The vendor entries a tune measures its candidates against (the guardrail's bar): the op's
    `guardrail_vendor_names` where it names fewer, else every vendor entry. Imports no GPU library."""
    spec = get(op)
    return list((spec.guardrail_vendor_names or spec.vendor_names)())


def vendor_op(name: str) -> str | None:
    """The op a vendor name belongs to, or None if it is not a vendor name."""
    return next((spec.name for spec in SPECS.values() if spec.is_vendor(name)), None)


def untuned_vendor(op: str) -> str:
    """The vendor entry used when tuning is off and nothing is cached: the op's default vendor
    entry, else its first."""
    spec = get(op)
    names = spec.vendor_names()
    if not names:
        raise AutosageError(f"no vendor algorithm for {op} and tuning is off")
    return spec.default_vendor if spec.default_vendor in names else names[0]


def prepare_vendor(dgraph, name: str, k: int, heads: int = 1, scale: float | None = None,
                   dtype: str = DEFAULT_DTYPE):
    """Prepare one vendor entry on a device graph for `dtype` operands (descriptors, buffers,
    checks), outside any timed region; plan.prepare_ms records how long it took."""
    op = vendor_op(name)
    if op is None:
        raise AutosageError(f"unknown vendor backend {name!r}")
    check_heads(op, heads)
    require_dtype(op, dtype)
    return get(op).prepare_vendor(dgraph, name, k, heads, scale, dtype)


def prepare_native(dgraph, schedule, k: int, heads: int = 1, scale: float | None = None,
                   dtype: str = DEFAULT_DTYPE, op: str | None = None, **options):
    """A native plan of `schedule` (a Schedule or a registered name) for `dtype` operands: the one
    way to a native plan. `op` is the op it runs when that is not the schedule's own (an op with
    `schedules_of`: the additive score on an attention schedule). The schedule's reason not to run
    (k, heads, dtype) is asked here, once, before anything is compiled, and refused with it; then
    the spec's own `prepare_native` (the plan module of its op) prepares it."""
    schedule = schedule_registry.get(schedule) if isinstance(schedule, str) else schedule
    spec = get(op or schedule.op)
    spec.require_dtype(dtype)
    if spec.prepare_native is None:
        raise AutosageError(f"no native backend for op {spec.name!r}")
    reason = runs_schedule(spec.name, schedule) or schedule.supports(k, heads, dtype)
    if reason:
        raise AutosageError(f"{schedule.name} cannot run K={k}: {reason}")
    return spec.prepare_native(dgraph, schedule, k, heads, scale, dtype=dtype, **options)


def runs_schedule(op: str, schedule) -> str | None:
    """None when `op` runs `schedule`: one of its own space, or, for an op with `schedules_of`, one
    of that op's whose family has the op's kernel variant; else the reason it does not."""
    spec = get(op)
    if spec.schedules_of is None:
        return None if schedule.op == op else f"{schedule.name} is a schedule of {schedule.op}, not {op}"
    family = schedule_registry.family_of(schedule.family) if schedule_registry.is_family(schedule.family) else None
    if schedule.op != spec.schedules_of or family is None or family.variant(spec.variant) is None:
        having = [name for name, f in schedule_registry.FAMILIES.items()
                  if f.op == spec.schedules_of and f.variant(spec.variant)]
        return f"{op} runs the {spec.schedules_of} families {', '.join(having)} only"
    return None


def candidates(op: str, k: int, heads: int = 1, dtype: str = DEFAULT_DTYPE) -> tuple:
    """The schedules `op` can run at width k with `heads` in `dtype`, in registry order: its own
    space's (kernels.schedule.candidates), or those of the op it borrows from that it runs."""
    spec = get(op)
    pool = schedule_registry.candidates(spec.schedules_of or op, k, heads, dtype)
    return tuple(s for s in pool if runs_schedule(op, s) is None)


def native_options(op: str | None) -> dict:
    """What a measurer's `prepare_native` / `compile_native` needs besides the schedule to make a
    plan of `op`: the op itself when it runs another op's schedules, else nothing (the schedule
    names its op)."""
    return {"op": op} if op is not None and get(op).schedules_of is not None else {}


def kernel_refs_of(op: str | None):
    """(schedule, k, index, dtype) -> the KernelRefs a plan of `op` on the schedule launches, for an
    op with its own kernel variant; None: the schedule's own (backends.native.kernel_refs)."""
    spec = get(op) if op is not None else None
    if spec is None or spec.variant_kernels is None:
        return None
    c_type = dtype_table.c_type
    return lambda schedule, k, index="int", dtype=DEFAULT_DTYPE: spec.variant_kernels(
        schedule, c_type(dtype), index)


def instantiations(ops, dtype: str = DEFAULT_DTYPE, index: str = "int") -> list:
    """Every kernel instantiation the plans of `ops` may launch in `dtype`, one module each: the
    schedule registry's for ops with their own space (kernels.compile.instantiations), and for an
    op with a kernel variant, that variant's over every schedule it runs."""
    from ..kernels import compile as kcompile

    own = [op for op in ops if get(op).schedules_of is None]
    refs = kcompile.instantiations(own, dtype, index) if own else []
    for op in ops:
        spec = get(op)
        if spec.schedules_of is not None:
            pool = [s for s in schedule_registry.registry(spec.schedules_of) if runs_schedule(op, s) is None
                    and dtype_table.vector_bytes_fit(s.vec, dtype) is None]
            refs += [r for s in pool for r in spec.variant_kernels(s, dtype_table.c_type(dtype), index)]
    return list(dict.fromkeys(refs))


def tune_groups(op: str, dtype: str, index: str = "int") -> tuple[str, ...]:
    """The helper-kernel groups a tune of `op` in `dtype` launches (kernels/util.tune_groups with
    the spec's own `helper_groups`)."""
    from ..kernels import util
    return util.tune_groups(op, dtype, index, get(op).helper_groups)


def tune_modules(op: str, dtype: str, index: str = "int"):
    """The modules of `tune_groups(op, dtype, index)`."""
    from ..kernels import util
    return util.tune_modules(op, dtype, index, get(op).helper_groups)


# ------------------------------------------------------------------ bytes

def compulsory_bytes(op: str, n_rows: int, n_cols: int, nnz: int, k: int, heads: int = 1,
                     index_bytes: int = 4, dtype: str = DEFAULT_DTYPE) -> int:
    return get(op).compulsory_bytes(n_rows, n_cols, nnz, k, heads, index_bytes, dtype)


def gather_bytes(op: str, nnz: int, k: int, heads: int = 1, dtype: str = DEFAULT_DTYPE) -> int:
    return get(op).gather_bytes(nnz, k, heads, dtype)


def device_bytes(op: str, n_rows: int, n_cols: int, nnz: int, k: int, heads: int = 1,
                 dtype: str = DEFAULT_DTYPE) -> int:
    """GPU bytes one benchmark or tuning case holds at its peak (budget.case_device_bytes)."""
    inputs, output, per_edge = get(op).dense_elements(n_rows, n_cols, nnz, k, heads)
    return budget.case_device_bytes(n_rows, n_cols, nnz, inputs, output, per_edge, dtype)
