// spmm_split.cu: SpMM C = A * B for skewed graphs. Rows with more than `split` nonzeros ("heavy")
// are cut into chunks of `chunk` nonzeros, each chunk taken by one warp, so a 30k-edge hub costs
// ~120 warps' time in parallel instead of one warp's time in series. The host builds the row lists
// once per input (autosage_cli/backends/row_partition.py):
//   light_rows       light rows, longest degree bins first (longest-first evens out the tail; ids
//                    stay ascending within a bin for locality); atomic plans append ~h for each
//                    heavy row h: "write zeros to row h" before the chunks add into it
//   chunk_row/start  one entry per chunk, chunks of a row consecutive; a chunk ends at
//                    min(start + chunk, indptr[row + 1])
//   heavy_rows, heavy_chunk_ptr   heavy row h's chunks are heavy_chunk_ptr[h] .. [h + 1] (two-phase)
//
// Knobs (template parameters): T; G lanes per light row (LIGHT_WARP = false: 32/G light rows per
// warp, no shuffles) or per edge slot (LIGHT_WARP = true: a warp per light row, 32/G edge slots);
// chunks always use a warp of 32/G edge slots of G lanes; V elements per lane; U edges in flight;
// TWOPHASE = false: chunks atomicAdd into C (rows zeroed by the light pass, which runs first on the
// same stream); true: chunks store partial sums (partial[chunk][k]) and phase 1 sums them per heavy
// row in chunk order: deterministic, no atomics.
//
// Launches (grid.x counted per block, blocks never mix kinds):
//   phase 0: blocks [0, light_blocks) run light items, the rest run chunk items.
//            atomic: once with only light blocks, then once with light_blocks = 0 (chunks only).
//            two-phase: once with both (chunks write their own partials, no ordering needed).
//   phase 1: (two-phase only) one warp per heavy row sums its partials into C.
#include "spmm_common.cuh"

template <typename T, int G, int V, int U, bool LIGHT_WARP, bool TWOPHASE>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_split(const int phase, const int k, const int* __restrict__ indptr,
           const int* __restrict__ indices, const T* __restrict__ values,
           const T* __restrict__ B, const long long ldb, T* __restrict__ C, const long long ldc,
           const int n_light, const int* __restrict__ light_rows, const int light_blocks,
           const int n_chunks, const int* __restrict__ chunk_row,
           const int* __restrict__ chunk_start, const int chunk, const int n_heavy,
           const int* __restrict__ heavy_rows, const int* __restrict__ heavy_chunk_ptr,
           float* __restrict__ partial) {
    const int lane = autosage::lane_id();
    if (phase == 1) {  // two-phase reduction: warp per heavy row, lanes over columns
        const long long h = autosage::global_thread() >> 5;
        if (h >= n_heavy) return;
        const int row = __ldg(heavy_rows + h);
        const int c_begin = __ldg(heavy_chunk_ptr + h);
        const int c_end = __ldg(heavy_chunk_ptr + h + 1);
        for (int col = lane; col < k; col += 32) {
            float s = 0.0f;
            for (int c = c_begin; c < c_end; ++c) s += partial[static_cast<long long>(c) * k + col];
            C[row * ldc + col] = autosage::from_float<T>(s);
        }
        return;
    }
    if (static_cast<int>(blockIdx.x) < light_blocks) {
        const long long t = autosage::global_thread();
        const long long item = LIGHT_WARP ? (t >> 5) : (t / G);
        if (item >= n_light) return;  // whole groups/warps leave together
        const int row_code = __ldg(light_rows + item);
        if constexpr (LIGHT_WARP) {
            autosage::warp_row<T, G, V, U>(row_code, k, indptr, indices, values, B, ldb, C, ldc);
        } else {
            autosage::group_row<T, G, V, U>(row_code, k, indptr, indices, values, B, ldb, C, ldc);
        }
        return;
    }
    const long long item =
        ((static_cast<long long>(blockIdx.x) - light_blocks) * blockDim.x + threadIdx.x) >> 5;
    if (item >= n_chunks) return;  // uniform per warp
    const int row = __ldg(chunk_row + item);
    const int begin = __ldg(chunk_start + item);
    const int end = min(begin + chunk, __ldg(indptr + row + 1));
    for (int base = 0; base < k; base += G * V) {
        const int col = base + (lane & (G - 1)) * V;
        float acc[1][V];
        autosage::warp_range<T, G, V, U, 1>(begin, end, indices, values, B, ldb, col, k, acc);
        if (lane < G && col < k) {
            if constexpr (TWOPHASE) {
                autosage::store_vec<V>(partial + item * k + col, acc[0]);
            } else {
                autosage::atomic_add_vec<V>(C + row * ldc + col, acc[0]);
            }
        }
    }
}
