// util.cuh: what autosage's helper kernels share (util*.cu): the value codecs, the grid-stride loop
// and the block sum.
//
// The helper kernels are the ones autosage runs around the candidates it tunes (input generation,
// fills, conversions, verification sums, per-edge row ids, the gather-dot SDDMM composition, the
// vendor attention's softmax steps, the float64 device reference, the timing spin; and the attention
// backward's multi-head products, util_heads.cu), in place of CuPy's elementwise and reduction
// kernels: each CuPy expression is an NVRTC compile of 0.1-0.4 s the first time a machine runs it. They are compiled in groups (kernels/util.py), one module each, and a
// tune compiles only the groups it launches; each file holds one family of groups, because a
// module compiles every plain (non-template) kernel of its file whatever its name expressions ask.
//
// No headers are included: the 2-byte types are handled as their bit patterns (unsigned short)
// with the PTX conversions, so the modules compile as fast as float32 code. Element types are
// codecs (F32, F64, F16, BF16): `T` is the stored type, `load` widens one element exactly, `store`
// rounds a float to nearest even. Every kernel walks its elements with a grid-stride loop, so any
// grid size is correct; kernels/util.py picks it.
#pragma once

namespace autosage_util {

struct F32 {
    typedef float T;
    static __device__ __forceinline__ float load(float x) { return x; }
    static __device__ __forceinline__ float store(float x) { return x; }
};

struct F64 {
    typedef double T;
    static __device__ __forceinline__ double load(double x) { return x; }
    static __device__ __forceinline__ double store(float x) { return (double)x; }
};

struct F16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float load(unsigned short x) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
        return f;
    }
    static __device__ __forceinline__ unsigned short store(float x) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
        return h;
    }
};

struct BF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float load(unsigned short x) {
        return __uint_as_float(((unsigned int)x) << 16);
    }
    // Round to nearest even; a NaN stays a quiet NaN (as __float2bfloat16_rn and ml_dtypes).
    static __device__ __forceinline__ unsigned short store(float x) {
        unsigned int b = __float_as_uint(x);
        if ((b & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((b >> 16) | 0x40u);
        return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
};

__device__ __forceinline__ long long first_index() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ long long grid_stride() {
    return (long long)gridDim.x * blockDim.x;
}

// splitmix64's finalizer: a counter-based generator, so element i of a stream is the same whatever
// the launch geometry, and inputs are reproducible from (seed, stream) alone.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Sum of a value over the block; thread 0's result is the block's (blockDim.x a multiple of 32).
template <typename V>
__device__ __forceinline__ V block_sum(V v) {
    __shared__ V partial[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();   // partial may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : V(0);
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

}  // namespace autosage_util

using namespace autosage_util;
