"""The vendor SDDMM: out[e] = a_e * <X[row e], Y[col e]> by cusparseSDDMM, or a CuPy composition.

CuPy has no cusparseSDDMM binding, so the providers (backends/sddmm_providers.py) are tried in this
order:
  1. nvmath-python's cuSPARSE bindings (cusparseSDDMM called directly, preprocess once);
  2. `torch.sparse.sampled_addmm(C, X, Y.t(), beta=0, out=C)`: Y row-major (n x K) passed as a
     transposed view is the fast layout (a contiguous K x n was 10-25x slower on the H200). C is a
     torch CSR tensor sharing our crow/col arrays whose values alias our output, and it is passed
     as both input and out: torch's copy of input into out then sees the same memory and does
     nothing (ATen copy_ returns early for identical views), so no output is allocated. torch does
     allocate cuSPARSE's workspace each call from its caching allocator (no cudaMalloc after
     warm-up) and runs cusparseSDDMM_preprocess each call: that is what torch users pay. Skipped
     when nvmath-python's cusparseSDDMM refused the value type: torch runs the same cuSPARSE SDDMM;
  3. the gather-dot composition in CuPy: take rows of X and Y per edge, multiply, sum, in chunks
     of bounded memory (buffers made once).
Each library provider (1, 2) is checked once when prepared, on random inputs against a float64
sum of a sample of edges on the host, with the output poisoned with NaN: a provider that fails or disagrees is skipped
(the reason is kept in `fallback_reasons`); the gather-dot composition is that same arithmetic and
is not checked against itself. If the poisoned output leaks through (cuSPARSE reading C although
beta = 0), that provider zero-fills the output before each launch, and says so in `provider`.

Value types: every provider runs float32, float16 and bfloat16 inputs and output (bfloat16 stored as
uint16 bit patterns, backends/value_arrays.py) where its library allows, with float32 products and
sums: cusparseSDDMM with CUDA_R_16F/CUDA_R_16BF matrices and CUDA_R_32F compute (a type it refuses
fails with cuSPARSE's status), torch's sampled_addmm on bfloat16/float16 views of the same memory,
and the gather-dot composition converting the gathered rows to float32 and rounding the sums. The
check of a provider compares with a float64 sum of the rounded inputs within the type's tolerance.

torch's op ignores A's values (it samples the pattern), so the plan multiplies by A's values
afterwards with one elementwise kernel (autosage's helper module) when they are not all 1 (checked
once): part of the vendor's cost of the same op.

Which vendors a tune's guardrail measures (`sddmm_vendor_names(guardrail=True)`): when
nvmath-python is installed, cusparseSDDMM through it and the gather-dot composition. torch's
sampled_addmm runs the same cuSPARSE SDDMM and repeats its preprocessing on every call, so it can
only be slower than the nvmath entry, which preprocesses once; importing torch costs seconds
(about 6 s cold on the H200's host), more than a whole tune of a small graph. Only where nvmath is
missing does the guardrail use torch's. `autosage bench` measures all three. torch and CuPy share one stream (torch runs on a
`torch.cuda.ExternalStream` of CuPy's current stream, or both on the legacy default stream), so
CUDA events recorded on the CuPy stream time the torch work.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from ..dtypes import storage_dtype, tolerance, info as dtype_info
from .base import DeviceGraph, EdgesOutPlan, PrepareTimer
from .native_output import DtypeRefused
from .sddmm_providers import (PROVIDER_GATHER, PROVIDER_NVMATH, PROVIDER_TORCH, GatherDot,
                              NvmathSDDMM, TorchSampledAddmm, edge_rows)
from .native_common import values_all_ones
from .value_arrays import graph_values

SDDMM_VENDOR_NAME = "cusparse-sddmm"          # cusparseSDDMM through nvmath-python, preprocessed once
TORCH_SDDMM_NAME = "torch-sampled-addmm"      # cusparseSDDMM through torch, preprocessed every call
GATHER_DOT_NAME = "gather-dot"                # what PyG and DGL compose: gather, multiply, sum
# Each vendor SDDMM entry and the one provider it runs: the SDDMM baseline is the best of those
# that can run here, timed side by side (a provider that cannot run is a failed vendor, with why).
VENDOR_PROVIDERS = {SDDMM_VENDOR_NAME: PROVIDER_NVMATH, TORCH_SDDMM_NAME: PROVIDER_TORCH,
                    GATHER_DOT_NAME: PROVIDER_GATHER}
_CHECK_EDGES = 4096          # edges compared with a float64 host sum when a provider is checked
_CHECK_SEED = 1234


def sddmm_vendor_names(guardrail: bool = False) -> list[str]:
    """The vendor SDDMM entries whose library is installed (no import): cusparseSDDMM through
    nvmath-python, then through torch, then the gather-dot composition (always). With `guardrail`,
    the ones a tune measures: torch's only where nvmath-python is missing (module docstring)."""
    installed = [name for name, module in ((SDDMM_VENDOR_NAME, "nvmath"), (TORCH_SDDMM_NAME, "torch"))
                 if importlib.util.find_spec(module) is not None]
    if guardrail and SDDMM_VENDOR_NAME in installed:
        installed = [name for name in installed if name != TORCH_SDDMM_NAME]
    return installed + [GATHER_DOT_NAME]


def _check_view(name: str, arr, rows: int, k: int, ld: int, dtype: str = "float32") -> None:
    import cupy

    stored, size = cupy.dtype(storage_dtype(dtype)), dtype_info(dtype).itemsize
    if arr.dtype != stored or arr.shape != (rows, k):
        raise ValueError(f"{name}: expected {dtype} ({stored}) {(rows, k)}, got {arr.dtype} "
                         f"{tuple(arr.shape)}")
    if (rows > 1 and arr.strides[0] != size * ld) or (k > 1 and arr.strides[1] != size):
        raise ValueError(f"{name}: expected rows {ld} elements apart with contiguous elements")


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
                 providers: tuple[str, ...] | None = None, launch_sets: int = 1, dtype: str = "float32"):
        if k < 1:
            raise ValueError(f"K must be >= 1, got {k}")
        self.graph, self.k, self.dtype = dgraph, int(k), dtype_info(dtype).name
        self.ldx, self.ldy = int(ldx or k), int(ldy or k)
        if self.ldx < k or self.ldy < k:
            raise ValueError(f"leading dimensions must be >= K={k}")
        self.fallback_reasons: list[str] = []
        self.zero_first = False
        order = providers or (PROVIDER_NVMATH, PROVIDER_TORCH, PROVIDER_GATHER)
        self.impl = None
        cusparse_refused = False   # nvmath-python's cusparseSDDMM refused the value type
        for provider in order:
            if provider == PROVIDER_TORCH and cusparse_refused:
                # torch's sampled_addmm is the same cuSPARSE SDDMM: it refuses the type too, and
                # importing torch to hear so costs seconds
                self.fallback_reasons.append(f"{provider}: skipped: cuSPARSE refuses {self.dtype}")
                continue
            try:
                impl = self._make(provider, launch_sets)
                if dgraph.nnz and getattr(impl, "needs_check", True):
                    self._check(impl)
            except Exception as exc:  # a provider that cannot run here is an outcome, not a crash
                cusparse_refused = cusparse_refused or isinstance(exc, DtypeRefused)
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
            return NvmathSDDMM(self.graph, self.k, self.ldx, self.ldy, self.dtype)
        if provider == PROVIDER_TORCH:
            if importlib.util.find_spec("torch") is None:
                raise ImportError("torch is not installed")
            return TorchSampledAddmm(self.graph, self.k, launch_sets, self.dtype)
        if provider == PROVIDER_GATHER:
            return GatherDot(self.graph, self.k, dtype=self.dtype)
        raise ValueError(f"unknown SDDMM provider {provider!r}")

    def _check(self, impl) -> None:
        """Run once on random strided inputs with a NaN-poisoned output; compare a sample of edges
        with a float64 sum on the host. Sets zero_first if the poison survives a launch. The
        inputs, poison, NaN count and gathers are the helper module's kernels (kernels/util.py)."""
        import cupy

        from ..kernels import util

        g, k, t = self.graph, self.k, self.dtype
        stored = storage_dtype(t)
        X = util.uniform((g.n_rows, self.ldx), _CHECK_SEED, 0, stored)[:, :k]
        Y = util.uniform((g.n_cols, self.ldy), _CHECK_SEED, 1, stored)[:, :k]
        out = util.fill(cupy.empty(g.nnz, dtype=stored), np.nan)
        impl.launch(X, Y, out)
        if util.count_nan(out):
            self.zero_first = True
            util.fill(out, 0)
            impl.launch(X, Y, out)
        edges = np.unique(np.linspace(0, g.nnz - 1, min(g.nnz, _CHECK_EDGES)).astype(np.int64))
        rows = np.searchsorted(g.host.indptr, edges, side="right") - 1
        cols = g.host.indices[edges].astype(np.int64)

        def gathered(src, ld, ids, width):   # float32 rows of the sample, on the host
            dst = cupy.empty((ids.size, width), dtype=cupy.float32)
            ids = cupy.asarray(ids, dtype=g.indices.dtype)   # the graph's index type: its helper group
            return util.gather_rows(src, ld, ids, width, dst).get().astype(np.float64)

        # float64 sums of the inputs as rounded to the type
        want = (gathered(X, self.ldx, rows, k) * gathered(Y, self.ldy, cols, k)).sum(axis=1)
        got = gathered(out, 1, edges, 1)[:, 0]
        err = float(np.linalg.norm(got - want) / max(float(np.linalg.norm(want)), 1e-30))
        impl.forget_views()  # do not keep the check's arrays alive
        bound = tolerance(t, k)   # SDDMM sums K products per output
        if not np.isfinite(err) or err > bound:
            raise RuntimeError(f"disagrees with a direct computation (relative error {err:.2e} > {bound:.2g})")

    def launch(self, X, Y, out) -> None:
        g = self.graph
        _check_view("X", X, g.n_rows, self.k, self.ldx, self.dtype)
        _check_view("Y", Y, g.n_cols, self.k, self.ldy, self.dtype)
        stored = storage_dtype(self.dtype)
        if out.dtype != stored or out.shape != (g.nnz,) or not out.flags.c_contiguous:
            raise ValueError(f"out: expected a contiguous {self.dtype} ({stored}) array of {g.nnz} entries")
        if g.nnz == 0:
            return
        if self.zero_first:
            from ..kernels import util

            util.fill(out, 0)
        self.impl.launch(X, Y, out)

    def close(self) -> None:
        if self.impl is not None:
            self.impl.close()


class SDDMMVendorPlan(EdgesOutPlan):
    """Vendor SDDMM plan: out[e] = a_e <X[i], Y[j]> by the one provider of vendor entry `name`
    (VENDOR_PROVIDERS); `provider` says which ran."""

    def __init__(self, dgraph: DeviceGraph, name: str, k: int, dtype: str = "float32"):
        super().__init__(dgraph, "sddmm", k, 1)
        self.dtype = dtype_info(dtype).name
        with PrepareTimer(self):
            self.sddmm = VendorSDDMM(dgraph, k, providers=(VENDOR_PROVIDERS[name],), dtype=self.dtype)
            # the providers sample the pattern only; A's values are applied afterwards unless all 1:
            # out = round(out x a) in float32, with the values as rounded to the type (the reference's)
            self.scale_by_values = bool(dgraph.nnz) and not values_all_ones(dgraph)
            self.values = graph_values(dgraph, self.dtype) if self.scale_by_values else None
        self.backend = self.schedule = name
        self.provider = self.sddmm.provider + (" x values" if self.scale_by_values else "")
        self.fallback_reasons = self.sddmm.fallback_reasons

    def run(self, inputs: tuple, out) -> None:
        X, Y = inputs
        self.sddmm.launch(X, Y, out)
        if self.scale_by_values:
            from ..kernels import util

            util.scale_edges(out, self.values)

    def close(self) -> None:
        self.sddmm.close()


def prepare_sddmm(dgraph: DeviceGraph, name: str, k: int, dtype: str = "float32") -> SDDMMVendorPlan:
    if name not in VENDOR_PROVIDERS:
        raise ValueError(f"unknown SDDMM vendor {name!r}")
    return SDDMMVendorPlan(dgraph, name, k, dtype)
