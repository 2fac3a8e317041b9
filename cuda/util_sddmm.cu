// util_sddmm.cu: the rest of the gather-dot SDDMM composition (multiply, row sums) and A's values
// applied to a vendor SDDMM that sampled the pattern only.
#include "util.cuh"

__global__ void autosage_multiply(float* a, const float* b, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) a[i] = __fmul_rn(a[i], b[i]);
}

// out[i] = sum of row i of x (n x k, float32), a warp per row, rounded once to C.
template <class C>
__global__ void autosage_row_sums(const float* x, long long n, int k, typename C::T* out) {
    const int lane = threadIdx.x & 31;
    const long long warps = grid_stride() >> 5;
    for (long long r = first_index() >> 5; r < n; r += warps) {
        float s = 0.0f;
        for (int j = lane; j < k; j += 32) s += x[r * k + j];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) out[r] = C::store(s);
    }
}

// out[e] = round(out[e] x values[e]): A's values applied to an SDDMM that sampled the pattern only.
template <class C>
__global__ void autosage_scale_edges(typename C::T* out, const typename C::T* values, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride())
        out[i] = C::store(__fmul_rn(C::load(out[i]), C::load(values[i])));
}
