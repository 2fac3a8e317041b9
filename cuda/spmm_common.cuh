// spmm_common.cuh: the two SpMM inner loops every SpMM family is built from.
//
// C = A * B with A in CSR (int32 indptr/indices, values T or none), B and C row-major with leading
// dimensions ldb/ldc in elements. A `values` pointer of nullptr means "every value is 1" (pattern
// graphs: the plan checks this once in prepare and then skips 4 bytes per nonzero).
//
//   group_row   G lanes own one row; lane i owns columns [c, c+V) of each G*V-wide feature chunk;
//               every lane loads the edge's (col, val) itself (a broadcast within the group) and
//               keeps U edges' B loads in flight. No shuffles, so groups of a warp may diverge.
//   warp_range  one warp owns an edge range [begin, end) (a row or a chunk of one): it stages 32
//               (col, val) pairs with one coalesced load (the next batch is prefetched while the
//               current one is used) and hands them out with __shfl_sync. The warp is E = 32/G edge
//               slots of G lanes: slot s takes staged pairs s, s+E, ...; at the end the slots are
//               summed with xor-shuffles. G = 32 is GE-SpMM's warp-per-row; small G lets a whole
//               warp work on one long row at small K.
// The row walks that store a row's final sums take the kernel's epilogue (spmm_epilogue.cuh:
// `epi.apply` right before the store; the default, NoEpilogue's, does nothing).
#pragma once
#include "common.cuh"
#include "spmm_epilogue.cuh"

namespace autosage {

// Accumulate edges [begin, end) of one row into acc for columns [col, col + V).
template <typename T, int V, int U, bool VALUES>
__device__ __forceinline__ void group_row_accumulate(int begin, int end,
                                                     const int* __restrict__ indices,
                                                     const T* __restrict__ values,
                                                     const T* __restrict__ B, long long ldb,
                                                     int col, float (&acc)[V]) {
    int e = begin;
#pragma unroll 1
    for (; e + U <= end; e += U) {
        int c[U];
        float a[U];
        Raw<T, V> staged[U];  // as loaded: converted only where it is used
#pragma unroll
        for (int u = 0; u < U; ++u) {
            c[u] = __ldg(indices + e + u);
            a[u] = VALUES ? to_float(load_scalar(values + e + u)) : 1.0f;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) load_raw<T, V>(B + c[u] * ldb + col, staged[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float b[V];
            unpack_raw<T, V>(staged[u], b);
#pragma unroll
            for (int v = 0; v < V; ++v) acc[v] = VALUES ? fmaf(a[u], b[v], acc[v]) : acc[v] + b[v];
        }
    }
#pragma unroll 1
    for (; e < end; ++e) {
        const int c = __ldg(indices + e);
        const float a = VALUES ? to_float(load_scalar(values + e)) : 1.0f;
        float b[V];
        load_vec<V>(B + c * ldb + col, b);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = VALUES ? fmaf(a, b[v], acc[v]) : acc[v] + b[v];
    }
}

// One G-lane group computes row `row` of C over all k columns (an empty row is written as zeros,
// through the epilogue).
template <typename T, int G, int V, int U, typename EA = EpilogueArgs<T, NoEpilogue>>
__device__ __forceinline__ void group_row(int row, int k, const int* __restrict__ indptr,
                                          const int* __restrict__ indices,
                                          const T* __restrict__ values, const T* __restrict__ B,
                                          long long ldb, T* __restrict__ C, long long ldc,
                                          const EA& epi = EA()) {
    const int begin = __ldg(indptr + row);
    const int end = __ldg(indptr + row + 1);
    const int glane = lane_id() & (G - 1);
#pragma unroll 1
    for (int col = glane * V; col < k; col += G * V) {
        float acc[V];
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = 0.0f;
        if (values != nullptr) {
            group_row_accumulate<T, V, U, true>(begin, end, indices, values, B, ldb, col, acc);
        } else {
            group_row_accumulate<T, V, U, false>(begin, end, indices, values, B, ldb, col, acc);
        }
        epi.template apply<V>(col, k, acc);
        store_vec<V>(C + row * ldc + col, acc);
    }
}

// Whole warp: accumulate edges [begin, end) into acc[p] for columns col0 + p*G*V + [0, V), p < P,
// skipping columns >= col_end. Must be called by all 32 lanes with the same begin/end.
// Partial sums stay per edge slot; warp_slot_sum() combines them.
template <typename T, int G, int V, int U, int P, bool VALUES>
__device__ __forceinline__ void warp_range_accumulate(int begin, int end,
                                                      const int* __restrict__ indices,
                                                      const T* __restrict__ values,
                                                      const T* __restrict__ B, long long ldb,
                                                      int col0, int col_end, float (&acc)[P][V]) {
    constexpr int E = 32 / G;              // edge slots per warp
    constexpr int UU = U < G ? U : G;      // steps per staged batch are G; both powers of two
    const int lane = lane_id();
    const int slot = lane / G;
    bool col_ok[P];
#pragma unroll
    for (int p = 0; p < P; ++p) col_ok[p] = col0 + p * G * V < col_end;

    int next_c = 0;
    float next_a = 0.0f;
    if (begin + lane < end) {
        next_c = __ldg(indices + begin + lane);
        if (VALUES) next_a = to_float(load_scalar(values + begin + lane));
    }
#pragma unroll 1
    for (int base = begin; base < end; base += 32) {
        const int cur_c = next_c;
        const float cur_a = next_a;
        const int cnt = min(32, end - base);
        if (base + 32 + lane < end) {  // prefetch the next batch while this one is consumed
            next_c = __ldg(indices + base + 32 + lane);
            if (VALUES) next_a = to_float(load_scalar(values + base + 32 + lane));
        }
#pragma unroll
        for (int j0 = 0; j0 < G; j0 += UU) {
            int c[UU];
            float a[UU];
            bool ok[UU];
#pragma unroll
            for (int u = 0; u < UU; ++u) {
                const int src = (j0 + u) * E + slot;
                c[u] = __shfl_sync(AUTOSAGE_FULL_MASK, cur_c, src);
                a[u] = VALUES ? __shfl_sync(AUTOSAGE_FULL_MASK, cur_a, src) : 1.0f;
                ok[u] = src < cnt;
            }
            Raw<T, V> staged[UU][P];  // as loaded: converted only where it is used
#pragma unroll
            for (int u = 0; u < UU; ++u)
#pragma unroll
                for (int p = 0; p < P; ++p) {
                    if (ok[u] && col_ok[p]) {
                        load_raw<T, V>(B + c[u] * ldb + col0 + p * G * V, staged[u][p]);
                    } else {
                        zero_raw<T, V>(staged[u][p]);
                    }
                }
#pragma unroll
            for (int u = 0; u < UU; ++u)
#pragma unroll
                for (int p = 0; p < P; ++p) {
                    float b[V];
                    unpack_raw<T, V>(staged[u][p], b);
#pragma unroll
                    for (int v = 0; v < V; ++v)
                        acc[p][v] = VALUES ? fmaf(a[u], b[v], acc[p][v]) : acc[p][v] + b[v];
                }
            if ((j0 + UU) * E >= cnt) break;  // uniform across the warp
        }
    }
}

// Sum the E = 32/G edge slots' partials; afterwards every lane holds its columns' totals.
template <int G, int P, int V>
__device__ __forceinline__ void warp_slot_sum(float (&acc)[P][V]) {
#pragma unroll
    for (int off = G; off < 32; off <<= 1)
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int v = 0; v < V; ++v) acc[p][v] += __shfl_xor_sync(AUTOSAGE_FULL_MASK, acc[p][v], off);
}

// Whole warp: the sums of edges [begin, end) for columns starting at col0 (P chunks), slot-summed.
template <typename T, int G, int V, int U, int P>
__device__ __forceinline__ void warp_range(int begin, int end, const int* __restrict__ indices,
                                          const T* __restrict__ values, const T* __restrict__ B,
                                          long long ldb, int col0, int col_end, float (&acc)[P][V]) {
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
        for (int v = 0; v < V; ++v) acc[p][v] = 0.0f;
    if (values != nullptr) {
        warp_range_accumulate<T, G, V, U, P, true>(begin, end, indices, values, B, ldb, col0, col_end, acc);
    } else {
        warp_range_accumulate<T, G, V, U, P, false>(begin, end, indices, values, B, ldb, col0, col_end, acc);
    }
    warp_slot_sum<G, P, V>(acc);
}

// Whole warp: row `row` of C over all k columns (an empty row is written as zeros), P = 1.
template <typename T, int G, int V, int U, typename EA = EpilogueArgs<T, NoEpilogue>>
__device__ __forceinline__ void warp_row(int row, int k, const int* __restrict__ indptr,
                                         const int* __restrict__ indices,
                                         const T* __restrict__ values, const T* __restrict__ B,
                                         long long ldb, T* __restrict__ C, long long ldc,
                                         const EA& epi = EA()) {
    const int begin = __ldg(indptr + row);
    const int end = __ldg(indptr + row + 1);
    const int lane = lane_id();
#pragma unroll 1
    for (int base = 0; base < k; base += G * V) {
        const int col = base + (lane & (G - 1)) * V;
        float acc[1][V];
        warp_range<T, G, V, U, 1>(begin, end, indices, values, B, ldb, col, k, acc);
        if (lane < G && col < k) {
            epi.template apply<V>(col, k, acc[0]);
            store_vec<V>(C + row * ldc + col, acc[0]);
        }
    }
}

}  // namespace autosage
