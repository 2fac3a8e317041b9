// util_heads.cu: the multi-head products of the attention ops' backward (autosage_cli/torch/backward.py),
// one launch for all H heads where the formulas ran one SDDMM or SpMM per head (8 heads: ~30-40
// launches and Python op calls per layer backward; a 2-layer GAT epoch on cora took 7.9 ms on the
// H200 against PyG's 4.0 ms, softmax_backward alone ~2.4 ms of it).
//
//   autosage_heads_sddmm<C, I>         out[e, h] = scale x <X[rows[e], h, :], Y[cols[e], h, :]>, the
//                                      dot rounded to C first when `rounded` (else kept in float32);
//                                      X (n_rows, H, d), Y (n_cols, H, d) in C; out (nnz, H) float32
//   autosage_heads_spmm<C, I>          out[i, h, :] = sum over the edges e of row i of
//                                      round_C(P[p(e), h]) X[cols[e], h, :], p(e) = perm[e] (or e);
//                                      P (nnz, H) float32, X (n_cols, H, d) and out (n_rows, H, d) in C
//   autosage_heads_softmax_grad<I>     dP[e, h] = scale x P[e, h] (dP[e, h] - r[row(e), h]) in place,
//                                      r = row_dot (n_rows, H) when given, else sum over the row's
//                                      edges of P dP (per head), computed here
//   autosage_heads_additive_backward<C, I>   the GAT score's backward but dV: P (nnz, H) rebuilt
//                                      from a_dst, a_src and the forward's row statistics, d a_dst
//                                      and d a_src (n, H), in one pass over each row
//
// Knobs: C the value codec of X, Y and out (F32, F16, BF16: loads widen, sums are float32, stores
// round once), I the index type of the CSR arrays. These are correctness-first kernels, coalesced
// but not a tuned family: `group` (a power of two, at most 32, chosen by kernels/util.py) is how
// many consecutive lanes share one (edge, head) dot or one row's H x d outputs, so that a warp reads
// 32 consecutive elements whatever d is.
#include "util.cuh"

// A group of `group` lanes per (edge, head) pair, pairs in out's (nnz, H) order: 32 / group pairs
// per warp, consecutive heads of an edge (contiguous in X and Y) side by side. The loop bound is the
// same for every lane of a warp, so the group sums' shuffles always see the full warp.
template <class C, typename I>
__global__ void autosage_heads_sddmm(const I* rows, const I* cols, const typename C::T* X,
                                     const typename C::T* Y, long long nnz, int heads, int d, int group,
                                     float scale, int rounded, float* out) {
    const int lane = threadIdx.x & 31, sub = lane & (group - 1);
    const long long pairs = nnz * heads, per_warp = 32 / group, warps = grid_stride() >> 5;
    for (long long w = first_index() >> 5; w * per_warp < pairs; w += warps) {
        const long long q = w * per_warp + lane / group;
        float acc = 0.0f;
        if (q < pairs) {
            const long long e = q / heads, h = q - e * heads;
            const typename C::T* x = X + ((long long)rows[e] * heads + h) * d;
            const typename C::T* y = Y + ((long long)cols[e] * heads + h) * d;
            for (int k = sub; k < d; k += group) acc = fmaf(C::load(x[k]), C::load(y[k]), acc);
        }
        for (int o = group >> 1; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (q < pairs && sub == 0) out[q] = __fmul_rn(rounded ? C::load(C::store(acc)) : acc, scale);
    }
}

// A group of `group` lanes per row, its lanes over the row's H x d outputs (a column c belongs to
// head c / d); every lane walks the row's edges itself (no shuffles), reading 32 consecutive
// elements of X[cols[e]] per warp step. P is rounded to C as the tuned SpMM reads per-call edge
// values of its operands' type (autosage_cli/torch/cuda.py), so both compute the same product.
template <class C, typename I>
__global__ void autosage_heads_spmm(const I* indptr, const I* cols, const float* P, const I* perm,
                                    const typename C::T* X, long long n_rows, int heads, int d, int group,
                                    typename C::T* out) {
    const long long width = (long long)heads * d, slots = n_rows * group;
    for (long long t = first_index(); t < slots; t += grid_stride()) {
        const long long i = t / group;
        const I begin = indptr[i], end = indptr[i + 1];
        for (long long c = t - i * group; c < width; c += group) {
            const long long h = c / d;
            float acc = 0.0f;
            for (I e = begin; e < end; ++e) {
                const long long at = perm ? (long long)perm[e] : (long long)e;
                acc = fmaf(C::load(C::store(P[at * heads + h])), C::load(X[(long long)cols[e] * width + c]), acc);
            }
            out[i * width + c] = C::store(acc);
        }
    }
}

// A warp per row, over the row's (edge, head) pairs, contiguous in P and dP, in chunks of up to 32
// heads: a chunk of hc heads puts 32 / hc edges side by side, so lane l always holds head l % hc
// and its row sum is the sum over the lanes of that residue (a fixed order: deterministic, no
// atomics; a hub row is read by 32 lanes). The backward's 2-byte rule lives in the caller: there
// r is summed here from the dP it is given (rounded to the type), so that dS sums to zero per row.
template <typename I>
__global__ void autosage_heads_softmax_grad(const I* indptr, const float* P, float* dP, const float* row_dot,
                                            long long n_rows, int heads, float scale) {
    const int lane = threadIdx.x & 31;
    const long long warps = grid_stride() >> 5;
    for (long long i = first_index() >> 5; i < n_rows; i += warps) {
        const long long begin = indptr[i], end = indptr[i + 1];
        for (int h0 = 0; h0 < heads; h0 += 32) {
            const int hc = min(32, heads - h0), per = 32 / hc;
            const bool active = lane < per * hc;
            const long long h = h0 + lane % hc, first = begin + lane / hc;
            float r;
            if (row_dot) {
                r = row_dot[i * heads + h];
            } else {
                float acc = 0.0f;
                if (active)
                    for (long long e = first; e < end; e += per) acc = fmaf(P[e * heads + h], dP[e * heads + h], acc);
                r = 0.0f;   // every lane of residue lane % hc (all below per * hc) summed in lane order
                for (int j = 0; j < per; ++j) r += __shfl_sync(0xffffffffu, acc, lane % hc + j * hc);
            }
            if (active)
                for (long long e = first; e < end; e += per) {
                    const long long q = e * heads + h;
                    dP[q] = __fmul_rn(__fmul_rn(P[q], __fsub_rn(dP[q], r)), scale);
                }
        }
    }
}

// The additive (GAT) score's backward in one pass over each row (what six launches did: the
// probabilities, dP, dS, the LeakyReLU mask and two index_adds). A warp per row over its (edge,
// head) pairs, lanes as in autosage_heads_softmax_grad. Per pair, from the forward's row statistics
// stats[i, h] = (M, L): x = a_dst[i, h] + a_src[j, h], s = LeakyReLU(x), P = e^(s - M) / L (all
// float32, rounded after each step as the torch composition does); dP = <dO[i, h], V[j, h]> rounded
// to C; dS = P (dP - r) with r = <dO[i, h], O[i, h]> when `row_dot_from_O`, else the row's sum of
// P dP (the 2-byte rule: dS then sums to zero per row from the rounded dP itself); dx = dS where
// x > 0, else slope dS. Writes P when P is not null (dV = Pᵀ dO is the caller's), d_dst[i, h] = the
// row's sum of dx (lane order: deterministic) and adds every dx into d_src[j, h] (atomics, into
// zeros the caller made). With d_dst and d_src null only P is written.
template <class C>
__device__ __forceinline__ float heads_dot(const typename C::T* x, const typename C::T* y, int d) {
    float acc = 0.0f;
    for (int k = 0; k < d; ++k) acc = fmaf(C::load(x[k]), C::load(y[k]), acc);
    return acc;
}

// An edge's probability from its score terms and its row's statistics ml = (M, L), rounded after
// each step as the torch composition does; x, the pre-activation, for the LeakyReLU's mask.
__device__ __forceinline__ float heads_additive_prob(float ad, float as, float slope, float2 ml, float& x) {
    x = __fadd_rn(ad, as);
    const float s = x > 0.0f ? x : __fmul_rn(x, slope);
    return __fdiv_rn(expf(__fsub_rn(s, ml.x)), ml.y);
}

template <class C, typename I>
__global__ void autosage_heads_additive_backward(const I* indptr, const I* cols, const float* a_dst,
                                                 const float* a_src, const float2* stats,
                                                 const typename C::T* V, const typename C::T* O,
                                                 const typename C::T* dO, long long n_rows, int heads, int d,
                                                 float slope, int row_dot_from_O, float* P, float* d_dst,
                                                 float* d_src) {
    const int lane = threadIdx.x & 31;
    const long long warps = grid_stride() >> 5;
    const bool grads = d_dst != nullptr || d_src != nullptr;
    for (long long i = first_index() >> 5; i < n_rows; i += warps) {
        const long long begin = indptr[i], end = indptr[i + 1];
        for (int h0 = 0; h0 < heads; h0 += 32) {
            const int hc = min(32, heads - h0), per = 32 / hc;
            const bool active = lane < per * hc;
            const long long h = h0 + lane % hc, first = begin + lane / hc, at = i * heads + h;
            const float2 ml = stats[at];
            const float ad = a_dst[at];
            const typename C::T* dOi = dO + at * d;
            float r = 0.0f;
            if (grads && row_dot_from_O) {
                r = heads_dot<C>(dOi, O + at * d, d);
            } else if (grads) {
                float acc = 0.0f;
                if (active)
                    for (long long e = first; e < end; e += per) {
                        const long long j = cols[e];
                        float x;
                        const float p = heads_additive_prob(ad, a_src[j * heads + h], slope, ml, x);
                        acc = fmaf(p, C::load(C::store(heads_dot<C>(dOi, V + (j * heads + h) * d, d))), acc);
                    }
                for (int q = 0; q < per; ++q) r += __shfl_sync(0xffffffffu, acc, lane % hc + q * hc);
            }
            float row_dx = 0.0f;
            if (active)
                for (long long e = first; e < end; e += per) {
                    const long long j = cols[e];
                    float x;
                    const float p = heads_additive_prob(ad, a_src[j * heads + h], slope, ml, x);
                    if (P) P[e * heads + h] = p;
                    if (!grads) continue;
                    const float dp = C::load(C::store(heads_dot<C>(dOi, V + (j * heads + h) * d, d)));
                    const float ds = __fmul_rn(p, __fsub_rn(dp, r));
                    const float dx = x > 0.0f ? ds : __fmul_rn(ds, slope);
                    row_dx += dx;
                    if (d_src) atomicAdd(d_src + j * heads + h, dx);
                }
            if (d_dst) {
                float sum = 0.0f;
                for (int q = 0; q < per; ++q) sum += __shfl_sync(0xffffffffu, row_dx, lane % hc + q * hc);
                if (lane < hc) d_dst[at] = sum;
            }
        }
    }
}
