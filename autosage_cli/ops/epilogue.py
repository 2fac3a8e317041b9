"""SpMM with an epilogue: out = act(scale * A @ B + bias), one op per fused row of
kernels/epilogues.py ("spmm-bias", "spmm-relu", "spmm-bias-relu", "spmm-scale"), each a decision
of its own: the op is part of the question (the cache key, the kinds of scheduler/decisions/kinds.py),
so a fused decision never replaces SpMM's, and SpMM's keys are what they were.

Operands: B (n_cols x K), then the row's (`Epilogue.operands`: a bias of K), all in the op's dtype.
The scale is the plans' per-call scalar (`scale`, 1 in a probe), not part of the key, as
attention's is not: the same instructions and bytes run for every value.

Its schedules are SpMM's (`schedules_of`), every family having the epilogue as a kernel variant
(kernels/spmm_families.py: each applies it where a row's final value is stored), its kernels each
schedule's with the epilogue's template argument (`variant_kernels`). Its vendors are SpMM's,
named `<vendor>+<epilogue>` (so a decision names which op's vendor plan to make): the vendor's
product, then the epilogue as a launch of its own (backends/spmm_epilogue.py), so the guardrail
compares whole results and times both launches. The reference is SpMM's float64 reference, then
the row's `apply`.
"""
from __future__ import annotations

from dataclasses import replace

from .. import dtypes
from ..backends import native_spmm, spmm_epilogue
from ..errors import AutosageError
from ..kernels import epilogues
from ..kernels.compile import KernelRef
from ..kernels.schedule import family_of
from . import spmm

SEPARATOR = "+"


def vendor_name(base: str, epilogue: epilogues.Epilogue) -> str:
    return f"{base}{SEPARATOR}{epilogue.name}"


def base_vendor(name: str, epilogue: epilogues.Epilogue) -> str | None:
    """The SpMM vendor of a fused op's vendor name, or None when it is not one of that op's."""
    base, sep, suffix = name.rpartition(SEPARATOR)
    return base if sep and suffix == epilogue.name and spmm.SPEC.is_vendor(base) else None


def kernel_refs(epilogue: epilogues.Epilogue):
    def refs(schedule, dtype: str = "float", index: str = "int") -> tuple[KernelRef, ...]:
        return tuple(KernelRef(schedule.source_file, epilogues.expression(e, epilogue))
                     for e in family_of(schedule.family).kernels(schedule, dtype, index))
    return refs


def _spec(epilogue: epilogues.Epilogue):
    name = epilogues.op_name(epilogue)
    base = spmm.SPEC

    def input_shapes(graph, k: int, heads: int = 1):
        return base.input_shapes(graph, k, heads) + [(k,)] * len(epilogue.operands)

    def prepare_native(dgraph, schedule, k, heads=1, scale=None, dtype=dtypes.DEFAULT, **options):
        return native_spmm.prepare(dgraph, schedule, k, heads, scale, dtype, epilogue=epilogue.name, **options)

    def prepare_vendor(dgraph, vendor: str, k, heads=1, scale=None, dtype=dtypes.DEFAULT):
        inner = base_vendor(vendor, epilogue)
        if inner is None:
            raise AutosageError(f"{vendor!r} is not a vendor of {name}")
        return spmm_epilogue.VendorEpiloguePlan(base.prepare_vendor(dgraph, inner, k, heads, None, dtype),
                                                epilogue, scale)

    def reference(csr, inputs, scale=None, dtype: str = dtypes.DEFAULT, **options):
        product = base.reference(csr, inputs[:1], None, dtype=dtype, **options)
        return spmm_epilogue.host_reference(epilogue, product, inputs[1:], scale, dtype)

    def device_reference(dgraph, inputs, scale=None, dtype: str = dtypes.DEFAULT):
        product = base.device_reference(dgraph, inputs[:1], None, dtype)
        return spmm_epilogue.device_reference(epilogue, product, inputs[1:], scale, dtype)

    def vendors(names):
        return lambda: [vendor_name(v, epilogue) for v in names()]

    return replace(
        base, name=name, operands=base.operands + epilogue.operands, input_shapes=input_shapes,
        reference=reference, device_reference=device_reference,
        prepare_native=prepare_native, prepare_vendor=prepare_vendor,
        vendor_names=vendors(base.vendor_names),
        is_vendor=lambda vendor: base_vendor(vendor, epilogue) is not None,
        guardrail_vendor_names=vendors(base.guardrail_vendor_names) if base.guardrail_vendor_names else None,
        default_vendor=vendor_name(base.default_vendor, epilogue) if base.default_vendor else None,
        baselines=(), schedules_of=base.name, variant=epilogue.name,
        variant_kernels=kernel_refs(epilogue),
        vendor_kernels=lambda dtype: (KernelRef(epilogues.VENDOR_FILE,
                                                epilogues.vendor_expression(dtypes.c_type(dtype), epilogue)),))


SPECS = tuple(_spec(e) for e in epilogues.FUSED)


def fixed_schedule(op: str, schedules: dict) -> str | None:
    """The schedule fixed for `op` in a Graph's `schedules`: its own entry, else, for a fused SpMM,
    SpMM's (the same native schedule with the epilogue, or its vendor followed by the epilogue)."""
    own = schedules.get(op)
    fused = next((e for e in epilogues.FUSED if epilogues.op_name(e) == op), None)
    if own is not None or fused is None:
        return own
    base = schedules.get(spmm.SPEC.name)
    return vendor_name(base, fused) if base is not None and spmm.SPEC.is_vendor(base) else base
