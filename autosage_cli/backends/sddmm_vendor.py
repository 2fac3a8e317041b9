"""The vendor SDDMM: out[e] = a_e * <X[row e], Y[col e]> by cusparseSDDMM, or a CuPy composition.

CuPy has no cusparseSDDMM binding, so the providers are tried in this order:
  1. nvmath-python's cuSPARSE bindings (cusparseSDDMM called directly, preprocess once);
  2. `torch.sparse.sampled_addmm(C, X, Y.t(), beta=0, out=C)`: Y row-major (n x K) passed as a
     transposed view is the fast layout (a contiguous K x n was 10-25x slower on the H200). C is a
     torch CSR tensor sharing our crow/col arrays whose values alias our output, and it is passed
     as both input and out: torch's copy of input into out then sees the same memory and does
     nothing (ATen copy_ returns early for identical views), so no output is allocated. torch does
     allocate cuSPARSE's workspace each call from its caching allocator (no cudaMalloc after
     warm-up) and runs cusparseSDDMM_preprocess each call: that is what torch users pay;
  3. the gather-dot composition in CuPy: take rows of X and Y per edge, multiply, sum, in chunks
     of bounded memory (buffers made once).
Each library provider (1, 2) is checked once when prepared, on random inputs against a CuPy
gather-dot sample, with the output poisoned with NaN: a provider that fails or disagrees is skipped
(the reason is kept in `fallback_reasons`); the gather-dot composition is that same arithmetic and
is not checked against itself. If the poisoned output leaks through (cuSPARSE reading C although beta = 0),
that provider zero-fills the output before each launch, and says so in `provider`.

torch's op ignores A's values (it samples the pattern), so the plan multiplies by A's values
afterwards with one CuPy elementwise kernel when they are not all 1 (checked once): part of the
vendor's cost of the same op. torch and CuPy share one stream (torch runs on a
`torch.cuda.ExternalStream` of CuPy's current stream, or both on the legacy default stream), so
CUDA events recorded on the CuPy stream time the torch work.
"""
from __future__ import annotations

import contextlib
import importlib.util
from collections import OrderedDict

import numpy as np

from .base import DeviceGraph, EdgesOutPlan, PrepareTimer

PROVIDER_NVMATH = "nvmath-python cusparseSDDMM"
PROVIDER_TORCH = "torch.sparse.sampled_addmm"
PROVIDER_GATHER = "cupy gather-dot"
SDDMM_VENDOR_NAME = "cusparse-sddmm"          # cusparseSDDMM through nvmath-python, preprocessed once
TORCH_SDDMM_NAME = "torch-sampled-addmm"      # cusparseSDDMM through torch, preprocessed every call
GATHER_DOT_NAME = "gather-dot"                # what PyG and DGL compose: gather, multiply, sum
# Each vendor SDDMM entry and the one provider it runs: the SDDMM baseline is the best of those
# that can run here, timed side by side (a provider that cannot run is a failed vendor, with why).
VENDOR_PROVIDERS = {SDDMM_VENDOR_NAME: PROVIDER_NVMATH, TORCH_SDDMM_NAME: PROVIDER_TORCH,
                    GATHER_DOT_NAME: PROVIDER_GATHER}
_CHECK_EDGES = 4096          # edges compared with the gather-dot sample when a provider is checked
_CHECK_TOLERANCE = 1e-4


def sddmm_vendor_names() -> list[str]:
    """The vendor SDDMM entries whose library is installed (no import): cusparseSDDMM through
    nvmath-python, then through torch, then the gather-dot composition (always)."""
    installed = [name for name, module in ((SDDMM_VENDOR_NAME, "nvmath"), (TORCH_SDDMM_NAME, "torch"))
                 if importlib.util.find_spec(module) is not None]
    return installed + [GATHER_DOT_NAME]


def edge_rows(dgraph: DeviceGraph):
    """Row id of every edge (CuPy, graph index dtype), made once per graph and kept in
    `dgraph.derived["edge_rows"]`."""
    import cupy

    rows = dgraph.derived.get("edge_rows")
    if rows is None:
        ids = cupy.arange(dgraph.nnz, dtype=dgraph.indptr.dtype)
        rows = (cupy.searchsorted(dgraph.indptr, ids, side="right") - 1).astype(dgraph.indices.dtype)
        dgraph.derived["edge_rows"] = rows
    return rows


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
            ext = self._streams[ptr] = torch.cuda.ExternalStream(ptr)
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

    def tensor(self, arr):
        """A torch tensor sharing `arr`'s memory (same shape and strides)."""
        key = (arr.data.ptr, arr.shape, arr.strides, arr.dtype.str)
        return self.cached(key, lambda: self.torch.from_dlpack(arr))

    def clear(self) -> None:
        self._views.clear()


class _GatherDot:
    """out[e] = <X[row e], Y[col e]> in CuPy, chunked so temporaries stay under ~2 x 64 MiB."""
    provider = PROVIDER_GATHER
    # CuPy's own gathers, product and sum, writing every entry of out: the launch on random inputs
    # that checks a library provider would only repeat them (on a 100M-edge graph at K=128 that
    # is a quarter of a second per prepare). The probe and the bench still verify its output.
    needs_check = False

    def __init__(self, dgraph: DeviceGraph, k: int, chunk_bytes: int = 64 << 20):
        import cupy

        self.rows, self.cols = edge_rows(dgraph), dgraph.indices
        chunk = max(1, min(dgraph.nnz, chunk_bytes // (4 * k)))
        self.bx = cupy.empty((chunk, k), dtype=cupy.float32)
        self.by = cupy.empty((chunk, k), dtype=cupy.float32)
        self.spans = [(s, min(s + chunk, dgraph.nnz)) for s in range(0, dgraph.nnz, chunk)]

    def launch(self, X, Y, out) -> None:
        import cupy

        for s, e in self.spans:
            bx, by = self.bx[: e - s], self.by[: e - s]
            cupy.take(X, self.rows[s:e], axis=0, out=bx)
            cupy.take(Y, self.cols[s:e], axis=0, out=by)
            cupy.multiply(bx, by, out=bx)
            cupy.sum(bx, axis=1, out=out[s:e])

    def forget_views(self) -> None:
        pass

    def close(self) -> None:
        pass


class _TorchSampledAddmm:
    provider = PROVIDER_TORCH

    def __init__(self, dgraph: DeviceGraph, k: int, launch_sets: int):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.graph, self.torch = dgraph, torch
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
        return self.bridge.cached(("csr", out.data.ptr, out.shape), lambda: self.torch.sparse_csr_tensor(
            self.crow, self.col, self.bridge.tensor(out), size=(g.n_rows, g.n_cols),
            check_invariants=False))

    def launch(self, X, Y, out) -> None:
        b = self.bridge
        with b.stream():
            c = self._csr_of(out)
            self.torch.sparse.sampled_addmm(c, b.tensor(X), b.tensor(Y).t(), beta=0.0, out=c)

    def forget_views(self) -> None:
        self.bridge.clear()

    def close(self) -> None:
        self.bridge.clear()


class _NvmathSDDMM:
    """cusparseSDDMM through nvmath-python: A = X (row-major, ld = ldx), B = Y^T described as a
    column-major K x n_cols matrix with ld = ldy (the same memory as Y row-major), C = the graph's
    pattern whose values pointer is the output."""
    provider = PROVIDER_NVMATH

    def __init__(self, dgraph: DeviceGraph, k: int, ldx: int, ldy: int):
        import cupy
        from nvmath.bindings import cusparse as nv

        self.nv, self.graph = nv, dgraph
        f32 = int(cupy.cuda.runtime.CUDA_R_32F)
        idx = nv.IndexType.INDEX_64I if dgraph.indices.dtype == cupy.int64 else nv.IndexType.INDEX_32I
        self._f32, self._alg = f32, int(nv.SDDMMAlg.DEFAULT)
        self._op = int(nv.Operation.NON_TRANSPOSE)
        self._alpha = np.ones(1, dtype=np.float32)
        self._beta = np.zeros(1, dtype=np.float32)
        self.handle = nv.create()
        nv.set_pointer_mode(self.handle, int(nv.PointerMode.HOST))
        self._placeholder = cupy.empty(4, dtype=cupy.float32)
        p = self._placeholder.data.ptr  # never dereferenced: every launch re-points the descriptors
        self.a = nv.create_dn_mat(dgraph.n_rows, k, ldx, p, f32, int(nv.Order.ROW))
        self.b = nv.create_dn_mat(k, dgraph.n_cols, ldy, p, f32, int(nv.Order.COL))
        self.c = nv.create_csr(dgraph.n_rows, dgraph.n_cols, dgraph.nnz, dgraph.indptr.data.ptr,
                               dgraph.indices.data.ptr, p, int(idx), int(idx),
                               int(nv.IndexBase.ZERO), f32)
        size = np.zeros(1, dtype=np.uint64)  # the binding writes the size through this pointer
        nv.sddmm_buffer_size(self.handle, self._op, self._op, self._alpha.ctypes.data, self.a,
                             self.b, self._beta.ctypes.data, self.c, f32, self._alg, size.ctypes.data)
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


def _check_view(name: str, arr, rows: int, k: int, ld: int) -> None:
    import cupy

    if arr.dtype != cupy.float32 or arr.shape != (rows, k):
        raise ValueError(f"{name}: expected float32 {(rows, k)}, got {arr.dtype} {tuple(arr.shape)}")
    if (rows > 1 and arr.strides[0] != 4 * ld) or (k > 1 and arr.strides[1] != 4):
        raise ValueError(f"{name}: expected rows {ld} floats apart with contiguous elements")


class VendorSDDMM:
    """Unscaled vendor SDDMM for one graph and width: `launch(X, Y, out)` writes
    out[e] = <X[row e], Y[col e]> (A's values are *not* applied).

    X: CuPy float32 (n_rows, k), rows `ldx` floats apart, elements contiguous (a C-contiguous array,
    or a per-head view `Q[:, h, :]` of a C-contiguous (n, H, d) array: ldx = H*d). Y: (n_cols, k)
    likewise with `ldy`. out: a contiguous float32 array of nnz entries (e.g. `S[h]` of an (H, nnz)
    array). `provider` names the implementation chosen; `zero_first` says whether it zero-fills out
    before each launch. `launch_sets` = how many distinct (X, Y, out) triples the caller cycles
    through (H for a per-head loop): the torch provider memoizes that many sets of zero-copy views
    (which keep those arrays alive while memoized)."""

    def __init__(self, dgraph: DeviceGraph, k: int, ldx: int | None = None, ldy: int | None = None,
                 providers: tuple[str, ...] | None = None, launch_sets: int = 1):
        if k < 1:
            raise ValueError(f"K must be >= 1, got {k}")
        self.graph, self.k = dgraph, int(k)
        self.ldx, self.ldy = int(ldx or k), int(ldy or k)
        if self.ldx < k or self.ldy < k:
            raise ValueError(f"leading dimensions must be >= K={k}")
        self.fallback_reasons: list[str] = []
        self.zero_first = False
        order = providers or (PROVIDER_NVMATH, PROVIDER_TORCH, PROVIDER_GATHER)
        self.impl = None
        for provider in order:
            try:
                impl = self._make(provider, launch_sets)
                if dgraph.nnz and getattr(impl, "needs_check", True):
                    self._check(impl)
            except Exception as exc:  # a provider that cannot run here is an outcome, not a crash
                self.fallback_reasons.append(f"{provider}: {type(exc).__name__}: {exc}".strip())
                continue
            self.impl = impl
            break
        if self.impl is None:
            raise RuntimeError("no SDDMM provider works: " + "; ".join(self.fallback_reasons))

    @property
    def provider(self) -> str:
        return self.impl.provider + (" (output zero-filled first)" if self.zero_first else "")

    @property
    def is_cusparse(self) -> bool:
        return self.impl.provider in (PROVIDER_NVMATH, PROVIDER_TORCH)

    def _make(self, provider: str, launch_sets: int):
        if provider == PROVIDER_NVMATH:
            if importlib.util.find_spec("nvmath") is None:
                raise ImportError("nvmath-python is not installed")
            return _NvmathSDDMM(self.graph, self.k, self.ldx, self.ldy)
        if provider == PROVIDER_TORCH:
            if importlib.util.find_spec("torch") is None:
                raise ImportError("torch is not installed")
            return _TorchSampledAddmm(self.graph, self.k, launch_sets)
        if provider == PROVIDER_GATHER:
            return _GatherDot(self.graph, self.k)
        raise ValueError(f"unknown SDDMM provider {provider!r}")

    def _check(self, impl) -> None:
        """Run once on random strided inputs with a NaN-poisoned output; compare a sample of edges
        with a direct CuPy computation. Sets zero_first if the poison survives a launch."""
        import cupy

        g, k = self.graph, self.k
        rng = cupy.random.default_rng(1234)
        X = rng.uniform(-1, 1, (g.n_rows, self.ldx), dtype=cupy.float32)[:, :k]
        Y = rng.uniform(-1, 1, (g.n_cols, self.ldy), dtype=cupy.float32)[:, :k]
        out = cupy.full(g.nnz, cupy.nan, dtype=cupy.float32)
        impl.launch(X, Y, out)
        if bool(cupy.isnan(out).any()):
            self.zero_first = True
            out.fill(0)
            impl.launch(X, Y, out)
        edges = cupy.unique(cupy.linspace(0, g.nnz - 1, min(g.nnz, _CHECK_EDGES)).astype(cupy.int64))
        rows, cols = edge_rows(g)[edges], g.indices[edges]
        want = (X[rows].astype(cupy.float64) * Y[cols].astype(cupy.float64)).sum(axis=1)
        got = out[edges].astype(cupy.float64)
        err = float(cupy.linalg.norm(got - want) / max(float(cupy.linalg.norm(want)), 1e-30))
        impl.forget_views()  # do not keep the check's arrays alive
        if not np.isfinite(err) or err > _CHECK_TOLERANCE:
            raise RuntimeError(f"disagrees with a direct computation (relative error {err:.2e})")

    def launch(self, X, Y, out) -> None:
        g = self.graph
        _check_view("X", X, g.n_rows, self.k, self.ldx)
        _check_view("Y", Y, g.n_cols, self.k, self.ldy)
        if out.dtype != np.float32 or out.shape != (g.nnz,) or not out.flags.c_contiguous:
            raise ValueError(f"out: expected a contiguous float32 array of {g.nnz} entries")
        if g.nnz == 0:
            return
        if self.zero_first:
            out.fill(0)
        self.impl.launch(X, Y, out)

    def close(self) -> None:
        if self.impl is not None:
            self.impl.close()


class SDDMMVendorPlan(EdgesOutPlan):
    """Vendor SDDMM plan: out[e] = a_e <X[i], Y[j]> by the one provider of vendor entry `name`
    (VENDOR_PROVIDERS); `provider` says which ran."""

    def __init__(self, dgraph: DeviceGraph, name: str, k: int):
        super().__init__(dgraph, "sddmm", k, 1)
        with PrepareTimer(self):
            self.sddmm = VendorSDDMM(dgraph, k, providers=(VENDOR_PROVIDERS[name],))
            # the providers sample the pattern only; A's values are applied afterwards unless all 1.
            self.scale_by_values = bool(dgraph.nnz) and not bool((dgraph.values == 1).all())
        self.backend = self.schedule = name
        self.provider = self.sddmm.provider + (" x values" if self.scale_by_values else "")
        self.fallback_reasons = self.sddmm.fallback_reasons

    def run(self, inputs: tuple, out) -> None:
        import cupy

        X, Y = inputs
        self.sddmm.launch(X, Y, out)
        if self.scale_by_values:
            cupy.multiply(out, self.graph.values, out=out)

    def close(self) -> None:
        self.sddmm.close()


def prepare_sddmm(dgraph: DeviceGraph, name: str, k: int) -> SDDMMVendorPlan:
    if name not in VENDOR_PROVIDERS:
        raise ValueError(f"unknown SDDMM vendor {name!r}")
    return SDDMMVendorPlan(dgraph, name, k)
