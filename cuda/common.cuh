// common.cuh: small device helpers shared by every autosage kernel family.
//
// Value types: kernels are templates on the stored value type T and always accumulate in float.
// Only float overloads exist today; fp16/bf16 are added by overloading to_float/from_float and
// load_vec/store_vec for __half/__nv_bfloat16 (the kernels themselves do not change).
//
// Vector access: load_vec<V>/store_vec<V> move V consecutive elements with one instruction
// (16 bytes for float, V = 4). The caller guarantees alignment: every plan checks base pointers and
// leading dimensions on the host before launching, and schedules refuse K % V != 0.
#pragma once

#define AUTOSAGE_FULL_MASK 0xffffffffu
// Kernels are compiled for any block size up to 1024 threads with one block per SM guaranteed,
// which caps them at 64 registers per thread (at least 50% occupancy for the schedules' 256-thread
// blocks). Plain __launch_bounds__(1024) made ptxas target two such blocks per SM, cap at 32
// registers and spill (nvcc 13.0, sm_90); the nvcc check fails on any spill.
#define AUTOSAGE_MAX_THREADS 1024
#define AUTOSAGE_LAUNCH_BOUNDS __launch_bounds__(AUTOSAGE_MAX_THREADS, 1)

namespace autosage {

__device__ __forceinline__ float to_float(float x) { return x; }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }

// Read-only scalar load through the non-coherent path.
__device__ __forceinline__ float load_scalar(const float* __restrict__ p) { return __ldg(p); }

template <int V>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float (&out)[V]) {
    static_assert(V == 1 || V == 2 || V == 4, "vector width must be 1, 2 or 4");
    if constexpr (V == 4) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(p));
        out[0] = t.x; out[1] = t.y; out[2] = t.z; out[3] = t.w;
    } else if constexpr (V == 2) {
        const float2 t = __ldg(reinterpret_cast<const float2*>(p));
        out[0] = t.x; out[1] = t.y;
    } else {
        out[0] = __ldg(p);
    }
}

// Load through L2 only (ld.global.cg), never L1: for data other blocks wrote during this launch
// (split SpMM partials), which a non-coherent L1 might still hold from an earlier launch.
template <int V>
__device__ __forceinline__ void load_vec_cg(const float* p, float (&out)[V]) {
    if constexpr (V == 4) {
        const float4 t = __ldcg(reinterpret_cast<const float4*>(p));
        out[0] = t.x; out[1] = t.y; out[2] = t.z; out[3] = t.w;
    } else if constexpr (V == 2) {
        const float2 t = __ldcg(reinterpret_cast<const float2*>(p));
        out[0] = t.x; out[1] = t.y;
    } else {
        out[0] = __ldcg(p);
    }
}

template <int V>
__device__ __forceinline__ void store_vec(float* __restrict__ p, const float (&v)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (V == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        *p = v[0];
    }
}

template <int V>
__device__ __forceinline__ void atomic_add_vec(float* p, const float (&v)[V]) {
#pragma unroll
    for (int i = 0; i < V; ++i) atomicAdd(p + i, v[i]);
}

// Global thread index in 64 bits: blockIdx.x * blockDim.x overflows 32 bits on large grids.
__device__ __forceinline__ long long global_thread() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31u); }

// Mask of the G consecutive lanes that form the caller's group. Groups of one warp may run
// different trip counts (their rows differ), so group-level shuffles name only their own lanes.
template <int G>
__device__ __forceinline__ unsigned group_mask() {
    if constexpr (G == 32) {
        return AUTOSAGE_FULL_MASK;
    } else {
        return ((1u << G) - 1u) << (lane_id() & ~(G - 1));
    }
}

// Butterfly sum over the G lanes of a group; every lane of the group receives the total.
template <int G>
__device__ __forceinline__ float group_sum(float v, unsigned mask) {
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) v += __shfl_xor_sync(mask, v, off, G);
    return v;
}

}  // namespace autosage
