// common.cuh: small device helpers shared by every autosage kernel family.
//
// Value types: kernels are templates on the stored value type T (float, __half, __nv_bfloat16) and
// always accumulate in float: to_float/from_float convert one element, load_vec/store_vec convert a
// vector of V elements to and from float registers. The kernels themselves never name a type.
//
// Vector access: load_vec<V>/store_vec<V> move V consecutive elements with one instruction: for
// float V = 1, 2, 4 (4 to 16 bytes); for the 2-byte types V = 1, 2, 4, 8 (2 to 16 bytes: V = 4 is
// an 8-byte load, V = 8 a 16-byte one). The caller guarantees alignment to V elements: every plan
// checks base pointers and leading dimensions on the host before launching, and schedules refuse
// K % V != 0 and vectors wider than 16 bytes.
#pragma once
// The 2-byte types' headers are included only when the compiler is told an instantiation needs
// them (-DAUTOSAGE_2BYTE_TYPES=1, kernels/compile.py passes it for __half/__nv_bfloat16
// expressions): they add ~40% to the compile time of a small kernel, which float32 need not pay.
// NVRTC has them built in (CUDA 12 and later); nvcc finds them in its toolkit.
#ifndef AUTOSAGE_2BYTE_TYPES
#define AUTOSAGE_2BYTE_TYPES 0
#endif
#if AUTOSAGE_2BYTE_TYPES
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif

#define AUTOSAGE_FULL_MASK 0xffffffffu
// Kernels are compiled for any block size up to 1024 threads with one block per SM guaranteed,
// which caps them at 64 registers per thread (at least 50% occupancy for the schedules' 256-thread
// blocks). Plain __launch_bounds__(1024) made ptxas target two such blocks per SM, cap at 32
// registers and spill (nvcc 13.0, sm_90); the nvcc check fails on any spill.
#ifndef AUTOSAGE_MAX_THREADS
#define AUTOSAGE_MAX_THREADS 1024
#endif
#define AUTOSAGE_LAUNCH_BOUNDS __launch_bounds__(AUTOSAGE_MAX_THREADS, 1)

namespace autosage {

// ------------------------------------------------------------------ one element

__device__ __forceinline__ float to_float(float x) { return x; }
#if AUTOSAGE_2BYTE_TYPES
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
#endif

// Round to nearest even, as the host's rounding of the inputs (the reference uses the same values).
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
#if AUTOSAGE_2BYTE_TYPES
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
#endif

// Read-only scalar load through the non-coherent path.
__device__ __forceinline__ float load_scalar(const float* __restrict__ p) { return __ldg(p); }
#if AUTOSAGE_2BYTE_TYPES
__device__ __forceinline__ __half load_scalar(const __half* __restrict__ p) { return __ldg(p); }
__device__ __forceinline__ __nv_bfloat16 load_scalar(const __nv_bfloat16* __restrict__ p) { return __ldg(p); }
#endif

// ------------------------------------------------------------------ vectors of float

template <int V>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float (&out)[V]) {
    static_assert(V == 1 || V == 2 || V == 4, "float vectors are 1, 2 or 4 elements (at most 16 bytes)");
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
    static_assert(V == 1 || V == 2 || V == 4, "float vectors are 1, 2 or 4 elements (at most 16 bytes)");
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
    static_assert(V == 1 || V == 2 || V == 4, "float vectors are 1, 2 or 4 elements (at most 16 bytes)");
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (V == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        *p = v[0];
    }
}

// ------------------------------------------------------------------ float partial sums
// Partial sums other blocks combine (split SpMM scratch, fused_split attention partials) are float
// whatever T is, so a lane's V partials take 4V bytes: 32 for the 2-byte types' 16-byte schedules
// (V = 8 halves). They move as V/4 float4s (the caller's offsets are multiples of V floats, so each
// piece is 16-byte aligned); V <= 4 is one store_vec/load_vec_cg, as for float data.

template <int V>
__device__ __forceinline__ void store_partials(float* p, const float (&v)[V]) {
    if constexpr (V <= 4) {
        store_vec<V>(p, v);
    } else {
        static_assert(V % 4 == 0, "wide partials are whole float4s");
#pragma unroll
        for (int i = 0; i < V; i += 4)
            *reinterpret_cast<float4*>(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    }
}

// Through L2 only, as load_vec_cg: the partials were written by other blocks of this launch.
template <int V>
__device__ __forceinline__ void load_partials_cg(const float* p, float (&out)[V]) {
    if constexpr (V <= 4) {
        load_vec_cg<V>(p, out);
    } else {
        static_assert(V % 4 == 0, "wide partials are whole float4s");
#pragma unroll
        for (int i = 0; i < V; i += 4) {
            const float4 t = __ldcg(reinterpret_cast<const float4*>(p + i));
            out[i] = t.x; out[i + 1] = t.y; out[i + 2] = t.z; out[i + 3] = t.w;
        }
    }
}

// ------------------------------------------------------------------ vectors of 2-byte elements
#if AUTOSAGE_2BYTE_TYPES
// V elements are moved as one unsigned integer of 2V bytes (uint4 for 16 bytes) and taken apart
// in registers as V/2 pairs (__half2 / __nv_bfloat162), converted to float two at a time.

template <typename H> struct Pair;
template <> struct Pair<__half> {
    using type = __half2;
    static __device__ __forceinline__ float2 to_float2(type x) { return __half22float2(x); }
    static __device__ __forceinline__ type from_float2(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct Pair<__nv_bfloat16> {
    using type = __nv_bfloat162;
    static __device__ __forceinline__ float2 to_float2(type x) { return __bfloat1622float2(x); }
    static __device__ __forceinline__ type from_float2(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

// The unsigned integer type of V 2-byte elements (V >= 2).
template <int V> struct Bits;
template <> struct Bits<2> { using type = unsigned int; };
template <> struct Bits<4> { using type = uint2; };
template <> struct Bits<8> { using type = uint4; };

template <typename H, int V>
__device__ __forceinline__ void unpack(const typename Bits<V>::type& bits, float (&out)[V]) {
    const auto* pairs = reinterpret_cast<const typename Pair<H>::type*>(&bits);
#pragma unroll
    for (int i = 0; i < V / 2; ++i) {
        const float2 f = Pair<H>::to_float2(pairs[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

template <typename H, int V, bool CG>
__device__ __forceinline__ void load_vec_2byte(const H* p, float (&out)[V]) {
    static_assert(V == 1 || V == 2 || V == 4 || V == 8, "2-byte vectors are 1, 2, 4 or 8 elements");
    if constexpr (V == 1) {
        out[0] = to_float(CG ? __ldcg(p) : __ldg(p));
    } else {
        using B = typename Bits<V>::type;
        const B* q = reinterpret_cast<const B*>(p);
        unpack<H, V>(CG ? __ldcg(q) : __ldg(q), out);
    }
}

template <int V>
__device__ __forceinline__ void load_vec(const __half* __restrict__ p, float (&out)[V]) {
    load_vec_2byte<__half, V, false>(p, out);
}
template <int V>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* __restrict__ p, float (&out)[V]) {
    load_vec_2byte<__nv_bfloat16, V, false>(p, out);
}
template <int V>
__device__ __forceinline__ void load_vec_cg(const __half* p, float (&out)[V]) {
    load_vec_2byte<__half, V, true>(p, out);
}
template <int V>
__device__ __forceinline__ void load_vec_cg(const __nv_bfloat16* p, float (&out)[V]) {
    load_vec_2byte<__nv_bfloat16, V, true>(p, out);
}

template <typename H, int V>
__device__ __forceinline__ void store_vec_2byte(H* p, const float (&v)[V]) {
    static_assert(V == 1 || V == 2 || V == 4 || V == 8, "2-byte vectors are 1, 2, 4 or 8 elements");
    if constexpr (V == 1) {
        *p = from_float<H>(v[0]);
    } else {
        typename Bits<V>::type bits;
        auto* pairs = reinterpret_cast<typename Pair<H>::type*>(&bits);
#pragma unroll
        for (int i = 0; i < V / 2; ++i) pairs[i] = Pair<H>::from_float2(v[2 * i], v[2 * i + 1]);
        *reinterpret_cast<typename Bits<V>::type*>(p) = bits;
    }
}

template <int V>
__device__ __forceinline__ void store_vec(__half* __restrict__ p, const float (&v)[V]) {
    store_vec_2byte<__half, V>(p, v);
}
template <int V>
__device__ __forceinline__ void store_vec(__nv_bfloat16* __restrict__ p, const float (&v)[V]) {
    store_vec_2byte<__nv_bfloat16, V>(p, v);
}
#endif  // AUTOSAGE_2BYTE_TYPES

// ------------------------------------------------------------------ staged (unconverted) vectors
// A loop that keeps U edges' loads in flight holds them in registers until it uses them. Held as
// floats, V 2-byte elements take V registers; held as loaded, V/2. Raw<T, V> is the loaded form
// (float: the floats themselves), load_raw fills it with the same single load as load_vec and
// unpack_raw converts it where it is used, so a 16-byte bf16 load staged for 4 edges costs 16
// registers instead of 32 (the G = 8 split shapes then keep 4 edges in flight under the 64-register
// cap without spilling: nvcc 13.0, sm_90).

template <typename T> constexpr bool kIsFloat = false;
template <> constexpr bool kIsFloat<float> = true;

template <typename T, int V> struct Raw { float f[V]; };
#if AUTOSAGE_2BYTE_TYPES
template <> struct Bits<1> { using type = unsigned short; };
template <int V> struct Raw<__half, V> { typename Bits<V>::type bits; };
template <int V> struct Raw<__nv_bfloat16, V> { typename Bits<V>::type bits; };
#endif

template <typename T, int V>
__device__ __forceinline__ void load_raw(const T* __restrict__ p, Raw<T, V>& r) {
    if constexpr (kIsFloat<T>) {
        load_vec<V>(p, r.f);
    } else {
        r.bits = __ldg(reinterpret_cast<const decltype(r.bits)*>(p));
    }
}

// The loaded form of V zeros (all-zero bits are +0 in every type).
template <typename T, int V>
__device__ __forceinline__ void zero_raw(Raw<T, V>& r) {
    if constexpr (kIsFloat<T>) {
#pragma unroll
        for (int v = 0; v < V; ++v) r.f[v] = 0.0f;
    } else {
        r.bits = {};
    }
}

template <typename T, int V>
__device__ __forceinline__ void unpack_raw(const Raw<T, V>& r, float (&out)[V]) {
    if constexpr (kIsFloat<T>) {
#pragma unroll
        for (int v = 0; v < V; ++v) out[v] = r.f[v];
    }
#if AUTOSAGE_2BYTE_TYPES
    else if constexpr (V == 1) {
        out[0] = to_float(*reinterpret_cast<const T*>(&r.bits));
    } else {
        unpack<T, V>(r.bits, out);
    }
#endif
}

// ------------------------------------------------------------------ the rest

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
