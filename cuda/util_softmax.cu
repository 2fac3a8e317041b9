// util_softmax.cu: the vendor attention's softmax steps (backends/attention_vendor.py).
#include "util.cuh"

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
