"""cuSPARSE generic SpMM (the vendor baseline) through CuPy's low-level bindings.

C = A·B with A the CSR graph and B, C dense, *row-major* (CUSPARSE_ORDER_ROW): the layout GNN
features have. `cupyx` `A @ B` goes column-major and is ~10x slower at K >= 16 on the H200, so it is
not a fair baseline. Each algorithm is a separate vendor entry:
`cusparse-alg1|alg2|alg3|default` = CUSPARSE_SPMM_CSR_ALG1/ALG2/ALG3/ALG_DEFAULT (4/6/12/0).

Descriptors and the workspace are made once (outside any timed region) and destroyed by `close()` or
when the object is collected. A launch only re-points the dense descriptors (cusparseDnMatSetValues,
and cusparseSpMatSetValues for caller-given values) when a pointer changed, then calls cusparseSpMM
on CuPy's current stream (CuPy's `spMM` binding sets the handle's stream before each call).
cusparseSpMM_preprocess is optional for every algorithm (cuSPARSE docs) and CuPy has no binding for
it; ALG3 runs without it (verified on the H200).

Value types: float32 (CUDA_R_32F), float16 (CUDA_R_16F) and bfloat16 (CUDA_R_16BF, stored as uint16
bit patterns: backends/value_arrays.py) for A's values, B and C, always with CUDA_R_32F compute (so
alpha and beta are float32). An algorithm that does not support a type says so with its status when
its workspace is sized: `DtypeRefused` names the algorithm, the type and the status, and the plan's
preparation fails with that reason (a failed vendor entry, like any other preparation failure).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import storage_dtype, info as dtype_info
from . import native_output
from .native_output import DtypeRefused  # noqa: F401  (what a refusing algorithm raises; callers catch it here)
from .base import DeviceGraph, PrepareTimer, RowsOutPlan
from .value_arrays import cuda_data_type, graph_values

# Vendor name -> cusparseSpMMAlg_t value.
SPMM_ALGORITHMS = {
    "cusparse-alg1": 4,     # CUSPARSE_SPMM_CSR_ALG1
    "cusparse-alg2": 6,     # CUSPARSE_SPMM_CSR_ALG2
    "cusparse-alg3": 12,    # CUSPARSE_SPMM_CSR_ALG3
    "cusparse-default": 0,  # CUSPARSE_SPMM_ALG_DEFAULT
}
SPMM_NAMES = tuple(SPMM_ALGORITHMS)


def algorithm_id(alg: int | str) -> int:
    """The cusparseSpMMAlg_t value of a vendor name (or a value already)."""
    if isinstance(alg, str):
        try:
            return SPMM_ALGORITHMS[alg]
        except KeyError:
            raise ValueError(f"unknown cuSPARSE SpMM algorithm {alg!r}; "
                             f"choose one of {', '.join(SPMM_NAMES)}") from None
    if alg not in SPMM_ALGORITHMS.values():
        raise ValueError(f"unsupported cusparseSpMMAlg_t value {alg}")
    return int(alg)


def _row_view_check(name: str, arr, rows: int, k: int, ld: int, dtype: str = "float32") -> None:
    """`arr` must be a (rows x k) row-major view of `dtype`'s storage with leading dimension `ld`
    elements."""
    import cupy

    stored, size = cupy.dtype(storage_dtype(dtype)), dtype_info(dtype).itemsize
    if arr.dtype != stored or arr.ndim != 2 or arr.shape != (rows, k):
        raise ValueError(f"{name}: expected a {dtype} ({stored}) array of shape {(rows, k)}, "
                         f"got {arr.dtype} {tuple(arr.shape)}")
    if rows > 1 and arr.strides[0] != ld * size:
        raise ValueError(f"{name}: row stride {arr.strides[0]} bytes, expected ld={ld} elements")
    if k > 1 and arr.strides[1] != size:
        raise ValueError(f"{name}: rows must be contiguous (element stride {size} bytes)")


class CusparseSpMM:
    """Reusable cusparseSpMM for one graph, one algorithm, one width K and one value type (dtype:
    A's values, B and C are all of it; float32 compute).

    `launch(B, C, values=None)` computes C = A·B where
      * B is a CuPy array of the dtype's storage (float32 below) of shape (n_cols, k) whose rows are `ldb` floats apart and whose
        elements within a row are contiguous: a C-contiguous (n_cols, k) array (ldb = k) or a
        strided view such as `X[:, h, :]` of a C-contiguous (n, H, d) array (k = d, ldb = H*d; the
        pointer offset h*d floats is in the view's data pointer);
      * C likewise, shape (n_rows, k), leading dimension `ldc`;
      * `values`, when given, is a contiguous float32 array of nnz entries that replaces A's values
        for this launch (e.g. attention probabilities); otherwise the graph's own values are used.
    The dense descriptors are created once and re-pointed per launch; nothing is allocated and
    nothing synchronizes. With nnz == 0 cuSPARSE is not called (it may reject an empty matrix):
    C is filled with zeros instead, which is the right answer.
    """

    def __init__(self, dgraph: DeviceGraph, alg: int | str, k: int, ldb: int | None = None,
                 ldc: int | None = None, dtype: str = "float32"):
        import cupy
        from cupy_backends.cuda.libs import cusparse as cs

        if k < 1:
            raise ValueError(f"K must be >= 1, got {k}")
        self.graph, self.k, self.dtype = dgraph, int(k), dtype_info(dtype).name
        self.alg = algorithm_id(alg)
        self.ldb = int(ldb if ldb is not None else k)
        self.ldc = int(ldc if ldc is not None else k)
        if self.ldb < self.k or self.ldc < self.k:
            raise ValueError(f"leading dimensions must be >= K={k}, got ldb={self.ldb}, ldc={self.ldc}")
        self._cs = cs
        self._sp = self._b = self._c = None
        self._ptrs = (None, None, None)
        self.workspace_bytes = 0
        if dgraph.nnz == 0:
            return
        # Host scalars: the handle stays in CUSPARSE_POINTER_MODE_HOST (CuPy's default; set anyway
        # in case other code changed the shared handle).
        self._alpha = np.ones(1, dtype=np.float32)
        self._beta = np.zeros(1, dtype=np.float32)
        self._handle = cupy.cuda.device.get_cusparse_handle()
        cs.setPointerMode(self._handle, cs.CUSPARSE_POINTER_MODE_HOST)
        index_type = cs.CUSPARSE_INDEX_64I if dgraph.indices.dtype == cupy.int64 else cs.CUSPARSE_INDEX_32I
        f32, vt = _cuda_r_32f(), cuda_data_type(self.dtype)
        self._f32 = f32
        self._values = graph_values(dgraph, self.dtype)
        self._sp = cs.createCsr(dgraph.n_rows, dgraph.n_cols, dgraph.nnz, dgraph.indptr.data.ptr,
                                dgraph.indices.data.ptr, self._values.data.ptr, index_type,
                                index_type, cs.CUSPARSE_INDEX_BASE_ZERO, vt)
        # The dense descriptors need *some* valid device pointer at creation; creation and
        # spMM_bufferSize never dereference it, and every launch re-points them to the real arrays.
        self._placeholder = cupy.empty(8, dtype=cupy.float32)
        p = self._placeholder.data.ptr
        self._b = cs.createDnMat(dgraph.n_cols, self.k, self.ldb, p, vt, cs.CUSPARSE_ORDER_ROW)
        self._c = cs.createDnMat(dgraph.n_rows, self.k, self.ldc, p, vt, cs.CUSPARSE_ORDER_ROW)
        self._ptrs = (self._values.data.ptr, p, p)
        op = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
        size = native_output.query_or_refuse(   # its status names a refusal
            lambda: cs.spMM_bufferSize(self._handle, op, op, self._alpha.ctypes.data, self._sp, self._b,
                                       self._beta.ctypes.data, self._c, f32, self.alg),
            self.dtype, f"cuSPARSE SpMM algorithm {self.alg}", self.close,
            getattr(cs, "CUSPARSEError", RuntimeError))
        self.workspace_bytes = int(size)
        # At least a few bytes so the pointer is never NULL (cuSPARSE accepts NULL for size 0 on
        # recent versions, but nothing is gained by relying on it).
        self._workspace = cupy.empty(max(int(size), 16), dtype=cupy.uint8)

    def launch(self, B, C, values=None) -> None:
        g = self.graph
        _row_view_check("B", B, g.n_cols, self.k, self.ldb, self.dtype)
        _row_view_check("C", C, g.n_rows, self.k, self.ldc, self.dtype)
        if self._sp is None:  # nnz == 0: A·B is zero
            C.fill(0)
            return
        cs = self._cs
        if values is not None:
            stored = storage_dtype(self.dtype)
            if values.dtype != stored or values.shape != (g.nnz,) or not values.flags.c_contiguous:
                raise ValueError(f"values: expected a contiguous {self.dtype} ({stored}) array of "
                                 f"{g.nnz} entries")
            v_ptr = values.data.ptr
        else:
            v_ptr = self._values.data.ptr
        ptrs = (v_ptr, B.data.ptr, C.data.ptr)
        if ptrs != self._ptrs:
            if ptrs[0] != self._ptrs[0]:
                cs.spMatSetValues(self._sp, ptrs[0])
            if ptrs[1] != self._ptrs[1]:
                cs.dnMatSetValues(self._b, ptrs[1])
            if ptrs[2] != self._ptrs[2]:
                cs.dnMatSetValues(self._c, ptrs[2])
            self._ptrs = ptrs
        op = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
        cs.spMM(self._handle, op, op, self._alpha.ctypes.data, self._sp, self._b,
                self._beta.ctypes.data, self._c, self._f32, self.alg, self._workspace.data.ptr)

    def close(self) -> None:
        """Destroy the descriptors (idempotent)."""
        cs = getattr(self, "_cs", None)
        if cs is None:
            return
        for attr, destroy in (("_sp", cs.destroySpMat), ("_b", cs.destroyDnMat), ("_c", cs.destroyDnMat)):
            desc = getattr(self, attr, None)
            if desc is not None:
                setattr(self, attr, None)
                try:
                    destroy(desc)
                except Exception:  # interpreter shutdown or a dead context: nothing left to free
                    pass

    def __del__(self):
        self.close()


def _cuda_r_32f() -> int:
    from cupy_backends.cuda.api import runtime

    return runtime.CUDA_R_32F


class CusparseSpMMPlan(RowsOutPlan):
    """Vendor SpMM plan: out = A @ B with one cuSPARSE algorithm; B and out C-contiguous."""

    def __init__(self, dgraph: DeviceGraph, name: str, k: int, dtype: str = "float32"):
        super().__init__(dgraph, "spmm", k, 1)
        self.backend = self.schedule = name
        self.provider = "cusparseSpMM"
        self.dtype = dtype_info(dtype).name
        with PrepareTimer(self):
            self.spmm = CusparseSpMM(dgraph, name, k, dtype=dtype)

    def run(self, inputs: tuple, out) -> None:
        self.spmm.launch(inputs[0], out)

    def run_values(self, values, B, out) -> None:
        """out = A(values) @ B with per-call edge values (CSR order) instead of the graph's."""
        self.spmm.launch(B, out, values)

    def close(self) -> None:
        self.spmm.close()


def prepare_spmm(dgraph: DeviceGraph, name: str, k: int, dtype: str = "float32") -> CusparseSpMMPlan:
    algorithm_id(name)  # unknown names fail before any GPU work
    return CusparseSpMMPlan(dgraph, name, k, dtype)
