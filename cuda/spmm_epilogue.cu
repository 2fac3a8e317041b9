// spmm_epilogue.cu: the epilogue of spmm_epilogue.cuh as a launch of its own, in place over C:
//   C[i, c] = ACT(scale * C[i, c] + bias[c], alpha)
// What a vendor SpMM (cuSPARSE, which has no epilogue) runs after its product, so that a fused
// plan's guardrail compares whole results (backends/spmm_epilogue.py). The same EpilogueArgs as
// the fused kernels, so the two differ only by the vendor's sums and one more rounding of C to T.
//
// Knobs (template parameters): T value type; EPI an Epilogue<ACT, BIAS> (always with
// AUTOSAGE_SPMM_EPILOGUE: kernels/compile.py defines it for such an expression).
// Arguments: n_rows; k; C (ldc elements per row); bias (T*, K elements, or nullptr); scale; alpha.
// A grid-stride loop over the n_rows x k elements.
// No standard headers: NVRTC compiles this at run time without a host include path.
#include "spmm_epilogue.cuh"

template <typename T, typename EPI>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_epilogue(const long long n_rows, const int k, T* __restrict__ C,
              const long long ldc AUTOSAGE_EPILOGUE_PARAMS) {
    const auto epi = AUTOSAGE_EPILOGUE_ARGS(EPI);
    const long long n = n_rows * k;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
#pragma unroll 1
    for (long long i = autosage::global_thread(); i < n; i += stride) {
        const long long row = i / k;
        const int col = static_cast<int>(i - row * k);
        T* p = C + row * ldc + col;
        float v[1] = {autosage::to_float(*p)};
        epi.template apply<1>(col, k, v);
        *p = autosage::from_float<T>(v[0]);
    }
}
