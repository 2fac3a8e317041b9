"""The Python API: `spmm`, `sddmm`, `attention` on GPU arrays, with the schedule chosen for you.

    C = autosage_cli.spmm(A, B)                    # tuned on first use, cached on disk
    S = autosage_cli.sddmm(A, X, Y, schedule="cusparse-sddmm")
    O = autosage_cli.attention(A, Q, K, V, scale=None, schedule="attention.fused...")

A: a `CSRGraph`, any SciPy sparse matrix (canonicalised: duplicates summed, columns sorted) or a
`cupyx.scipy.sparse.csr_matrix` (copied to the host and canonicalised). Passing a CSRGraph is
cheapest for repeated calls: its fingerprint is computed once. Dense inputs: CuPy arrays or anything
with `__dlpack__` on a CUDA device (torch tensors), C-contiguous, row-major, all of one dtype the op
accepts (its spec's `dtypes`: float32, float16, bfloat16); the plan, the cache key and the tuning
follow it. The 2-byte types load and store 2 bytes and sum in float32. float16: CuPy float16 arrays
or torch.float16 tensors. bfloat16: torch.bfloat16 tensors (read in place through their data
pointer: CuPy has no bfloat16 type), or CuPy uint16 arrays holding bfloat16 bit patterns, which
need `dtype="bfloat16"` (a uint16 array without it is refused: it could be anything). `dtype`,
when given, must be every input's type; it never converts. Host arrays are refused in every type.
The result is in the inputs' type; a bfloat16 result is a uint16 CuPy array of bit patterns
(`torch.from_dlpack(out).view(torch.bfloat16)` makes it a tensor without a copy):
  spmm       B (n_cols, K)                       -> (n_rows, K)
  sddmm      X (n_rows, K), Y (n_cols, K)        -> (nnz,)   in the graph's canonical edge order
  attention  Q (n_rows, H, d), K, V (n_cols, H, d) -> (n_rows, H, d)
`schedule`: a native schedule name (`kernels.schedule.get`), a vendor name (`vendor_names(op)`,
e.g. "cusparse-alg2"), or None: look the input up in the decision cache and tune on a miss
(`scheduler.tune.lookup_or_tune`; `cache` is a path or a `cache.DecisionCache`, None the default
file; `tune=False` never probes: a cached decision or else the default vendor entry,
cusparse-default / cusparse-sddmm / vendor-unfused-default, or the first other vendor entry
that runs the dtype when it refuses it). The result is a new CuPy array.

Device graphs and prepared plans are memoized in a small LRU keyed by (fingerprint, op, K, heads,
schedule, scale), so repeated calls do not prepare again; `clear_memo()` frees them.
"""
from __future__ import annotations

import math
import sys
import threading
from collections import OrderedDict

from . import dtypes, ops as op_specs
from .errors import AutosageError, one_line
from .graphs.csr import CSRGraph, canonical_csr

_GRAPH_SLOTS = 2
_PLAN_SLOTS = 8
_lock = threading.Lock()
_graphs: OrderedDict = OrderedDict()   # fingerprint -> DeviceGraph
_plans: OrderedDict = OrderedDict()    # (fingerprint, op, k, heads, schedule, scale, cache) -> Plan

# DLPack device types (dlpack.h): CUDA, CUDA host (pinned), CUDA managed.
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_MANAGED = 1, 2, 13


# ---------------------------------------------------------------------------------------- graph
def as_graph(A) -> CSRGraph:
    """A canonical CSRGraph from the accepted sparse inputs (no GPU needed for SciPy/CSRGraph)."""
    if isinstance(A, CSRGraph):
        return A
    import scipy.sparse as sp

    if sp.issparse(A):
        return canonical_csr(A, {"api": type(A).__name__})
    module = type(A).__module__ or ""
    if module.startswith("cupyx.scipy.sparse"):
        if getattr(A, "format", None) != "csr":
            raise AutosageError(f"expected a cupyx csr_matrix, got {type(A).__name__} "
                                f"(format {getattr(A, 'format', '?')}); convert it with .tocsr()")
        return canonical_csr(A.get(), {"api": "cupyx.scipy.sparse.csr_matrix"})
    raise AutosageError(f"A must be a CSRGraph, a SciPy sparse matrix or a cupyx csr_matrix, "
                        f"got {type(A).__name__}")


# ---------------------------------------------------------------------------------------- dense
def _dtype_name(x) -> str:
    return str(getattr(x, "dtype", "?")).replace("torch.", "")


def _has(x, attribute: str) -> bool:
    """hasattr that also survives a property raising something other than AttributeError (a torch
    tensor that requires grad raises RuntimeError for __cuda_array_interface__)."""
    try:
        return hasattr(x, attribute)
    except Exception:
        return True


def _element_type(name: str, x, dtype: str | None) -> str:
    """The element type `x` holds: its own dtype name, except that an array in the storage of a
    type kept as bit patterns (bfloat16's uint16: `DType.bit_patterns`) holds that type when (and
    only when) the caller names it."""
    own = _dtype_name(x)
    stored = dtypes.of_storage(own) if own in _STORAGES else None
    if stored is not None and stored.bit_patterns:
        if dtype != stored.name:
            plain = "/".join(t.name for t in dtypes.DTYPES.values() if not t.bit_patterns)
            raise AutosageError(f'{name}: a {own} array is read as {stored.name} bit patterns only with '
                                f'dtype="{stored.name}" (CuPy has no {stored.name} type); pass it, or give '
                                f'{plain} values')
        return stored.name
    if dtype is not None and own != dtype:
        raise AutosageError(f"{name}: dtype {own} is not the dtype={dtype!r} asked for; "
                            f"convert it first (autosage never converts inputs)")
    return own


def check_dense(name: str, x, shape: tuple, op: str, dtype: str | None = None) -> str:
    """Validate a dense input before touching the GPU: type, device, shape, and a dtype `op`
    accepts, which is returned (`dtype`: the caller's declared type, see `_element_type`).
    `shape` entries of None match any size (and must be >= 1)."""
    if not (_has(x, "__cuda_array_interface__") or _has(x, "__dlpack__")):
        raise AutosageError(f"{name}: expected a CUDA array (CuPy, or a tensor with __dlpack__), "
                            f"got {type(x).__name__}")
    if _has(x, "__dlpack_device__") and not _has(x, "__cuda_array_interface__"):
        device_type = int(x.__dlpack_device__()[0])
        if device_type not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
            where = "host" if device_type == _DLPACK_CPU else f"DLPack device type {device_type}"
            raise AutosageError(f"{name}: expected a CUDA array, got a {where} "
                                f"{type(x).__module__.split('.')[0]}.{type(x).__name__}")
    got = tuple(int(s) for s in getattr(x, "shape", ()))
    want_dims = len(shape)
    if len(got) != want_dims or any(w is not None and g != w for g, w in zip(got, shape)):
        pretty = "(" + ", ".join("*" if w is None else str(w) for w in shape) + ")"
        raise AutosageError(f"{name}: expected shape {pretty}, got {got}")
    if any(g < 1 for g in got[1:]):
        raise AutosageError(f"{name}: feature dimensions must be >= 1, got shape {got}")
    element = _element_type(name, x, dtype)
    supported = op_specs.get(op).dtypes
    if element not in supported:
        raise AutosageError(f"{name}: dtype {element} is not supported for {op}; autosage takes "
                            f"{', '.join(supported)} (convert with .astype / .to)")
    return element


def _check_dtype_argument(dtype, op: str) -> str | None:
    """The `dtype` argument as a name (a string, a NumPy or torch dtype, a NumPy scalar type),
    checked."""
    if dtype is None:
        return None
    spelled = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", None) or str(dtype)
    name = dtypes.info(spelled.replace("torch.", "")).name
    return dtypes.require(name, op_specs.get(op).dtypes, op)


def common_dtype(named_dtypes) -> str:
    """The one dtype of all inputs [(name, dtype)]; mixed dtypes are refused."""
    (first, dtype), *rest = named_dtypes
    for name, other in rest:
        if other != dtype:
            raise AutosageError(f"{name}: dtype {other} differs from {first}'s {dtype}; "
                                f"give every input the same dtype")
    return dtype


_STORAGES = frozenset(t.storage for t in dtypes.DTYPES.values())


def _bits_view(name: str, x, t: dtypes.DType):
    """A CuPy view in `t`'s storage (bfloat16: uint16) of a device tensor of a type kept as bit
    patterns, zero-copy. CuPy has no bfloat16 dtype, so a torch tensor shares its bits as an int
    of its width through DLPack, as autosage_cli.torch does (detached: a
    tensor that requires grad is read, not differentiated, here); another DLPack producer goes
    through DLPack as it is, for CuPy builds that take bfloat16 there."""
    import cupy

    torch = sys.modules.get("torch")     # imported already whenever x is a torch tensor
    if torch is not None and isinstance(x, torch.Tensor):
        if not x.is_contiguous():
            raise AutosageError(f"{name}: expected a C-contiguous (row-major) array; "
                                f"make it contiguous first (.contiguous())")
        x = x.detach().view(getattr(torch, f"int{8 * t.itemsize}"))
    try:
        return cupy.from_dlpack(x).view(t.storage)
    except Exception as exc:
        raise AutosageError(f"{name}: cannot share a {t.name} array with CuPy: {exc}") from None


def to_cupy(name: str, x, dtype: str | None = None):
    """Zero-copy CuPy view of a validated CUDA array; it must be C-contiguous. `dtype` "bfloat16":
    the view holds the bit patterns (uint16)."""
    import cupy

    t = dtypes.info(dtype) if dtype is not None else None
    bits = t is not None and t.bit_patterns
    if isinstance(x, cupy.ndarray):
        arr = x
    elif bits and _dtype_name(x) != t.storage:
        arr = _bits_view(name, x, t)
    else:
        try:
            arr = cupy.from_dlpack(x)
        except Exception as exc:  # e.g. a torch tensor that requires grad
            raise AutosageError(f"{name}: cannot share it with CuPy through DLPack: {exc}") from None
    if not arr.flags.c_contiguous:
        raise AutosageError(f"{name}: expected a C-contiguous (row-major) array; "
                            f"make it contiguous first (cupy.ascontiguousarray / .contiguous())")
    if bits and arr.dtype != cupy.dtype(t.storage):   # a CuPy build with a bfloat16 dtype
        arr = arr.view(t.storage)
    return arr


def _check_scale(scale) -> float | None:
    if scale is None:
        return None
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise AutosageError(f"scale must be a number, got {scale!r}") from None
    if not math.isfinite(value):
        raise AutosageError(f"scale must be finite, got {scale!r}")
    return value


# ---------------------------------------------------------------------------------------- plans
def _device_graph(graph: CSRGraph):
    from .backends.base import DeviceGraph

    key = graph.fingerprint
    dg = _graphs.get(key)
    if dg is None:
        dg = _graphs[key] = DeviceGraph.from_host(graph)
        while len(_graphs) > _GRAPH_SLOTS:
            _graphs.popitem(last=False)
    else:
        _graphs.move_to_end(key)
    return dg


def check_requested_schedule(op: str, schedule, k: int, heads: int):
    """Check a requested schedule without a GPU: None (let the scheduler decide), ("vendor", name)
    or ("native", Schedule). Raises AutosageError for an unknown name, another op's name, or a
    schedule that cannot take this K / head count."""
    if schedule is None:
        return None
    if not isinstance(schedule, str):
        schedule = getattr(schedule, "name", None)
        if not isinstance(schedule, str):
            raise AutosageError("schedule must be a schedule name, a vendor name or None")
    vendor_op = op_specs.vendor_op(schedule)
    if vendor_op is not None:
        if vendor_op != op:
            raise AutosageError(f"{schedule!r} is a {vendor_op} vendor backend, not {op}")
        return ("vendor", schedule)
    from .kernels.schedule import get

    native = get(schedule)  # AutosageError for an unknown name
    if op_specs.runs_schedule(op, native) is not None:   # its own op's, or one it borrows (spmm-bias)
        raise AutosageError(f"schedule {schedule!r} is for {native.op}, not {op}")
    reason = native.supports(k, heads)
    if reason is not None:
        raise AutosageError(f"schedule {schedule!r} cannot run K={k}, heads={heads}: {reason}")
    return ("native", native)


def _prepare_named(dgraph, op: str, resolved, k: int, heads: int, scale, dtype: str = dtypes.DEFAULT):
    kind, what = resolved
    if kind == "vendor":
        return op_specs.prepare_vendor(dgraph, what, k, heads, scale, dtype)
    return op_specs.prepare_native(dgraph, what, k, heads, scale, dtype, **op_specs.native_options(op))


def _prepare_tuned(graph: CSRGraph, dgraph, op: str, k: int, heads: int, scale, cache, tune: bool,
                   dtype: str = dtypes.DEFAULT):
    """tune=True: the cached decision, tuning (and storing) on a miss. tune=False: the cached
    decision if there is one, else the default vendor entry, with no probing at all."""
    from . import cache as cache_mod
    from .scheduler import tune as tuner

    store = cache if isinstance(cache, cache_mod.DecisionCache) else cache_mod.DecisionCache(cache)
    if tune:
        decision = tuner.lookup_or_tune(graph, op, k, heads, cache=store, dtype=dtype).decision
        return tuner.plan_for(dgraph, decision, k, heads, scale, dtype=dtype, op=op)
    entry = store.find(cache_mod.make_key(graph, op, k, dtype, heads)).entry
    if entry is not None:
        return tuner.plan_for(dgraph, entry["decision"], k, heads, scale, dtype=dtype, op=op)
    return untuned_vendor_plan(dgraph, op, k, heads, scale, dtype)


def untuned_vendor_plan(dgraph, op: str, k: int, heads: int, scale, dtype: str):
    """The op's default vendor entry, else the first other one that runs `dtype` (cusparseSDDMM,
    the SDDMM default, refuses bfloat16). Running out of memory or a CUDA fault is not a refusal."""
    from .errors import OutOfMemory, is_sticky_cuda_fault, resource_error

    first = op_specs.untuned_vendor(op)
    refusals = []
    for name in [first] + [n for n in op_specs.vendor_names(op) if n != first]:
        try:
            return op_specs.prepare_vendor(dgraph, name, k, heads, scale, dtype)
        except Exception as exc:
            if isinstance(resource_error(exc), OutOfMemory) or is_sticky_cuda_fault(exc):
                raise
            refusals.append(f"{name}: {one_line(exc, 200)}")
    raise AutosageError(f"no vendor {op} runs {dtype} here and tuning is off ({'; '.join(refusals)})")


def prepare_plan(graph: CSRGraph, dgraph, op: str, k: int, heads: int = 1, *, schedule=None,
                 scale=None, cache=None, tune: bool = True, dtype: str = dtypes.DEFAULT):
    """A Plan for `op` at width k with `dtype` operands on `dgraph` (the device copy of `graph`),
    not memoized: a fixed `schedule` (checked by check_requested_schedule) or, for None, the cached
    decision / tuning as the ops do. For callers that keep their own device graphs and plans
    (autosage_cli.torch)."""
    op_specs.require_dtype(op, dtype)
    resolved = check_requested_schedule(op, schedule, k, heads)
    if resolved is None:
        return _prepare_tuned(graph, dgraph, op, k, heads, scale, cache, tune, dtype)
    return _prepare_named(dgraph, op, resolved, k, heads, scale, dtype)


def _plan(graph: CSRGraph, op: str, k: int, heads: int, resolved, scale, cache, tune: bool, dtype: str):
    # The cache file only matters when the scheduler decides; a fixed schedule ignores it.
    if resolved is None:
        where = str(getattr(cache, "path", cache)) if cache is not None else ""
        key = (graph.fingerprint, op, k, heads, dtype, None, scale, where, tune)
    else:
        name = resolved[1] if resolved[0] == "vendor" else resolved[1].name
        key = (graph.fingerprint, op, k, heads, dtype, name, scale)
    with _lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
        dgraph = _device_graph(graph)
        if resolved is None:
            plan = _prepare_tuned(graph, dgraph, op, k, heads, scale, cache, tune, dtype)
        else:
            plan = _prepare_named(dgraph, op, resolved, k, heads, scale, dtype)
        _plans[key] = plan
        while len(_plans) > _PLAN_SLOTS:
            _plans.popitem(last=False)
        return plan


def clear_memo() -> None:
    """Forget memoized device graphs and plans (frees their GPU memory once unreferenced)."""
    with _lock:
        _plans.clear()
        _graphs.clear()


def _run(graph: CSRGraph, op: str, k: int, heads: int, named_inputs, schedule, scale, cache, tune,
         dtype: str | None):
    from .capability import require_gpu

    dtype = common_dtype([(name, _element_type(name, x, dtype)) for name, x in named_inputs])
    resolved = check_requested_schedule(op, schedule, k, heads)  # bad names fail before the GPU is asked
    require_gpu(f"autosage_cli.{op}")
    inputs = tuple(to_cupy(name, x, dtype) for name, x in named_inputs)
    plan = _plan(graph, op, k, heads, resolved, scale, cache, tune, dtype)
    out = plan.alloc_out()
    plan.run(inputs, out)
    return out


# ---------------------------------------------------------------------------------------- ops
def spmm(A, B, schedule=None, *, cache=None, tune: bool = True, dtype=None):
    """C = A @ B (row-major, in B's dtype; `dtype`: see the module docstring). Returns a CuPy
    (n_rows, K) array."""
    graph = as_graph(A)
    dtype = _check_dtype_argument(dtype, "spmm")
    check_dense("B", B, (graph.n_cols, None), "spmm", dtype)
    k = int(B.shape[1])
    return _run(graph, "spmm", k, 1, [("B", B)], schedule, None, cache, tune, dtype)


def sddmm(A, X, Y, schedule=None, *, cache=None, tune: bool = True, dtype=None):
    """out[e] = a_e * <X[i], Y[j]> for every edge e = (i, j) of A, in canonical edge order.
    Returns a CuPy (nnz,) array in the inputs' dtype."""
    graph = as_graph(A)
    dtype = _check_dtype_argument(dtype, "sddmm")
    check_dense("X", X, (graph.n_rows, None), "sddmm", dtype)
    k = int(X.shape[1])
    check_dense("Y", Y, (graph.n_cols, k), "sddmm", dtype)
    return _run(graph, "sddmm", k, 1, [("X", X), ("Y", Y)], schedule, None, cache, tune, dtype)


def attention(A, Q, K, V, scale=None, schedule=None, *, cache=None, tune: bool = True, dtype=None):
    """Per head h and row i: O[i,h] = sum over edges (i, j) of softmax_j(scale * <Q[i,h], K[j,h]>)
    V[j,h]; rows without edges give zeros; scale defaults to 1/sqrt(d). Returns (n_rows, H, d) in
    the inputs' dtype (max, sum and exponentials in float32 inside)."""
    graph = as_graph(A)
    dtype = _check_dtype_argument(dtype, "attention")
    check_dense("Q", Q, (graph.n_rows, None, None), "attention", dtype)
    heads, d = int(Q.shape[1]), int(Q.shape[2])
    check_dense("K", K, (graph.n_cols, heads, d), "attention", dtype)
    check_dense("V", V, (graph.n_cols, heads, d), "attention", dtype)
    value = _check_scale(scale)
    return _run(graph, "attention", d, heads, [("Q", Q), ("K", K), ("V", V)], schedule, value,
                cache, tune, dtype)
