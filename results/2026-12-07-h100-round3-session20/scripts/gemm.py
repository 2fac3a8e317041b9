"""Host cost per call of a GEMM through torch (mm, F.linear, addmm_) against cuBLAS called
directly through CuPy's binding on torch's stream (the same pure-fp32 math, TF32 off)."""
import time
import numpy as np
import torch, torch.nn.functional as F
import cupy
from cupy_backends.cuda.libs import cublas

dev = torch.device("cuda")


def per_call(fn, n=3000):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


h = cupy.cuda.device.get_cublas_handle()
one, zero = np.array(1, np.float32), np.array(0, np.float32)
pa, pz = one.ctypes.data, zero.ctypes.data
for m, k, n in ((2708, 256, 16), (2708, 1433, 256), (19717, 256, 256)):
    a = torch.randn(m, k, device=dev); w = torch.randn(n, k, device=dev); b = torch.randn(n, device=dev)
    out = torch.empty(m, n, device=dev)
    stream = torch.cuda.current_stream().cuda_stream

    def raw(out=out):
        cublas.setStream(h, torch._C._cuda_getCurrentRawStream(0))
        cublas.sgemm(h, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, n, m, k, pa, w.data_ptr(), k,
                     a.data_ptr(), k, pz, out.data_ptr(), n)

    def raw_alloc():
        o = torch.empty(m, n, device=dev)
        raw(o)
        return o
    raw(); torch.cuda.synchronize()
    err = float((out - a @ w.t()).abs().max() / (a @ w.t()).abs().max())
    print(f"m={m} k={k} n={n}: raw sgemm max rel diff vs torch {err:.2e}; bitwise equal {torch.equal(out, a @ w.t())}")
    print(f"  torch.mm(a, w.t()) {per_call(lambda: torch.mm(a, w.t())):.1f} us; F.linear {per_call(lambda: F.linear(a, w)):.1f}; "
          f"F.linear+bias {per_call(lambda: F.linear(a, w, b)):.1f}; out.addmm_ {per_call(lambda: out.addmm_(a, w.t())):.1f}; "
          f"mv {per_call(lambda: torch.mv(a.t(), a[:, 0])):.1f}")
    print(f"  raw sgemm (setStream each call) {per_call(raw):.1f} us; raw + torch.empty {per_call(raw_alloc):.1f}; "
          f"torch.empty {per_call(lambda: torch.empty(m, n, device=dev)):.1f}")
    # GPU time of each (torch's choice vs the raw call)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for name, fn in (("torch.mm", lambda: torch.mm(a, w.t(), out=out)), ("raw", raw)):
        for _ in range(20): fn()
        s.record()
        for _ in range(200): fn()
        e.record(); e.synchronize()
        print(f"  GPU {name}: {s.elapsed_time(e) / 200 * 1e3:.1f} us")
