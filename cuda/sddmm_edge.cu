// sddmm_edge.cu: SDDMM out[e] = scale * a_e * <X[row_e], Y[col_e]>, edge-parallel: a group of G
// lanes takes U consecutive edges (nnz-balanced whatever the degrees, so hub rows cost nothing
// special). The row of each edge comes from a COO row array built once per input by the plan.
//
// Knobs (template parameters): T value type; G lanes per group; V elements per lane per load
// (K % V == 0); U consecutive edges per group, their loads and reductions interleaved. Any K: the
// group loops over G*V-wide column chunks. Consecutive edges mostly share a row, so X[row] is
// re-read from L1.
// values == nullptr means "do not multiply by A's values" (attention scores, or all-ones graphs).
#include "common.cuh"

template <typename T, int G, int V, int U>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
sddmm_edge(const int nnz, const int k, const int* __restrict__ rows,
           const int* __restrict__ indices, const T* __restrict__ values,
           const T* __restrict__ X, const long long ldx, const T* __restrict__ Y,
           const long long ldy, T* __restrict__ out, const float scale) {
    const long long first = autosage::global_thread() / G * U;
    if (first >= nnz) return;  // whole groups leave together
    const int glane = autosage::lane_id() & (G - 1);
    const unsigned mask = autosage::group_mask<G>();
    const T* xrow[U];
    const T* yrow[U];
    float a[U], d[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long e = first + u;
        ok[u] = e < nnz;
        // Out-of-range slots point at row 0 (always present) and are never read.
        xrow[u] = X + (ok[u] ? __ldg(rows + e) : 0) * ldx;
        yrow[u] = Y + (ok[u] ? __ldg(indices + e) : 0) * ldy;
        a[u] = (values != nullptr && ok[u]) ? autosage::to_float(autosage::load_scalar(values + e)) : 1.0f;
        d[u] = 0.0f;
    }
    // Two column passes' loads in flight; ptxas' default deeper unrolling spilled at V = 4.
#pragma unroll 2
    for (int col = glane * V; col < k; col += G * V) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (ok[u]) {
                float x[V], y[V];
                autosage::load_vec<V>(xrow[u] + col, x);
                autosage::load_vec<V>(yrow[u] + col, y);
#pragma unroll
                for (int v = 0; v < V; ++v) d[u] = fmaf(x[v], y[v], d[u]);
            }
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) d[u] = autosage::group_sum<G>(d[u], mask);
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (ok[u] && glane == (u & (G - 1))) out[first + u] = autosage::from_float<T>(scale * a[u] * d[u]);
    }
}
