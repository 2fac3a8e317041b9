// sddmm_rowgroup.cu: SDDMM out[e] = scale * a_e * <X[row_e], Y[col_e]> with a group of G lanes per
// row (or per chunk of a row) that keeps its slice of X[row] in registers for all of the row's edges.
//
// Knobs (template parameters): T value type; G lanes per group (32/G groups per warp); V elements
// per lane per load; P chunks of G*V columns held per lane, so K <= G*V*P (the schedule's tile) is
// required and checked by the schedule; U edges whose Y loads and group reductions are in flight.
// Items: with item_row == nullptr, item i is row i (whole rows); otherwise item i is the edge range
// [item_start[i], min(item_start[i] + chunk, indptr[item_row[i] + 1])) of row item_row[i], so a hub
// row is spread over many groups (SDDMM outputs are per edge: chunks need no reduction).
// values == nullptr means "do not multiply by A's values" (attention scores, or all-ones graphs).
#include "common.cuh"

namespace {

template <typename T, int G, int V, int P, int U, bool VALUES>
__device__ __forceinline__ void rowgroup_edges(int begin, int end, int k, const int* __restrict__ indices,
                                               const T* __restrict__ values, const float (&x)[P][V],
                                               const T* __restrict__ Y, long long ldy,
                                               T* __restrict__ out, float scale) {
    const int glane = autosage::lane_id() & (G - 1);
    const unsigned mask = autosage::group_mask<G>();
    bool col_ok[P];
#pragma unroll
    for (int p = 0; p < P; ++p) col_ok[p] = glane * V + p * G * V < k;
#pragma unroll 1
    for (int e = begin; e < end; e += U) {
        int c[U];
        float a[U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            ok[u] = e + u < end;
            c[u] = ok[u] ? __ldg(indices + e + u) : 0;
            a[u] = (VALUES && ok[u]) ? autosage::to_float(autosage::load_scalar(values + e + u)) : 1.0f;
        }
        float d[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            d[u] = 0.0f;
#pragma unroll
            for (int p = 0; p < P; ++p) {
                if (ok[u] && col_ok[p]) {
                    float y[V];
                    autosage::load_vec<V>(Y + c[u] * ldy + glane * V + p * G * V, y);
#pragma unroll
                    for (int v = 0; v < V; ++v) d[u] = fmaf(x[p][v], y[v], d[u]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) d[u] = autosage::group_sum<G>(d[u], mask);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (ok[u] && glane == (u & (G - 1))) out[e + u] = autosage::from_float<T>(scale * a[u] * d[u]);
        }
    }
}

}  // namespace

template <typename T, int G, int V, int P, int U>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
sddmm_rowgroup(const int n_items, const int k, const int* __restrict__ item_row,
               const int* __restrict__ item_start, const int chunk, const int* __restrict__ indptr,
               const int* __restrict__ indices, const T* __restrict__ values,
               const T* __restrict__ X, const long long ldx, const T* __restrict__ Y,
               const long long ldy, T* __restrict__ out, const float scale) {
    const long long item = autosage::global_thread() / G;
    if (item >= n_items) return;  // whole groups leave together
    int row, begin, end;
    if (item_row != nullptr) {
        row = __ldg(item_row + item);
        begin = __ldg(item_start + item);
        end = min(begin + chunk, __ldg(indptr + row + 1));
    } else {
        row = static_cast<int>(item);
        begin = __ldg(indptr + row);
        end = __ldg(indptr + row + 1);
    }
    if (begin >= end) return;
    const int glane = autosage::lane_id() & (G - 1);
    float x[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p) {
        const int col = glane * V + p * G * V;
        if (col < k) {
            autosage::load_vec<V>(X + row * ldx + col, x[p]);
        } else {
#pragma unroll
            for (int v = 0; v < V; ++v) x[p][v] = 0.0f;
        }
    }
    if (values != nullptr) {
        rowgroup_edges<T, G, V, P, U, true>(begin, end, k, indices, values, x, Y, ldy, out, scale);
    } else {
        rowgroup_edges<T, G, V, P, U, false>(begin, end, k, indices, values, x, Y, ldy, out, scale);
    }
}
