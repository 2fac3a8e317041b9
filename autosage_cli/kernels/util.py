"""The helper kernels of cuda/util*.cu, in place of CuPy's elementwise, reduction, random and fill
kernels on the tuning path: each of those is an NVRTC compile the first time a machine runs it.
They are compiled in groups (`GROUPS`: one module each, through kernels.compile, the same path and
source hash as every kernel), each on first use, and ahead of a tune only the groups it launches
(`tune_groups(op, dtype, index)`); `autosage compile` builds every group (`MODULES`).

Arrays are CuPy arrays, C-contiguous unless said otherwise; element types are read from their
dtype: float64, or a value type's storage (dtypes.of_storage: float32, float16, and uint16, the bit
patterns of bfloat16, backends/value_arrays.py).
Every call enqueues on CuPy's current stream; the functions returning a number synchronize.

  fill(arr, value)                        every element = value (NaN, -inf, ...; 0 by memset)
  uniform(shape, seed, stream, dtype)     uniform in (-1, 1), never zero, counter-based:
                                          reproducible from (seed, stream) whatever the GPU
  convert(x, out)                         out = x in out's type (rounded to nearest even)
  squared_sums(a, b) -> (d2, r2)          sum (a - b)^2 and sum b^2 in float64
  count_not_equal(x, value), count_nan(x)
  edge_rows(indptr, nnz, out)             the row id of every edge
  gather_rows(src, ld, rows, k, dst)      dst[i] = src[rows[i]] in float32
  multiply(a, b), row_sums(x, out), scale_edges(out, values)
  reference_spmm, reference_sddmm, reference_attention
                                          float64 results of the ops (the device reference)
  scale_bias, scatter_max, sub_row_exp, scatter_add, normalize_heads, divide_rows
                                          the vendor attention's softmax steps
  (kernels/util_heads.py: the attention backward's multi-head products, groups heads/...;
   kernels/util_labelprop.py: a round of label propagation, groups labelprop/...)
  spin(ns)                                a one-thread wait before a timed launch
"""
from __future__ import annotations

import re

import numpy as np

from ..cuda_sources import kernel_source

from ..dtypes import DTYPES, info as dtype_info, of_storage, to_storage
from .compile import KernelRef, get_module_functions
from .launch import function_pointer, launch_now

# The file of each group's purpose (a group's name starts with its purpose). A module compiles every
# plain (non-template) kernel of its file whatever its name expressions ask, so each family of
# groups has a file of its own: a module parses and compiles only its own family's code.
PURPOSE_FILES = {"core": "util.cu", "values": "util_values.cu", "edges": "util_edges.cu",
                 "gather": "util_edges.cu", "sddmm_vendor": "util_sddmm.cu", "softmax": "util_softmax.cu",
                 "reference": "util_reference.cu", "heads": "util_heads.cu",
                 "labelprop": "util_labelprop.cu"}
SOURCES = tuple(dict.fromkeys(PURPOSE_FILES.values()))
THREADS = 256
MAX_BLOCKS = 1 << 16          # grid-stride loops: more blocks than this add nothing

CODECS = tuple(t.codec for t in DTYPES.values())   # the value types of operands and outputs
F32 = DTYPES["float32"].codec                      # what the conversions convert from and to
INDEX = ("int", "long long")
# The ops with a float64 device reference kernel: those util_reference.cu defines (an op spec's
# `device_reference` runs it), read from the file so that no op list is kept here.
REFERENCE_OPS = tuple(re.findall(r"__global__ void autosage_reference_(\w+)\(", kernel_source("util_reference.cu")))


def _groups() -> dict[str, tuple[str, ...]]:
    """Group name -> the name expressions compiled together as one module. A group holds the kernels
    of one purpose in one value codec and one index type, so a tune compiles only the groups it
    launches: NVRTC's time grows with the instantiations in a module, and the float64 references
    alone cost more than everything a float32 tune runs. A group is named by its purpose, then the
    codec and the index type its kernels take (a purpose's plain float32 kernels: its name alone)."""
    groups = {"core": ("autosage_fill_u32", "autosage_fill_u16", "autosage_count_not_equal", "autosage_spin")}
    for c in CODECS:   # inputs, poisoning checks, verification sums, conversions from and to float32
        convert = (f"autosage_convert<F32, {c}>", f"autosage_convert<{c}, F32>") if c != F32 else ()
        groups[f"values/{c}"] = (f"autosage_uniform<{c}>", f"autosage_count_nan<{c}>",
                                 f"autosage_squared_sums<{c}, {c}>", f"autosage_squared_sums<{c}, F64>") + convert
    groups["values/F64"] = ("autosage_squared_sums<F64, F64>",)
    groups["sddmm_vendor"] = ("autosage_multiply",)
    for c in CODECS:
        groups[f"sddmm_vendor/{c}"] = (f"autosage_row_sums<{c}>", f"autosage_scale_edges<{c}>")
    groups["softmax"] = ("autosage_scale_bias", "autosage_normalize_heads")
    for i in INDEX:
        groups[f"edges/{i}"] = (f"autosage_edge_rows<{i}>", f"autosage_diagonal_sums<{i}>")
        groups[f"softmax/{i}"] = (f"autosage_scatter_max<{i}>", f"autosage_sub_row_exp<{i}>",
                                  f"autosage_scatter_add<{i}>")
        groups[f"heads/{i}"] = (f"autosage_heads_softmax_grad<{i}>",)
        groups[f"labelprop/{i}"] = (f"autosage_labelprop_warps<{i}>", f"autosage_labelprop_blocks<{i}>")
        for c in CODECS:
            groups[f"gather/{c}/{i}"] = (f"autosage_gather_rows<{c}, {i}>",)
            if c != F32:
                groups[f"softmax/{c}/{i}"] = (f"autosage_divide_rows<{c}, {i}>",)
            for op in REFERENCE_OPS:
                groups[f"reference/{op}/{c}/{i}"] = (f"autosage_reference_{op}<{c}, {i}>",)
            groups[f"heads/{c}/{i}"] = (f"autosage_heads_sddmm<{c}, {i}>", f"autosage_heads_spmm<{c}, {i}>",
                                        f"autosage_heads_additive_backward<{c}, {i}>")
    return groups


GROUPS = _groups()
EXPRESSIONS = tuple(e for exprs in GROUPS.values() for e in exprs)
# One module per group (kernels.compile builds a KernelRef whose expression holds several, one per
# line, as one module), compiled on first use or ahead of time.
MODULES = {name: KernelRef(PURPOSE_FILES[name.partition("/")[0]], "\n".join(exprs))
           for name, exprs in GROUPS.items()}
_GROUP_OF = {e: name for name, exprs in GROUPS.items() for e in exprs}

# The groups a tune of an op launches, as templates filled with the tune's codec {c}, index type
# {i} and op; a name no group has (softmax/F32/int: float32 needs no rounding step) is skipped.
# Every tune makes inputs, poisons outputs, verifies and times: core and values. An op's own
# (its vendors' steps) are its spec's `helper_groups` (ops.tune_groups passes them).
TUNE_GROUPS = ("core", "values/{c}")
# The float64 device reference runs in every 2-byte tune (backends/reference_device.py); in
# float32 only when the vendors disagree, so it then compiles on first use.
TWO_BYTE_GROUPS = ("reference/{op}/{c}/{i}",)


def tune_groups(op: str, dtype: str, index: str = "int", op_groups=()) -> tuple[str, ...]:
    """The groups a tune of `op` in `dtype` (a name or its C++ type) on a graph of `index` ("int"
    or "long long") launches, `op_groups` being the op's own templates: what the tuner compiles
    ahead, beside its candidates."""
    if index not in INDEX:
        raise ValueError(f"index type {index!r} is not one of {INDEX}")
    t = dtype_info(dtype)
    c = t.codec
    templates = TUNE_GROUPS + tuple(op_groups) + (TWO_BYTE_GROUPS if t.narrow else ())
    names = (template.format(c=c, i=index, op=op) for template in templates)
    return tuple(name for name in dict.fromkeys(names) if name in GROUPS)


def tune_modules(op: str, dtype: str, index: str = "int", op_groups=()) -> tuple[KernelRef, ...]:
    """The modules of `tune_groups(op, dtype, index, op_groups)`."""
    return tuple(MODULES[name] for name in tune_groups(op, dtype, index, op_groups))


def _fn(expression: str):
    """The kernel of a name expression, its group's module built on first use (KeyError for an
    expression no group has: callers fall back on that)."""
    return get_module_functions(MODULES[_GROUP_OF[expression]])[expression]


_POINTERS: dict = {}   # (expression, device) -> CUfunction: the torch path's launches look nothing else up


def _function_pointer(expression: str) -> int:
    """The CUfunction of an expression's kernel on the thread's current device (built on first use)."""
    from cupy.cuda import runtime

    key = (expression, runtime.getDevice())
    if key not in _POINTERS:
        _POINTERS[key] = function_pointer(_fn(expression))
    return _POINTERS[key]


def codec(arr) -> str:
    """The codec of an array's element type: its value type's (dtypes.of_storage), or F64."""
    if np.dtype(arr.dtype) == np.float64:
        return "F64"
    t = of_storage(arr.dtype)
    if t is None:
        raise TypeError(f"no helper kernel for {arr.dtype} arrays")
    return t.codec


def index_type(arr) -> str:
    return "long long" if np.dtype(arr.dtype) == np.int64 else "int"


def _launch(expression: str, n: int, args: tuple, threads: int = THREADS, stream: int | None = None) -> None:
    """Launch over `n` threads (grid-stride, at most MAX_BLOCKS blocks) on CuPy's current stream, or on
    `stream` (the torch path's raw handle) by the driver: args device addresses and NumPy scalars."""
    if n <= 0:
        return
    blocks = max(1, min(-(-int(n) // threads), MAX_BLOCKS))
    if stream is None:
        _fn(expression)((blocks,), (threads,), args)
    else:
        launch_now(_function_pointer(expression), (blocks, 1, 1), (threads, 1, 1), stream, args)


def _contiguous(name: str, arr) -> None:
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name}: the helper kernels take C-contiguous arrays")


# ------------------------------------------------------------------ fills and generation

def fill(arr, value: float):
    """Every element of `arr` = value, in place (bfloat16 bit patterns: the value rounded to
    bfloat16); returns arr."""
    _contiguous("fill", arr)
    if value == 0 and not np.signbit(value):
        arr.data.memset_async(0, arr.nbytes)
        return arr
    t = of_storage(arr.dtype)
    word = _FILL_WORDS.get(t.itemsize) if t is not None else None
    if word is None:
        raise TypeError(f"no helper fill for {arr.dtype} arrays")
    # the value rounded to the type as the host rounds it, then written as bits of its width
    bits = int(to_storage(np.asarray([value], np.float32), t.name).view(word)[0])
    if word is np.uint8:        # one byte per element: a memset writes it
        arr.data.memset_async(bits, arr.nbytes)
    elif word is np.uint16:
        _launch("autosage_fill_u16", arr.size, (arr, word(bits), np.int64(arr.size)))
    else:
        _launch("autosage_fill_u32", arr.size, (arr, word(bits), np.int64(arr.size)))
    return arr


# The word of each element width a fill writes (autosage_fill_u16 / _u32): bits, whatever they mean.
_FILL_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def uniform(shape, seed: int, stream: int, storage):
    """A new array of `shape` and storage dtype `storage` (float32, float16, uint16 = bfloat16),
    uniform in (-1, 1) and never zero: drawn in float32 (odd multiples of 2^-23) and rounded once
    to nearest even; element i of (seed, stream) is the same on every GPU and launch geometry."""
    import cupy

    out = cupy.empty(shape, dtype=storage)
    _launch(f"autosage_uniform<{codec(out)}>", out.size,
            (out, np.int64(out.size), np.uint64(seed % (1 << 64)), np.uint64(stream)))
    return out


def convert(x, out):
    """out = x converted to out's type (float32 <-> float16 / bfloat16), rounded to nearest even."""
    _contiguous("convert", x)
    _contiguous("convert", out)
    if x.size != out.size:
        raise ValueError(f"convert: {x.size} elements into {out.size}")
    _launch(f"autosage_convert<{codec(x)}, {codec(out)}>", x.size, (x, out, np.int64(x.size)))
    return out


# ------------------------------------------------------------------ verification

def squared_sums(a, b) -> tuple[float, float]:
    """(sum (a - b)^2, sum b^2) in float64 over every element (NaN or Inf propagate)."""
    import cupy

    _contiguous("a", a)
    _contiguous("b", b)
    sums = cupy.zeros(2, dtype=cupy.float64)
    _launch(f"autosage_squared_sums<{codec(a)}, {codec(b)}>", a.size, (a, b, np.int64(a.size), sums))
    d2, r2 = sums.get()
    return float(d2), float(r2)


def _count(expression: str, args: tuple, n: int) -> int:
    import cupy

    count = cupy.zeros(1, dtype=cupy.uint64)
    _launch(expression, n, args + (count,))
    return int(count.get()[0])


def count_not_equal(x, value: float) -> int:
    """How many elements of the float32 array `x` differ from `value` (NaN always does)."""
    _contiguous("x", x)
    return _count("autosage_count_not_equal", (x, np.float32(value), np.int64(x.size)), x.size)


def count_nan(x) -> int:
    _contiguous("x", x)
    return _count(f"autosage_count_nan<{codec(x)}>", (x, np.int64(x.size)), x.size)


# ------------------------------------------------------------------ graph helpers

def edge_rows(indptr, nnz: int, out):
    """out[e] = the row of edge e (the last row whose indptr entry is <= e); out has indptr's dtype."""
    _launch(f"autosage_edge_rows<{index_type(indptr)}>", nnz,
            (indptr, np.int64(indptr.size - 1), np.int64(nnz), out))
    return out


def diagonal_sums(indptr, indices, n_rows: int) -> tuple[int, int, int, int]:
    """(sum |col - row|, sum (col - row), edges below, edges above the diagonal) over the edges of
    the CSR pattern (indptr, indices), which share one index type: features.DiagonalSums' fields."""
    import cupy

    if indptr.dtype != indices.dtype:
        raise ValueError(f"diagonal_sums: indptr is {indptr.dtype}, indices {indices.dtype}")
    sums = cupy.zeros(4, dtype=cupy.uint64)
    _launch(f"autosage_diagonal_sums<{index_type(indptr)}>", int(n_rows) * 32,
            (indptr, indices, np.int64(n_rows), sums))
    abs_sum, signed, below, above = (int(x) for x in sums.get())
    return abs_sum, signed - (1 << 64) if signed >= 1 << 63 else signed, below, above


def gather_rows(src, ld: int, rows, k: int, dst):
    """dst[i, :k] = src[rows[i], :k] widened to float32; src's rows `ld` elements apart (a view of
    a wider array is fine: its data pointer and ld say where the rows are)."""
    n = int(rows.size)
    _launch(f"autosage_gather_rows<{codec(src)}, {index_type(rows)}>", n * k,
            (src, np.int64(ld), rows, np.int64(n), np.int32(k), dst))
    return dst


def multiply(a, b):
    """a *= b (float32, in place)."""
    _launch("autosage_multiply", a.size, (a, b, np.int64(a.size)))
    return a


def row_sums(x, out):
    """out[i] = sum of row i of the float32 (n, k) array x, rounded once to out's type."""
    n, k = x.shape
    _launch(f"autosage_row_sums<{codec(out)}>", n * 32, (x, np.int64(n), np.int32(k), out))
    return out


def scale_edges(out, values):
    """out *= values elementwise, in out's type (one rounding)."""
    _launch(f"autosage_scale_edges<{codec(out)}>", out.size, (out, values, np.int64(out.size)))
    return out


# ------------------------------------------------------------------ float64 references

def reference_spmm(indptr, indices, values, B):
    """C = A(values) @ B in float64, (n_rows, k): values and B read in their stored type."""
    import cupy

    n_rows, k = indptr.size - 1, B.shape[-1]
    out = cupy.empty((n_rows, k), dtype=cupy.float64)
    _launch(f"autosage_reference_spmm<{codec(B)}, {index_type(indptr)}>", n_rows * k,
            (indptr, indices, values, B, np.int64(n_rows), np.int32(k), out))
    return out


def reference_sddmm(rows, indices, values, X, Y):
    """out[e] = a_e <X[rows e], Y[indices e]> in float64: values, X and Y read in their stored type."""
    import cupy

    nnz, k = indices.size, X.shape[-1]
    out = cupy.empty(nnz, dtype=cupy.float64)
    _launch(f"autosage_reference_sddmm<{codec(X)}, {index_type(indices)}>", nnz,
            (rows, indices, values, X, Y, np.int64(nnz), np.int32(k), out))
    return out


def reference_attention(indptr, indices, Q, K, V, scale: float):
    """The attention of (Q, K, V) (n, H, d) on the pattern in float64, (n_rows, H, d): the row
    softmax of scale <Q[i, h], K[j, h]>, rows without edges zero; inputs read in their stored type."""
    import cupy

    n_rows, heads, d = indptr.size - 1, Q.shape[1], Q.shape[2]
    out = cupy.empty((n_rows, heads, d), dtype=cupy.float64)
    # a warp per (row, head) (cuda/util_reference.cu)
    _launch(f"autosage_reference_attention<{codec(Q)}, {index_type(indptr)}>", n_rows * heads * 32,
            (indptr, indices, Q, K, V, np.int64(n_rows), np.int32(heads), np.int32(d), np.float64(scale), out))
    return out


def reference_additive(indptr, indices, a_dst, a_src, V, negative_slope: float):
    """The additive (GAT) attention of (a_dst (n, H), a_src (m, H), V (m, H, d)) on the pattern in
    float64, (n_rows, H, d): the row softmax of LeakyReLU(a_dst[i, h] + a_src[j, h]) over row i's
    edges, rows without edges zero; a_dst and a_src float32, V read in its stored type."""
    import cupy

    n_rows, heads, d = indptr.size - 1, V.shape[1], V.shape[2]
    out = cupy.empty((n_rows, heads, d), dtype=cupy.float64)
    # a warp per (row, head) (cuda/util_reference.cu)
    _launch(f"autosage_reference_additive<{codec(V)}, {index_type(indptr)}>", n_rows * heads * 32,
            (indptr, indices, a_dst, a_src, V, np.int64(n_rows), np.int32(heads), np.int32(d),
             np.float64(negative_slope), out))
    return out


# ------------------------------------------------------------------ the vendor attention's softmax

def scale_bias(s, scale: float, bias=None):
    _launch("autosage_scale_bias", s.size,
            (s, np.float32(scale), np.uint64(0) if bias is None else bias, np.int64(s.size)))


def scatter_max(m, rows, s):
    _launch(f"autosage_scatter_max<{index_type(rows)}>", s.size, (m, rows, s, np.int64(s.size)))


def sub_row_exp(s, m, rows, scale: float = 1.0):
    _launch(f"autosage_sub_row_exp<{index_type(rows)}>", s.size,
            (s, m, rows, np.float32(scale), np.int64(s.size)))


def scatter_add(l, rows, s):
    _launch(f"autosage_scatter_add<{index_type(rows)}>", s.size, (l, rows, s, np.int64(s.size)))


def normalize_heads(out, l):
    """out[i, h, :] *= 1 / max(l[h, i], 1) for a float32 (n, H, d) out and (H, n) row sums l."""
    n, heads, d = out.shape
    _launch("autosage_normalize_heads", out.size, (out, l, np.int64(n), np.int32(heads), np.int32(d)))


def divide_rows(s, l, rows, stored):
    """stored = s / l[rows] rounded to stored's type (float16 or bfloat16)."""
    _launch(f"autosage_divide_rows<{codec(stored)}, {index_type(rows)}>", s.size,
            (s, l, rows, stored, np.int64(s.size)))


# ------------------------------------------------------------------ timing

def spin(ns: int) -> None:
    _fn("autosage_spin")((1,), (1,), (np.uint64(ns),))
