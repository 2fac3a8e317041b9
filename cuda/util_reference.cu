// util_reference.cu: the float64 device reference of each op (backends/reference_device.py).
#include "util.cuh"

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
// float64 (the row maximum first; A's values unused). A warp per (row, head): lane l holds the
// features l, l + 32, ... of the dot products and of the output row, and the lanes' partial dots are
// summed by a xor butterfly, which leaves every lane the same bits (each step adds the same two
// values), so the whole warp takes the same branch and the result is the same in every run. The
// warp walks the row three times: the maximum, the sum of exponentials, then the weighted rows of
// V. (A thread per (row, head) with d-long serial dots took 0.3-0.5 s on a 100M-edge graph at
// d = 64: the reference of a bfloat16 tune cost more than its candidates.) Rows without edges give
// zeros.
template <class C, typename I>
__global__ void autosage_reference_attention(const I* indptr, const I* indices, const typename C::T* Q,
                                             const typename C::T* K, const typename C::T* V,
                                             long long n_rows, int heads, int d, double scale,
                                             double* out) {
    const int lane = threadIdx.x & 31;
    for (long long t = first_index() >> 5; t < n_rows * heads; t += grid_stride() >> 5) {
        const long long i = t / heads, h = t - i * heads;
        const long long begin = indptr[i], end = indptr[i + 1];
        const typename C::T* q = Q + t * d;
        double* o = out + t * d;
        for (int j = lane; j < d; j += 32) o[j] = 0.0;
        double row_max = __longlong_as_double(0xfff0000000000000ull), row_sum = 0.0;   // -inf
        for (int pass = 0; pass < 3; ++pass) {
            for (long long e = begin; e < end; ++e) {
                const long long at = ((long long)indices[e] * heads + h) * d;
                double s = 0.0;
                for (int j = lane; j < d; j += 32) s += (double)C::load(q[j]) * (double)C::load(K[at + j]);
                for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
                s *= scale;
                if (pass == 0) row_max = fmax(row_max, s);
                else if (pass == 1) row_sum += exp(s - row_max);
                else {
                    const double p = exp(s - row_max) / row_sum;
                    for (int j = lane; j < d; j += 32) o[j] += p * (double)C::load(V[at + j]);
                }
            }
        }
    }
}

// O[i, h] = sum over row i's edges of softmax_e(LeakyReLU(a_dst[i, h] + a_src[col e, h])) V[col e, h]
// in float64 (the GAT score; a_dst and a_src float32 in every dtype, V as stored; A's values
// unused). The layout of the attention reference above: a warp per (row, head), lanes over the
// features, three walks of the row. The score is one scalar per edge, which every lane computes
// alike, so no reduction is needed and the whole warp takes the same branch. Rows without edges
// give zeros. (On the host this reference took 0.2-1 s per probe of a sampled batch: the additive
// score has no vendor, so it judges every candidate.)
template <class C, typename I>
__global__ void autosage_reference_additive(const I* indptr, const I* indices, const float* a_dst,
                                            const float* a_src, const typename C::T* V, long long n_rows,
                                            int heads, int d, double slope, double* out) {
    const int lane = threadIdx.x & 31;
    for (long long t = first_index() >> 5; t < n_rows * heads; t += grid_stride() >> 5) {
        const long long i = t / heads, h = t - i * heads;
        const long long begin = indptr[i], end = indptr[i + 1];
        const double a = (double)a_dst[t];
        double* o = out + t * d;
        for (int j = lane; j < d; j += 32) o[j] = 0.0;
        double row_max = __longlong_as_double(0xfff0000000000000ull), row_sum = 0.0;   // -inf
        for (int pass = 0; pass < 3; ++pass) {
            for (long long e = begin; e < end; ++e) {
                const long long col = (long long)indices[e] * heads + h;
                double s = a + (double)a_src[col];
                s = s > 0.0 ? s : slope * s;
                if (pass == 0) row_max = fmax(row_max, s);
                else if (pass == 1) row_sum += exp(s - row_max);
                else {
                    const double p = exp(s - row_max) / row_sum;
                    for (int j = lane; j < d; j += 32) o[j] += p * (double)C::load(V[col * d + j]);
                }
            }
        }
    }
}
