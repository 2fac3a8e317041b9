"""The SDDMM providers behind the vendor entries (backends/sddmm_vendor.py says how they are
chosen, checked and timed): cusparseSDDMM through nvmath-python, torch.sparse.sampled_addmm through
zero-copy DLPack views, and the gather-dot composition; plus the per-edge row ids they share.
Each provider has `launch(X, Y, out)` (out[e] = <X[row e], Y[col e]>, unscaled), `forget_views()`
and `close()`, and runs in float32, float16 or bfloat16 where its library allows (float32 sums).
"""
from __future__ import annotations

import contextlib
from collections import OrderedDict

import numpy as np

from ..dtypes import info as dtype_info
from . import native_output
from .base import DeviceGraph
from .torch_sparse import csr_tensor
from .value_arrays import cuda_data_type

PROVIDER_NVMATH = "nvmath-python cusparseSDDMM"
PROVIDER_TORCH = "torch.sparse.sampled_addmm"
PROVIDER_GATHER = "cupy gather-dot"


def edge_rows(dgraph: DeviceGraph):
    """Row id of every edge (CuPy, graph index dtype), made once per graph (DeviceGraph.edge_rows)."""
    return dgraph.edge_rows()


class TorchBridge:
    """Zero-copy CuPy -> torch views (DLPack) and a torch stream equal to CuPy's current one.

    Views are memoized by (pointer, shape, strides) in a small LRU so a repeated launch costs no
    DLPack round trip; a memoized view keeps its CuPy memory alive, so the LRU holds at most
    `capacity` arrays (set it to the number of arrays one launch touches)."""

    def __init__(self, capacity: int = 4):
        import torch

        self.torch, self.capacity = torch, max(1, int(capacity))
        self._views: OrderedDict = OrderedDict()
        self._streams: dict = {}

    def stream(self):
        import cupy

        torch = self.torch
        ptr = cupy.cuda.get_current_stream().ptr
        if torch.cuda.current_stream().cuda_stream == ptr:
            return contextlib.nullcontext()
        ext = self._streams.get(ptr)
        if ext is None:
            # CuPy's null stream is torch's default stream: torch reads ExternalStream(0), a null
            # pointer, as "a new stream from the pool", which is non-blocking and so unordered
            # with the legacy stream CuPy fills and reads the output on
            ext = self._streams[ptr] = torch.cuda.default_stream() if ptr == 0 else torch.cuda.ExternalStream(ptr)
        return torch.cuda.stream(ext)

    def cached(self, key, make):
        """The memoized value of `key`, made by `make()` on a miss (LRU)."""
        value = self._views.get(key)
        if value is None:
            value = self._views[key] = make()
            while len(self._views) > self.capacity:
                self._views.popitem(last=False)
        else:
            self._views.move_to_end(key)
        return value

    def tensor(self, arr, dtype: str = "float32"):
        """A torch tensor sharing `arr`'s memory (same shape and strides), of `dtype` (bfloat16's
        bit patterns pass DLPack as int16, which every torch takes, and are viewed as bfloat16)."""
        key = (arr.data.ptr, arr.shape, arr.strides, arr.dtype.str)

        def make():
            if dtype_info(dtype).name != "bfloat16":
                return self.torch.from_dlpack(arr)
            import cupy

            return self.torch.from_dlpack(arr.view(cupy.int16)).view(self.torch.bfloat16)

        return self.cached(key, make)

    def clear(self) -> None:
        self._views.clear()


class GatherDot:
    """out[e] = <X[row e], Y[col e]> composed as PyG and DGL compose it: gather the rows of X and
    of Y per edge, multiply, sum each row; one pass over memory per step, chunked so temporaries
    stay under ~2 x 64 MiB. The steps run as kernels of autosage's helper module (kernels/util.py),
    which read the 2-byte types directly: gathered rows are widened to float32 and the sums
    rounded once."""
    provider = PROVIDER_GATHER
    # CuPy's own gathers, product and sum, writing every entry of out: the launch on random inputs
    # that checks a library provider would only repeat them (on a 100M-edge graph at K=128 that
    # is a quarter of a second per prepare). The probe and the bench still verify its output.
    needs_check = False

    def __init__(self, dgraph: DeviceGraph, k: int, chunk_bytes: int = 64 << 20, dtype: str = "float32"):
        import cupy

        self.rows, self.cols, self.dtype = edge_rows(dgraph), dgraph.indices, dtype_info(dtype).name
        self.k = k
        chunk = max(1, min(dgraph.nnz, chunk_bytes // (4 * k)))
        self.bx = cupy.empty((chunk, k), dtype=cupy.float32)
        self.by = cupy.empty((chunk, k), dtype=cupy.float32)
        self.spans = [(s, min(s + chunk, dgraph.nnz)) for s in range(0, dgraph.nnz, chunk)]

    def launch(self, X, Y, out) -> None:
        from ..kernels import util

        ldx, ldy = X.strides[0] // X.itemsize, Y.strides[0] // Y.itemsize
        for s, e in self.spans:
            bx, by = self.bx[: e - s], self.by[: e - s]
            util.gather_rows(X, ldx, self.rows[s:e], self.k, bx)
            util.gather_rows(Y, ldy, self.cols[s:e], self.k, by)
            util.multiply(bx, by)
            util.row_sums(bx, out[s:e])

    def forget_views(self) -> None:
        pass

    def close(self) -> None:
        pass


class TorchSampledAddmm:
    provider = PROVIDER_TORCH

    def __init__(self, dgraph: DeviceGraph, k: int, launch_sets: int, dtype: str = "float32"):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.graph, self.torch, self.dtype = dgraph, torch, dtype_info(dtype).name
        # Four memoized objects per distinct launch: X, Y, out and the CSR wrapper of out.
        self.bridge = TorchBridge(capacity=4 * max(1, launch_sets))
        if not dgraph.nnz:  # launch() never reaches a provider without edges
            return
        with self.bridge.stream():
            self.crow = torch.from_dlpack(dgraph.indptr)
            self.col = torch.from_dlpack(dgraph.indices)

    def _csr_of(self, out):
        """A torch CSR tensor with our crow/col whose values are `out` (no copy)."""
        g = self.graph
        return self.bridge.cached(("csr", out.data.ptr, out.shape), lambda: csr_tensor(
            self.crow, self.col, self.bridge.tensor(out, self.dtype), (g.n_rows, g.n_cols)))

    def launch(self, X, Y, out) -> None:
        b, t = self.bridge, self.dtype
        with b.stream():
            c = self._csr_of(out)
            self.torch.sparse.sampled_addmm(c, b.tensor(X, t), b.tensor(Y, t).t(), beta=0.0, out=c)

    def forget_views(self) -> None:
        self.bridge.clear()

    def close(self) -> None:
        self.bridge.clear()


def nvmath_cusparse():
    """nvmath-python's cuSPARSE binding (`nvmath.bindings.cusparse`), without running nvmath's
    package initialisation where nvmath is not imported yet: `import nvmath` imports every binding
    and fft, linalg, sparse and tensor, and loads cuBLAS, cuFFT, cuRAND, cuSOLVER and cuTENSOR
    (0.5 s of a first SDDMM or attention tune on the H200), none of which the binding needs. The
    two package modules stand in (their search paths only) while the binding imports, then leave
    sys.modules again, so a later `import nvmath` initialises the real package and reuses the
    binding. Raises ImportError where nvmath-python is not installed."""
    import importlib
    import importlib.util
    import os
    import sys
    import types

    if "nvmath" in sys.modules:
        from nvmath.bindings import cusparse
        return cusparse
    spec = importlib.util.find_spec("nvmath")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("nvmath-python is not installed")
    stand_ins = {}
    for name, sub in (("nvmath", ""), ("nvmath.bindings", "bindings")):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(p, sub) if sub else p for p in spec.submodule_search_locations]
        module.__package__ = name
        stand_ins[name] = sys.modules[name] = module
    try:
        return importlib.import_module("nvmath.bindings.cusparse")
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


class NvmathSDDMM:
    """cusparseSDDMM through nvmath-python: A = X (row-major, ld = ldx), B = Y^T described as a
    column-major K x n_cols matrix with ld = ldy (the same memory as Y row-major), C = the graph's
    pattern whose values pointer is the output."""
    provider = PROVIDER_NVMATH

    def __init__(self, dgraph: DeviceGraph, k: int, ldx: int, ldy: int, dtype: str = "float32"):
        import cupy

        nv = nvmath_cusparse()
        self.nv, self.graph, self.dtype = nv, dgraph, dtype_info(dtype).name
        f32 = int(cupy.cuda.runtime.CUDA_R_32F)
        vt = int(cuda_data_type(self.dtype))   # A, B, C in the value type; float32 compute
        idx = nv.IndexType.INDEX_64I if dgraph.indices.dtype == cupy.int64 else nv.IndexType.INDEX_32I
        self._f32, self._alg = f32, int(nv.SDDMMAlg.DEFAULT)
        self._op = int(nv.Operation.NON_TRANSPOSE)
        self._alpha = np.ones(1, dtype=np.float32)
        self._beta = np.zeros(1, dtype=np.float32)
        self.handle = nv.create()
        nv.set_pointer_mode(self.handle, int(nv.PointerMode.HOST))
        self._placeholder = cupy.empty(4, dtype=cupy.float32)
        p = self._placeholder.data.ptr  # never dereferenced: every launch re-points the descriptors
        self.a = nv.create_dn_mat(dgraph.n_rows, k, ldx, p, vt, int(nv.Order.ROW))
        self.b = nv.create_dn_mat(k, dgraph.n_cols, ldy, p, vt, int(nv.Order.COL))
        self.c = nv.create_csr(dgraph.n_rows, dgraph.n_cols, dgraph.nnz, dgraph.indptr.data.ptr,
                               dgraph.indices.data.ptr, p, int(idx), int(idx),
                               int(nv.IndexBase.ZERO), vt)
        size = np.zeros(1, dtype=np.uint64)  # the binding writes the size through this pointer
        native_output.query_or_refuse(   # nvmath's cuSPARSEError: its status names a refusal
            lambda: nv.sddmm_buffer_size(self.handle, self._op, self._op, self._alpha.ctypes.data, self.a,
                                         self.b, self._beta.ctypes.data, self.c, f32, self._alg,
                                         size.ctypes.data),
            self.dtype, "cusparseSDDMM", self.close)
        self._workspace = cupy.empty(max(int(size[0]), 16), dtype=cupy.uint8)
        self._preprocessed = False

    def launch(self, X, Y, out) -> None:
        import cupy

        nv = self.nv
        nv.dn_mat_set_values(self.a, X.data.ptr)
        nv.dn_mat_set_values(self.b, Y.data.ptr)
        nv.csr_set_pointers(self.c, self.graph.indptr.data.ptr, self.graph.indices.data.ptr,
                            out.data.ptr)
        nv.set_stream(self.handle, cupy.cuda.get_current_stream().ptr)
        args = (self.handle, self._op, self._op, self._alpha.ctypes.data, self.a, self.b,
                self._beta.ctypes.data, self.c, self._f32, self._alg, self._workspace.data.ptr)
        if not self._preprocessed:  # analysis of C's pattern, once (values may change later)
            nv.sddmm_preprocess(*args)
            self._preprocessed = True
        nv.sddmm(*args)

    def forget_views(self) -> None:
        pass

    def close(self) -> None:
        nv = self.nv
        for attr, destroy in (("a", nv.destroy_dn_mat), ("b", nv.destroy_dn_mat),
                              ("c", nv.destroy_sp_mat), ("handle", nv.destroy)):
            obj = getattr(self, attr, None)
            if obj is not None:
                setattr(self, attr, None)
                with contextlib.suppress(Exception):
                    destroy(obj)

    def __del__(self):
        self.close()
