"""Framework baselines, timed side by side with autosage in one process.

  spmm       backend "torch": torch's CSR SpMM on a CSR tensor sharing our arrays (DLPack), written
             straight into the output through `torch.addmm(C, A, B, beta=0, out=C)`: the same
             cuSPARSE call `torch.sparse.mm(A, B)` makes, without the zero-filled result and copy
             that `torch.sparse.mm` adds (so this baseline is, if anything, flattering to torch).
             If that path leaks the poisoned output (C read although beta = 0) it falls back to
             `C.copy_(torch.sparse.mm(A, B))` and says so in `provider`.
             PyG's own SpMM (`torch_geometric.utils.spmm`) on a torch CSR tensor calls
             torch.sparse.mm, so it would time the same kernels and is not repeated.
  attention  backend "pyg": GATConv's pipeline. scores = (Q[row] * K[col]).sum(-1) * scale,
             alpha = torch_geometric.utils.softmax(scores, row, num_nodes=n),
             out = torch_geometric.utils.scatter(alpha[..., None] * V[col], row, reduce="sum").
             It materialises several nnz x H x d tensors; `pyg_attention_bytes` predicts the peak
             and the baseline is skipped with the reason ("would need N GB") instead of running
             out of memory.
  sddmm      none: torch's only SDDMM is the vendor entry itself (backends.sddmm_vendor).

These pipelines allocate in run() (framework temporaries from torch's caching allocator): that is
their real cost. Every plan runs torch on CuPy's current stream, so CUDA events time it correctly.
`prepare_baselines` returns [] when torch (or, for attention, PyG) is not importable; pass a list
as `skipped` to receive (backend, reason) for every baseline not prepared. In float16/bfloat16 the
baselines run torch in that type on the same memory (bfloat16's uint16 bit patterns viewed as
torch.bfloat16), A's values rounded to it as the other backends read them.
"""
from __future__ import annotations

import importlib.util
import math

from .. import dtypes
from .base import DeviceGraph, HeadsOutPlan, Plan, PrepareTimer, RowsOutPlan, random_inputs
from .sddmm_providers import TorchBridge, edge_rows
from .timing import poison
from .torch_sparse import csr_tensor
from .value_arrays import graph_values, to_float32

_MEMORY_HEADROOM = 0.85   # use at most this share of the free device memory


def pyg_attention_bytes(n_rows: int, nnz: int, heads: int, d: int, elem: int = 4) -> int:
    """Predicted peak device bytes of the PyG pipeline: Q[row], K[col] and their product alive at
    once (3 x nnz*H*d elements), scores and softmax temporaries (4 x nnz*H), the int64 row and
    column index vectors, and the n*H*d result."""
    return elem * (3 * nnz * heads * d + 4 * nnz * heads + n_rows * heads * d) + 16 * nnz


def _free_device_bytes() -> int:
    """Free device memory plus what CuPy's and torch's pools hold unused (both can hand it out)."""
    import cupy

    free = cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes()
    try:
        import torch

        free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    except Exception:  # torch absent or without CUDA: only CuPy's view counts
        pass
    return int(free)


def _poisoned_probe(plan: Plan, shapes) -> bool:
    """Run `plan` once on random inputs with a NaN-poisoned output; True if the output is finite."""
    import cupy

    inputs = random_inputs(shapes, seed=7, dtype=plan.dtype)
    out = poison(plan.alloc_out())
    plan.run(inputs, out)
    ok = bool(cupy.isfinite(to_float32(out, plan.dtype)).all())
    plan.bridge.clear()
    return ok


class TorchSpMMPlan(RowsOutPlan):
    backend = "torch"

    def __init__(self, dgraph: DeviceGraph, k: int, dtype: str = dtypes.DEFAULT):
        super().__init__(dgraph, "spmm", k, 1, dtype)
        import torch

        self.torch = torch
        with PrepareTimer(self):
            self.bridge = TorchBridge(capacity=4)
            with self.bridge.stream():  # (no edges: run() writes zeros, nothing to wrap)
                self.A = None if not dgraph.nnz else csr_tensor(
                    torch.from_dlpack(dgraph.indptr), torch.from_dlpack(dgraph.indices),
                    self.bridge.tensor(graph_values(dgraph, dtype), dtype), (dgraph.n_rows, dgraph.n_cols))
            self.write_in_place = True
            self.fallback_reason = None
            if dgraph.nnz:
                try:
                    clean = _poisoned_probe(self, [(dgraph.n_cols, k)])
                except Exception as exc:  # out= refused by this torch build
                    clean, self.fallback_reason = False, f"{type(exc).__name__}: {exc}"
                self.write_in_place = clean
                if not clean and self.fallback_reason is None:
                    self.fallback_reason = "torch.addmm(out=) left NaN in a poisoned output"
        self.schedule = "torch.addmm(out=)" if self.write_in_place else "torch.sparse.mm+copy"
        self.provider = self.schedule

    def run(self, inputs: tuple, out) -> None:
        if self.graph.nnz == 0:
            out.fill(0)
            return
        b, torch = self.bridge, self.torch
        with b.stream():
            B, C = b.tensor(inputs[0], self.dtype), b.tensor(out, self.dtype)
            if self.write_in_place:
                torch.addmm(C, self.A, B, beta=0.0, alpha=1.0, out=C)
            else:
                C.copy_(torch.sparse.mm(self.A, B))


class PyGAttentionPlan(HeadsOutPlan):
    backend = "pyg"
    schedule = "pyg.gather-softmax-scatter"
    provider = "torch_geometric.utils.softmax + scatter"

    def __init__(self, dgraph: DeviceGraph, d: int, heads: int, scale: float | None,
                 dtype: str = dtypes.DEFAULT):
        super().__init__(dgraph, "attention", d, heads, dtype)
        import torch
        from torch_geometric.utils import scatter, softmax

        self.torch, self._softmax, self._scatter = torch, softmax, scatter
        self.scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
        with PrepareTimer(self):
            self.bridge = TorchBridge(capacity=4)
            with self.bridge.stream():
                # PyG's index arguments are int64, as GATConv's edge_index is.
                if dgraph.nnz:
                    self.row = torch.from_dlpack(edge_rows(dgraph)).long()
                    self.col = torch.from_dlpack(dgraph.indices).long()

    def run(self, inputs: tuple, out) -> None:
        if self.graph.nnz == 0:
            out.fill(0)
            return
        b = self.bridge
        with b.stream():
            Q, K, V = (b.tensor(x, self.dtype) for x in inputs)
            row, col = self.row, self.col
            scores = (Q[row] * K[col]).sum(-1) * self.scale                    # nnz x H
            alpha = self._softmax(scores, row, num_nodes=self.graph.n_rows)     # nnz x H
            result = self._scatter(alpha.unsqueeze(-1) * V[col], row, dim=0,
                                   dim_size=self.graph.n_rows, reduce="sum")    # n x H x d
            b.tensor(out, self.dtype).copy_(result)


def _torch_cuda_reason() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


def prepare_baselines(dgraph: DeviceGraph, wanted, k: int, heads: int = 1,
                      scale: float | None = None, skipped: list | None = None,
                      dtype: str = dtypes.DEFAULT) -> list[Plan]:
    """The framework baselines named in `wanted` (an op spec's `baselines`: "torch" for SpMM,
    "pyg" for attention) that can run here in `dtype` (see the module docstring)."""
    skipped = skipped if skipped is not None else []
    wanted = list(wanted)
    if not wanted:
        return []
    reason = _torch_cuda_reason()
    if reason is not None:
        skipped.extend((name, reason) for name in wanted)
        return []
    plans = [TorchSpMMPlan(dgraph, k, dtype)] if "torch" in wanted else []
    if "pyg" in wanted:
        plans += _pyg_plans(dgraph, k, heads, scale, skipped, dtype)
    return plans


def _pyg_plans(dgraph: DeviceGraph, k: int, heads: int, scale, skipped: list,
               dtype: str = dtypes.DEFAULT) -> list[Plan]:
    if importlib.util.find_spec("torch_geometric") is None:
        skipped.append(("pyg", "torch_geometric is not installed"))
        return []
    need = pyg_attention_bytes(dgraph.n_rows, dgraph.nnz, heads, k, dtypes.itemsize(dtype))
    free = _free_device_bytes()
    if need > _MEMORY_HEADROOM * free:
        skipped.append(("pyg", f"would need {need / 1e9:.1f} GB, {free / 1e9:.1f} GB free"))
        return []
    return [PyGAttentionPlan(dgraph, k, heads, scale, dtype)]
