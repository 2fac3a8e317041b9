// util.cu: the helper kernels autosage runs around the candidates it tunes: input generation,
// NaN poisoning and fills, type conversions, the relative-error sums of verification, the
// all-ones and NaN counts, per-edge row ids, the gather-dot SDDMM composition and the vendor
// attention's softmax steps, and the spin that precedes each timed launch.
//
// Why one module of our own instead of CuPy's elementwise and reduction kernels: each CuPy
// expression (a * b, x.astype(...), cupy.full(nan), cupy.random, a comparison, a sum) is an NVRTC
// compile of 0.1-0.4 s the first time a machine runs it, and a first tune ran 26 to 65 of them.
// This file is one compile (kernels/util.py lists its name expressions), cached on disk like the
// candidates' modules.
//
// No headers are included: the 2-byte types are handled as their bit patterns (unsigned short)
// with the PTX conversions, so the module compiles as fast as float32 code. Element types are
// codecs (F32, F64, F16, BF16): `T` is the stored type, `load` widens one element exactly, `store`
// rounds a float to nearest even. Every kernel walks its elements with a grid-stride loop, so any
// grid size is correct; kernels/util.py picks it.

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

// ------------------------------------------------------------------ fills and generation

__global__ void autosage_fill_u32(unsigned int* p, unsigned int bits, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) p[i] = bits;
}

__global__ void autosage_fill_u16(unsigned short* p, unsigned short bits, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) p[i] = bits;
}

// Uniform in (-1, 1), never zero: an odd multiple of 2^-23 (exact in float32), rounded once to C.
template <class C>
__global__ void autosage_uniform(typename C::T* out, long long n, unsigned long long seed,
                                 unsigned long long stream) {
    const unsigned long long key = mix64(seed * 0x9e3779b97f4a7c15ull + mix64(stream + 1));
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const unsigned int bits = (unsigned int)(mix64(key + (unsigned long long)i) >> 41);   // 23 bits
        const int odd = (int)(2u * bits + 1u) - (1 << 23);
        out[i] = C::store((float)odd * 1.1920928955078125e-07f);
    }
}

template <class S, class D>
__global__ void autosage_convert(const typename S::T* x, typename D::T* y, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) y[i] = D::store(S::load(x[i]));
}

// ------------------------------------------------------------------ verification

// sums[0] += sum (a - b)^2, sums[1] += sum b^2, in float64 (NaN and Inf propagate into the sums).
template <class A, class B>
__global__ void autosage_squared_sums(const typename A::T* a, const typename B::T* b, long long n,
                                      double* sums) {
    double d2 = 0.0, r2 = 0.0;
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const double x = (double)A::load(a[i]), y = (double)B::load(b[i]);
        d2 += (x - y) * (x - y);
        r2 += y * y;
    }
    d2 = block_sum(d2);
    r2 = block_sum(r2);
    if (threadIdx.x == 0) {
        atomicAdd(&sums[0], d2);
        atomicAdd(&sums[1], r2);
    }
}

__global__ void autosage_count_not_equal(const float* x, float value, long long n,
                                         unsigned long long* count) {
    unsigned long long c = 0;
    for (long long i = first_index(); i < n; i += grid_stride()) c += !(x[i] == value);
    c = block_sum(c);
    if (threadIdx.x == 0 && c) atomicAdd(count, c);
}

template <class C>
__global__ void autosage_count_nan(const typename C::T* x, long long n, unsigned long long* count) {
    unsigned long long c = 0;
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const float v = (float)C::load(x[i]);
        c += v != v;
    }
    c = block_sum(c);
    if (threadIdx.x == 0 && c) atomicAdd(count, c);
}

// ------------------------------------------------------------------ graph helpers

// rows[e] = the last row r with indptr[r] <= e (empty rows never match), by binary search.
template <typename I>
__global__ void autosage_edge_rows(const I* indptr, long long n_rows, long long nnz, I* rows) {
    for (long long e = first_index(); e < nnz; e += grid_stride()) {
        long long lo = 0, hi = n_rows;
        while (hi - lo > 1) {
            const long long mid = (lo + hi) >> 1;
            if ((long long)indptr[mid] <= e) lo = mid; else hi = mid;
        }
        rows[e] = (I)lo;
    }
}

// dst (n x k, float32) = rows `rows[i]` of src (row stride ld elements), widened to float32.
template <class C, typename I>
__global__ void autosage_gather_rows(const typename C::T* src, long long ld, const I* rows,
                                     long long n, int k, float* dst) {
    for (long long t = first_index(); t < n * k; t += grid_stride()) {
        const long long i = t / k, j = t - i * k;
        dst[t] = C::load(src[(long long)rows[i] * ld + j]);
    }
}

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

// ------------------------------------------------------------------ float64 references

// out[i, j] = sum over row i's edges e of a_e B[col e, j], in float64; a thread per (row, j),
// the row's edges in CSR order (a fixed order: the same sums in every run).
template <class C, typename I>
__global__ void autosage_reference_spmm(const I* indptr, const I* indices, const typename C::T* values,
                                        const typename C::T* B, long long n_rows, int k, double* out) {
    for (long long t = first_index(); t < n_rows * k; t += grid_stride()) {
        const long long i = t / k, j = t - i * k;
        double acc = 0.0;
        for (long long e = indptr[i]; e < (long long)indptr[i + 1]; ++e)
            acc += (double)C::load(values[e]) * (double)C::load(B[(long long)indices[e] * k + j]);
        out[t] = acc;
    }
}

// out[e] = a_e <X[row e], Y[col e]> in float64; a thread per edge.
template <class C, typename I>
__global__ void autosage_reference_sddmm(const I* rows, const I* indices, const typename C::T* values,
                                         const typename C::T* X, const typename C::T* Y, long long nnz,
                                         int k, double* out) {
    for (long long e = first_index(); e < nnz; e += grid_stride()) {
        const typename C::T* x = X + (long long)rows[e] * k;
        const typename C::T* y = Y + (long long)indices[e] * k;
        double acc = 0.0;
        for (int j = 0; j < k; ++j) acc += (double)C::load(x[j]) * (double)C::load(y[j]);
        out[e] = (double)C::load(values[e]) * acc;
    }
}

// O[i, h] = sum over row i's edges of softmax_e(scale <Q[i, h], K[col e, h]>) V[col e, h] in
// float64 (the row maximum first; A's values unused); a thread per (row, head), which walks the row
// three times: the maximum, the sum of exponentials, then the weighted rows of V. Rows without
// edges give zeros.
template <class C, typename I>
__global__ void autosage_reference_attention(const I* indptr, const I* indices, const typename C::T* Q,
                                             const typename C::T* K, const typename C::T* V,
                                             long long n_rows, int heads, int d, double scale,
                                             double* out) {
    for (long long t = first_index(); t < n_rows * heads; t += grid_stride()) {
        const long long i = t / heads, h = t - i * heads;
        const long long begin = indptr[i], end = indptr[i + 1];
        const typename C::T* q = Q + t * d;
        double* o = out + t * d;
        for (int j = 0; j < d; ++j) o[j] = 0.0;
        double row_max = __longlong_as_double(0xfff0000000000000ull), row_sum = 0.0;   // -inf
        for (int pass = 0; pass < 3; ++pass) {
            for (long long e = begin; e < end; ++e) {
                const long long at = ((long long)indices[e] * heads + h) * d;
                double s = 0.0;
                for (int j = 0; j < d; ++j) s += (double)C::load(q[j]) * (double)C::load(K[at + j]);
                s *= scale;
                if (pass == 0) row_max = fmax(row_max, s);
                else if (pass == 1) row_sum += exp(s - row_max);
                else {
                    const double p = exp(s - row_max) / row_sum;
                    for (int j = 0; j < d; ++j) o[j] += p * (double)C::load(V[at + j]);
                }
            }
        }
    }
}

// ------------------------------------------------------------------ the vendor attention's softmax

// s = s x scale (+ bias[e]), rounded after each step like two separate elementwise passes.
__global__ void autosage_scale_bias(float* s, float scale, const float* bias, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const float v = __fmul_rn(s[i], scale);
        s[i] = bias ? __fadd_rn(v, bias[i]) : v;
    }
}

// m[rows[e]] = max(m[rows[e]], s[e]); m starts at -inf. Non-negative floats order like their bits
// as signed ints, negative ones inversely as unsigned ints.
template <typename I>
__global__ void autosage_scatter_max(float* m, const I* rows, const float* s, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const float v = s[i];
        float* at = m + rows[i];
        if (__float_as_int(v) >= 0) atomicMax((int*)at, __float_as_int(v));   // sign bit clear (not -0.0)
        else atomicMin((unsigned int*)at, __float_as_uint(v));
    }
}

// s = exp((s - m[rows[e]]) x scale)
template <typename I>
__global__ void autosage_sub_row_exp(float* s, const float* m, const I* rows, float scale, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride())
        s[i] = expf(__fmul_rn(__fsub_rn(s[i], m[rows[i]]), scale));
}

template <typename I>
__global__ void autosage_scatter_add(float* l, const I* rows, const float* s, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) atomicAdd(l + rows[i], s[i]);
}

// out[i, h, :] *= 1 / max(l[h, i], 1): an empty row (l = 0) keeps its zero SpMM row.
__global__ void autosage_normalize_heads(float* out, const float* l, long long n_rows, int heads, int d) {
    const long long total = n_rows * heads * d;
    for (long long t = first_index(); t < total; t += grid_stride()) {
        const long long ih = t / d, i = ih / heads, h = ih - i * heads;
        out[t] = __fmul_rn(out[t], __fdiv_rn(1.0f, fmaxf(l[h * n_rows + i], 1.0f)));
    }
}

// stored[e] = round(s[e] / l[rows[e]]): probabilities normalised per edge, then rounded to C.
template <class C, typename I>
__global__ void autosage_divide_rows(const float* s, const float* l, const I* rows,
                                     typename C::T* stored, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride())
        stored[i] = C::store(__fdiv_rn(s[i], l[rows[i]]));
}

// ------------------------------------------------------------------ timing

// One thread that keeps the GPU busy for `ns` nanoseconds before a timed launch, so the host's
// enqueue of (start event, launch, end event) completes while the GPU still spins and the events
// measure GPU time only (backends/timing.py).
__global__ void autosage_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
