// spmm_parreduce.cu: SpMM C = A * B for small K (<= 8) on skewed graphs: parallel reduction over a
// row's nonzeros (GE-SpMM's "parreduce", Huang et al., SC'20) by persistent groups walking a
// degree-ordered row list.
//
// A group of G lanes owns a row and lane l takes its nonzeros begin+l, begin+l+G, ...: the group's
// (col, val) loads are coalesced and every lane keeps all K (<= KMAX) sums in registers; the G
// partials are summed with xor-shuffles and lane j writes column j. The row walk itself is the
// vector family's (spmm_vector.cu: U edges per lane in flight, the next U (col, val) prefetched).
//
// What differs from the vector family is how rows reach the groups:
//   * persistent groups: the grid holds only as many blocks as stay resident (the plan asks the
//     occupancy API), and each group strides over the row list. No block waits for the longest of
//     its rows before its slot is refilled, and the list entries and bounds of the rows ahead are
//     loaded while the current row is walked, so a row's walk never waits for them;
//   * longest rows first: the host orders the rows by degree bin, longest first (ascending ids
//     within a bin keep the gathers' locality; backends/row_partition.py). Rows of one warp then
//     have similar lengths, and the static stride hands every group one long row before any short
//     one, so the longest row is not the last one started;
//   * heavy rows by warps (G < 32): rows the plan marks heavy (more than a few steps for G lanes)
//     are walked by a whole warp each before the groups start on the light rows.
//
// Knobs (template parameters): T value type; G lanes per light row (8, 16 or 32); KMAX the widest K
// served (1, 2, 4, 8; a schedule serves KMAX/2 < K <= KMAX); U edges per lane in flight; EPI the
// epilogue applied where a row is stored (spmm_epilogue.cuh; default NoEpilogue; an Epilogue<...>
// instantiation takes (bias, scale, alpha) last).
//
// Arguments: k; CSR indptr/indices (int32); values (nullptr: all ones); B (ldb elements per row);
// C (ldc elements per row); the heavy rows (walked by warps) and the light rows (by G-lane groups),
// each longest first. Every row of C is in exactly one list; empty rows are written as zeros.
// No standard headers: NVRTC compiles this at run time without a host include path.
#include "spmm_vector.cu"

namespace autosage {

// Groups of G lanes, group `first` of `stride`, walk rows[first], rows[first + stride], ...
// The stride is uniform per group, so all G lanes of a group stay together for the shuffles.
// Two rows ahead are in flight while a row is walked: the next row's bounds (its id arrived one
// row earlier, so their loads do not wait) and the id of the row after it. A load whose address
// came from a load still in flight would stall the warp before the walk; these never do.
template <typename T, int G, int KMAX, int U, typename EA>
__device__ __forceinline__ void parreduce_rows(long long first, long long stride, int n_items,
                                               const int* __restrict__ rows, int k, bool vec,
                                               const int* __restrict__ indptr,
                                               const int* __restrict__ indices,
                                               const T* __restrict__ values, const T* __restrict__ B,
                                               long long ldb, T* __restrict__ C, long long ldc,
                                               const EA& epi) {
    if (first >= n_items) return;
    const int glane = lane_id() & (G - 1);
    int row = __ldg(rows + first);
    int next_row = first + stride < n_items ? __ldg(rows + first + stride) : 0;
    int begin = __ldg(indptr + row);
    int end = __ldg(indptr + row + 1);
#pragma unroll 1
    for (long long item = first; item < n_items; item += stride) {
        int next_begin = 0, next_end = 0, after_next = 0;
        if (item + stride < n_items) {
            next_begin = __ldg(indptr + next_row);
            next_end = __ldg(indptr + next_row + 1);
        }
        if (item + 2 * stride < n_items) after_next = __ldg(rows + item + 2 * stride);
        vector_row<T, G, KMAX, U>(row, begin, end, glane, k, vec, indices, values, B, ldb, C, ldc, epi);
        row = next_row;
        begin = next_begin;
        end = next_end;
        next_row = after_next;
    }
}

}  // namespace autosage

template <typename T, int G, int KMAX, int U, typename EPI = autosage::NoEpilogue>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_parreduce(const int k, const int* __restrict__ indptr, const int* __restrict__ indices,
               const T* __restrict__ values, const T* __restrict__ B, const long long ldb,
               T* __restrict__ C, const long long ldc, const int n_heavy,
               const int* __restrict__ heavy_rows, const int n_light,
               const int* __restrict__ light_rows AUTOSAGE_EPILOGUE_PARAMS) {
    static_assert(G == 8 || G == 16 || G == 32, "G must be 8, 16 or 32");
    static_assert(KMAX == 1 || KMAX == 2 || KMAX == 4 || KMAX == 8, "KMAX must be 1, 2, 4 or 8");
    const bool vec = autosage::gather_vectorizable<T, KMAX>(k, B, ldb);
    const auto epi = AUTOSAGE_EPILOGUE_ARGS(EPI);
    const long long thread = autosage::global_thread();
    const long long n_threads = static_cast<long long>(gridDim.x) * blockDim.x;
    if constexpr (G < 32) {
        autosage::parreduce_rows<T, 32, KMAX, U>(thread / 32, n_threads / 32, n_heavy, heavy_rows, k,
                                                 vec, indptr, indices, values, B, ldb, C, ldc, epi);
    }
    autosage::parreduce_rows<T, G, KMAX, U>(thread / G, n_threads / G, n_light, light_rows, k, vec,
                                            indptr, indices, values, B, ldb, C, ldc, epi);
}
