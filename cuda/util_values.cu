// util_values.cu: the helper kernels of one value type: counter-based random inputs, conversions
// from and to float32, the NaN count and the float64 sums of verification.
#include "util.cuh"

// ------------------------------------------------------------------ generation and conversion

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
