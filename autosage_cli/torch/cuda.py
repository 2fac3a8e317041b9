"""The CUDA path: torch tensors through autosage's tuned plans, zero-copy, on torch's stream.

Every operand is shared with CuPy through DLPack (no copy) and every output is allocated by torch
(its caching allocator), then written in place by the plan. CuPy runs on torch's current stream of
the tensors' device (a CuPy stream object wrapping torch's stream handle), so kernels, cuSPARSE and torch's own work are
ordered without any synchronisation.

Per Graph and device this module keeps (in `graph.gpu`): the device graph (a `DeviceGraph` whose
arrays are DLPack views of the Graph's own index tensors, so nothing is uploaded twice) and one
prepared plan per (op, width, heads, scale). Plans come from `api.prepare_plan`: a fixed schedule
from `graph.schedules`, else the decision cache, tuning on a miss (`graph.tune`, `graph.cache`).
Two device graphs may exist: "weighted" (the graph's weights: SpMM, which also takes per-call
values) and "pattern" (all ones: SDDMM and attention, whose kernels must not scale by weights).
A graph without weights has one.

Value types: float32, float16 and bfloat16 operands run plans of that type (the plan key carries
it): the kernels load and store the type and sum in float32, and outputs are allocated in it.
bfloat16 tensors reach CuPy as int16 DLPack views re-read as uint16 (CuPy has no bfloat16 type;
the kernels take the bit patterns). Per-call SpMM values are rounded to the operands' type, as the
kernels read edge values of the plan's type; the additive score's per-node terms (a_dst, a_src)
and its row statistics are float32 whatever the type (n x H numbers, read once per edge as scalars).
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..backends.packed import float_bits
from ..dtypes import DTYPES
from ..errors import AutosageError
from ..kernels import epilogues as epilogue_ops
from . import host, static_graph
from .graph import Graph

_ALIGN = 16  # bytes: the widest vector load a kernel may use
_streams: dict = {}


def _index(device: torch.device) -> int:
    """The device's ordinal (torch.device("cuda") has none: the current device's)."""
    return torch.cuda.current_device() if device.index is None else device.index


def _stream(device: torch.device):
    """A CuPy stream object for torch's current stream on `device`."""
    import cupy

    ptr = torch._C._cuda_getCurrentRawStream(_index(device))   # what current_stream() wraps, ~10x cheaper
    if ptr == 0:
        return cupy.cuda.Stream.null
    stream = _streams.get(ptr)
    if stream is None:
        stream = _streams[ptr] = _wrap_stream(ptr, _index(device))
    return stream


class _StreamHandle:
    """A raw stream handle as the CUDA stream protocol hands one over: (version 0, the handle)."""
    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def _wrap_stream(ptr: int, index: int):
    """A CuPy stream object for a stream CuPy does not own. CuPy 14 deprecates ExternalStream for
    Stream.from_external (the stream protocol), which takes the device that is current when it
    is called, and does not destroy the stream when the wrapper goes; CuPy 13 has only the first."""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is None:
        return cupy.cuda.ExternalStream(ptr, index)
    with cupy.cuda.Device(index):
        return from_external(_StreamHandle(ptr))


_devices: dict = {}


class _on_torch_stream:
    """`with _on_torch_stream(device):` CuPy work goes to torch's current stream on that device."""

    def __init__(self, device: torch.device):
        found = _devices.get(device.index)
        if found is None:
            import cupy

            found = _devices[device.index] = cupy.cuda.Device(device.index)
        self.device = found
        self.stream = _stream(device)

    def __enter__(self):
        self.device.__enter__()
        self.stream.__enter__()

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)
        return False


def release_pool() -> None:
    """Return the blocks CuPy's memory pool caches unused (plan buffers, tuning inputs) to the
    driver, where torch's allocator can have them."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


# The torch dtype of each value type, from its row (dtypes.DTYPES: torch_name).
VALUE_TYPES = {getattr(torch, t.torch_name): t.name for t in DTYPES.values()}


def dtype_name(t: torch.Tensor) -> str:
    """autosage's name of an operand's value type ("bfloat16"; `operand` has checked it)."""
    return VALUE_TYPES[t.dtype]


def operand(name: str, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A C-contiguous, 16-byte aligned tensor of an accepted value type, or of `dtype` (rounded
    to it) when given; copied only when it is not one already."""
    # No detach: the kernels read the memory by its pointer, and every caller runs without grad
    # (inside an autograd node's forward or backward, or below autograd), so a copy made here
    # records nothing; a detach per operand was host time on every call.
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if t.dtype not in VALUE_TYPES:
        raise AutosageError(f"{name}: the CUDA ops take {', '.join(VALUE_TYPES.values())}, "
                            f"got {str(t.dtype).replace('torch.', '')}")
    if not t.is_contiguous() or t.data_ptr() % _ALIGN:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


_CUPY_TYPES = {torch.float32: "float32", torch.float16: "float16", torch.int32: "int32", torch.int64: "int64",
               torch.bfloat16: "uint16",   # CuPy has no bfloat16: the bits, as uint16
               torch.uint8: "uint8"}       # masks (a bool tensor viewed as bytes)


def _cupy(t: torch.Tensor):
    """A CuPy view of a contiguous CUDA tensor, made from its pointer (the tensor is kept alive by
    the view): DLPack's hand-off took ~0.1 ms per operand on the H200 (a stream handshake per
    call), several times each op's launch."""
    import cupy

    memory = cupy.cuda.UnownedMemory(t.data_ptr(), t.numel() * t.element_size(), t, t.device.index)
    return cupy.ndarray(tuple(t.shape), _CUPY_TYPES[t.dtype], cupy.cuda.MemoryPointer(memory, 0))


def device_graph(graph: Graph, weighted: bool, device: torch.device):
    """The DeviceGraph of `graph` on `device` (weights, or the all-ones pattern), made once."""
    from ..backends.base import DeviceGraph
    from ..graphs.csr import index_dtype

    which = "weighted" if weighted and graph.weight is not None else "pattern"
    key = ("dgraph", which, device.index)
    if key not in graph.gpu:
        index = torch.int32 if index_dtype(graph.nnz, max(graph.shape)) == np.int32 else torch.int64
        rowptr = graph.on("rowptr", device).to(index).contiguous()
        col = graph.on("col", device).to(index).contiguous()
        values = (graph.on("weight", device).float().contiguous() if which == "weighted"
                  else torch.ones(graph.nnz, dtype=torch.float32, device=device))
        # the torch tensors stay referenced here: the CuPy views borrow their memory
        graph.gpu[key + ("tensors",)] = (rowptr, col, values)
        dgraph = DeviceGraph(host.HostOnDemand(graph, which == "weighted"), _cupy(rowptr), _cupy(col), _cupy(values))
        # known without looking: a pattern is all ones, and a Graph keeps weights only when they
        # are not (Graph.from_coo); the kernels skip reading values of a pattern
        dgraph.derived["values_all_ones"] = which == "pattern"
        graph.gpu[key] = dgraph
    return graph.gpu[key]


# How many capturable_plans blocks are open. A process-wide count, not a context variable: autograd
# runs a CUDA backward on its own device thread, which a context variable does not reach (a
# captured GCN step's backward met vendor plans that way on the H200).
_CAPTURABLE = [0]


@contextlib.contextmanager
def capturable_plans():
    """Plans made or met inside are native: a CUDA-graph capture records autosage's kernels, but
    CuPy refuses cuSPARSE calls while a stream captures, so a vendor plan is replaced by the kind's
    fastest verified native candidate (scheduler.decisions.kinds.native_decision). torch/capture.py runs its
    warm-up steps inside, so every plan exists, capturable, before the capture."""
    _CAPTURABLE[0] += 1
    try:
        yield
    finally:
        _CAPTURABLE[0] -= 1


def plan_key(op: str, k: int, device: torch.device, heads: int, scale, weighted: bool, dtype: str) -> tuple:
    """The key of a prepared plan in `graph.gpu`."""
    return ("plan", op, k, heads, scale, weighted, device.index, dtype)


def plan(graph: Graph, op: str, k: int, device: torch.device, *, heads: int = 1, scale=None,
         weighted: bool = False, dtype: str = "float32"):
    """The prepared plan for (op, k, heads, scale, dtype) on `graph`, made once: a fixed schedule
    from graph.schedules, else the decision for the graph's kind (scheduler/decisions/kinds.py: no probe,
    no copy of the graph for a kind already decided), tuning a new kind once. Inside
    `capturable_plans`, a native plan."""
    weighted = weighted and graph.weight is not None
    key = plan_key(op, k, device, heads, scale, weighted, dtype)
    found = graph.gpu.get(key)
    capturable = _CAPTURABLE[0] > 0
    if found is None or (capturable and found.backend != "native"):
        from ..backends.base import unsynchronized_prepare

        dgraph = device_graph(graph, weighted, device)
        if graph._static is not None and weighted and dtype != "float32":
            # converted by torch: in a captured step the memory must come from the capture's pool
            weights = graph.gpu[("dgraph", "weighted", device.index, "tensors")][2]
            dgraph.derived.setdefault(("values", dtype), _cupy(static_graph.weights_as(
                graph, weights, getattr(torch, DTYPES[dtype].torch_name))))
        with _on_torch_stream(device), unsynchronized_prepare():
            found = graph.gpu[key] = _prepare(graph, dgraph, (op, k, heads, dtype, weighted), scale,
                                              capturable)
    if found.backend != "native" and torch.cuda.is_current_stream_capturing():
        # a capture nobody prepared the plans for (torch.compile's reduce-overhead mode, a user's
        # torch.cuda.graph): CuPy's own refusal of the cuSPARSE call names neither the op nor the
        # way out
        raise AutosageError(f"{op} at width {k} on {graph.describe()} runs {found.schedule} (cuSPARSE), "
                            "which a CUDA graph cannot capture: run the warm-up before the capture "
                            "inside `with autosage_cli.torch.capturable_plans():` (its plans are then "
                            "native), or capture with autosage_cli.torch.capture_training_step")
    return found


def _own_host(graph: Graph) -> bool:
    """Whether the graph's host CSR is its own (a graph of every listing tunes on its coalesced
    graph's: kinds.decide then gives it the kind's decision for other graphs), nor is a static
    graph's (a captured step's: its stats are the first batch's, lent to every later batch)."""
    return graph._coalesced_ref is None and graph._static is None


def _prepare(graph: Graph, dgraph, question: tuple, scale, capturable: bool = False):
    from .. import api
    from ..ops.epilogue import fixed_schedule
    from ..scheduler.decisions import kinds

    op, k, heads, dtype, weighted = question
    fixed = fixed_schedule(op, graph.schedules)
    if fixed is not None or graph.nnz > kinds.KIND_MAX_NNZ:
        # a fixed schedule, or a graph large enough to be tuned as itself (by fingerprint)
        host = dgraph.host.csr()
        made = api.prepare_plan(host, dgraph, op, k, heads, schedule=fixed, scale=scale,
                                cache=graph.cache, tune=graph.tune, dtype=dtype)
        if capturable and made.backend != "native":
            raise AutosageError(f"{op} on {graph.describe()} runs {made.schedule}, which a CUDA graph "
                                f"cannot capture: fix a native schedule (Graph(schedules=...))")
        return made
    static = graph._static is not None
    decision = kinds.decide(graph.kind_features(), graph.structure_stats()["checksum"], question,
                            cache=graph.cache, tune=graph.tune, host_graph=dgraph.host.csr,
                            capturable=capturable, own_host=_own_host(graph), static=static)
    if decision is None and capturable:
        raise AutosageError(f"{op} at width {k} on {graph.describe()} has no verified native plan to "
                            f"capture (tuning off, or no native candidate passed verification)")
    if decision is None:
        return api.untuned_vendor_plan(dgraph, op, k, heads, scale, dtype)
    return _plan_of_decision(dgraph, decision, k, heads, scale, dtype, op, static)


# The latest plan made of each carried-over decision (by what it runs): the next graph of the kind
# gets its plan by `rebind` where the plan can (no per-graph preparation), else prepared as usual.
_LATEST: dict = {}


def _plan_of_decision(dgraph, decision, k: int, heads: int, scale, dtype: str, op: str = "spmm",
                      static: bool = False):
    from ..scheduler.decisions import kinds
    from ..scheduler.decisions.plans import plan_for

    if static:
        static_graph.refuse_in_capture(f"{op} plan {decision.get('schedule')}",
                                       decision.get("backend") == "native" and kinds.shape_only(decision))

    # the op too: a fused SpMM (spmm-bias-relu) runs SpMM's schedule names with other kernels
    key = (op, decision.get("backend"), decision.get("schedule"), k, heads, scale, dtype)
    latest = _LATEST.get(key)
    rebind = getattr(latest, "rebind", None)
    made = rebind(dgraph) if rebind is not None else None
    if made is None:
        made = plan_for(dgraph, decision, k, heads, scale, dtype=dtype, op=op)
    _LATEST[key] = made
    return made


def _packed_launches(p, device: torch.device, *args):
    """The plan's packed launches (backends.packed), for a native plan that packs; None: run the
    plan through CuPy. Packed on torch's stream: a first pack may convert the graph's values to the
    plan's type (CuPy work, which a launch on torch's stream must find done; a side stream is not
    ordered after CuPy's own)."""
    # Packed before: no CuPy context to enter (a few us a call, more on autograd's device thread).
    # The memo is stamped with the plan's id: a plan rebound to another graph is a copy of its
    # __dict__ (native_spmm's rebind), whose launches must not be the original's.
    stamp, packs = getattr(p, "__dict__", {}).get("_torch_packs", (None, None))
    if stamp == id(p) and args in packs:
        return packs[args]
    pack = getattr(p, "packed", None)
    if pack is None:
        return None
    with _on_torch_stream(device):
        made = pack(*args)
    if stamp != id(p):
        p.__dict__["_torch_packs"] = stamp, packs = id(p), {}
    packs[args] = made
    return made


def _launch_packed(launches, device: torch.device, pointers: dict) -> bool:
    """Launch on torch's current stream; False (nothing launched) when another device is current
    (the driver launches into the thread's current context)."""
    index = torch._C._cuda_getDevice()
    if launches is None or device.index not in (None, index):
        return False
    stream = torch._C._cuda_getCurrentRawStream(index)
    for launch in launches:
        launch.launch(stream, pointers)
    return True


def spmm(graph: Graph, values, B: torch.Tensor, epilogue=None, bias=None, scale: float = 1.0,
         alpha: float | None = None) -> torch.Tensor:
    """A(values) B, or with `epilogue` (a kernels/epilogues.py row) act(scale A(values) B + bias,
    alpha) in one launch: the plan of the fused op (ops/epilogue.py), its operands per call."""
    B = operand("B", B)
    k = int(B.shape[1])
    out = torch.empty((graph.n_rows, k), dtype=B.dtype, device=B.device)
    fused = epilogue is not None and epilogue.fused
    if graph.nnz == 0:   # no plan for an empty graph: zeros, through the epilogue
        out.zero_()
        return epilogue.apply(out, bias, scale, alpha, torch).to(B.dtype) if fused else out
    op = epilogue_ops.op_name(epilogue) if fused else "spmm"
    p = plan(graph, op, k, B.device, weighted=True, dtype=dtype_name(B))
    if values is not None:
        values = operand("values", values, B.dtype)
    pointers = {"B": B.data_ptr(), "out": out.data_ptr(), "values": 0 if values is None else values.data_ptr()}
    if fused:
        bias = operand("bias", bias, B.dtype) if epilogue.bias else None
        alpha = epilogue.alpha if alpha is None else alpha
        pointers.update(bias=0 if bias is None else bias.data_ptr(), scale=float_bits(scale), alpha=float_bits(alpha))
    if _launch_packed(_packed_launches(p, B.device, values is not None), B.device, pointers):
        return out
    with _on_torch_stream(B.device):
        if fused:
            p.run_fused(_cupy(B), _cupy(out), None if bias is None else _cupy(bias), scale, alpha,
                        None if values is None else _cupy(values))
        elif values is None:
            p.run((_cupy(B),), _cupy(out))
        else:
            run_values = getattr(p, "run_values", None)
            if run_values is None:
                raise AutosageError(f"SpMM plan {p.schedule} cannot take per-call edge values")
            run_values(_cupy(values), _cupy(B), _cupy(out))
    return out


def sddmm(graph: Graph, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    X, Y = operand("X", X), operand("Y", Y, X.dtype)
    out = torch.empty(graph.nnz, dtype=X.dtype, device=X.device)
    if graph.nnz == 0:
        return out
    p = plan(graph, "sddmm", int(X.shape[1]), X.device, dtype=dtype_name(X))
    pointers = {"X": X.data_ptr(), "Y": Y.data_ptr(), "out": out.data_ptr()}
    if _launch_packed(_packed_launches(p, X.device), X.device, pointers):
        return out
    with _on_torch_stream(X.device):
        p.run((_cupy(X), _cupy(Y)), _cupy(out))
    return out
