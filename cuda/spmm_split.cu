// spmm_split.cu: SpMM C = A * B for skewed graphs, in one launch. Rows with more than `split`
// nonzeros ("heavy") are cut into chunks of `chunk` nonzeros, each taken by one warp, so a 30k-edge
// hub costs ~120 warps' time in parallel instead of one warp's time in series. The host builds the
// lists once per input (autosage_cli/backends/row_partition.py):
//   chunk_row/start   one entry per chunk; the chunks of a heavy row are consecutive; a chunk ends
//                     at min(start + chunk, indptr[row + 1])
//   chunk_owner       the heavy-row index h of each chunk; heavy row h owns chunks
//                     heavy_chunk_ptr[h] .. heavy_chunk_ptr[h + 1]
//   light_rows        the other rows, longest degree bins first (longest-first evens out the tail;
//                     ids ascend within a bin for locality)
// Blocks [0, chunk_blocks) take chunks (heavy work first), the rest take light rows.
//
// Combining a heavy row's chunks without a second launch ("last one out reduces", as CUDA's
// threadFenceReduction sample): every chunk warp publishes its partial sums, fences, and takes a
// ticket from tickets[h]; the warp that draws the last ticket reads all of row h's partials (through
// L2: __ldcg), writes C's row and resets the ticket (and, for atomics, the scratch row) to zero, so
// the next launch finds them as prepare() left them. A plan therefore runs one launch at a time.
//   TWOPHASE = false  partials atomicAdd into scratch[h][k] (n_heavy x k, zeroed at prepare).
//   TWOPHASE = true   each chunk stores its own scratch[chunk][k]; the last warp sums them in a
//                     fixed order (edge slot s takes chunks s, s + 32/G, ...; then xor-shuffles):
//                     bitwise deterministic, no atomics on data.
//
// Knobs (template parameters): T; G lanes per light row (LIGHT_WARP = false: 32/G light rows per
// warp, no shuffles) or per edge slot (LIGHT_WARP = true: a warp per light row of 32/G edge slots);
// chunks always use a warp of 32/G edge slots of G lanes; V elements per lane; U edges in flight;
// EPI the epilogue (spmm_epilogue.cuh; default NoEpilogue): applied where a light row is stored
// and, for a heavy row, by the last warp once it has summed the chunks' partials (never to a
// chunk's partial sums); an Epilogue<...> instantiation takes (bias, scale, alpha) last.
#include "spmm_common.cuh"

namespace {

// The last warp of heavy row h: C[row] = the epilogue of the sum of the row's chunk partials.
template <typename T, int G, int V, bool TWOPHASE, typename EA>
__device__ __forceinline__ void reduce_heavy_row(int h, int row, int c_begin, int c_end, int k,
                                                 float* __restrict__ scratch, T* __restrict__ C,
                                                 long long ldc, const EA& epi) {
    constexpr int E = 32 / G;
    const int lane = autosage::lane_id();
    const int slot = lane / G;
#pragma unroll 1
    for (int base = 0; base < k; base += G * V) {
        const int col = base + (lane & (G - 1)) * V;
        float acc[1][V];
#pragma unroll
        for (int v = 0; v < V; ++v) acc[0][v] = 0.0f;
        if constexpr (TWOPHASE) {
            if (col < k) {
                for (int c = c_begin + slot; c < c_end; c += E) {
                    float part[V];
                    autosage::load_partials_cg<V>(scratch + static_cast<long long>(c) * k + col, part);
#pragma unroll
                    for (int v = 0; v < V; ++v) acc[0][v] += part[v];
                }
            }
            autosage::warp_slot_sum<G, 1, V>(acc);
        } else {
            if (slot == 0 && col < k) {
                float* own = scratch + static_cast<long long>(h) * k + col;
                autosage::load_partials_cg<V>(own, acc[0]);
                float zero[V];
#pragma unroll
                for (int v = 0; v < V; ++v) zero[v] = 0.0f;
                autosage::store_partials<V>(own, zero);
            }
        }
        if (lane < G && col < k) {
            epi.template apply<V>(col, k, acc[0]);
            autosage::store_vec<V>(C + row * ldc + col, acc[0]);
        }
    }
}

}  // namespace

template <typename T, int G, int V, int U, bool LIGHT_WARP, bool TWOPHASE,
          typename EPI = autosage::NoEpilogue>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_split(const int k, const int* __restrict__ indptr, const int* __restrict__ indices,
           const T* __restrict__ values, const T* __restrict__ B, const long long ldb,
           T* __restrict__ C, const long long ldc, const int n_chunks, const int chunk_blocks,
           const int* __restrict__ chunk_row, const int* __restrict__ chunk_start,
           const int* __restrict__ chunk_owner, const int chunk,
           const int* __restrict__ heavy_chunk_ptr, float* __restrict__ scratch,
           int* __restrict__ tickets, const int n_light,
           const int* __restrict__ light_rows AUTOSAGE_EPILOGUE_PARAMS) {
    const auto epi = AUTOSAGE_EPILOGUE_ARGS(EPI);
    const int lane = autosage::lane_id();
    const bool is_chunk = static_cast<int>(blockIdx.x) < chunk_blocks;
    if constexpr (!LIGHT_WARP) {
        if (!is_chunk) {
            const long long item =
                ((static_cast<long long>(blockIdx.x) - chunk_blocks) * blockDim.x + threadIdx.x) / G;
            if (item >= n_light) return;  // whole groups leave together
            const int row = __ldg(light_rows + item);
            autosage::group_row<T, G, V, U>(row, k, indptr, indices, values, B, ldb, C, ldc, epi);
            return;
        }
    }
    // A warp's item: a chunk of a heavy row, or (LIGHT_WARP) a whole light row. One inlined copy of
    // the warp loop serves both (two copies spilled at G = 4, V = 4).
    const long long item =
        ((static_cast<long long>(blockIdx.x) - (is_chunk ? 0 : chunk_blocks)) * blockDim.x + threadIdx.x) >> 5;
    if (item >= (is_chunk ? n_chunks : n_light)) return;  // uniform per warp
    int row, begin, end;
    if (is_chunk) {
        row = __ldg(chunk_row + item);
        begin = __ldg(chunk_start + item);
        end = min(begin + chunk, __ldg(indptr + row + 1));
    } else {
        row = __ldg(light_rows + item);
        begin = __ldg(indptr + row);
        end = __ldg(indptr + row + 1);
    }
#pragma unroll 1
    for (int base = 0; base < k; base += G * V) {
        const int col = base + (lane & (G - 1)) * V;
        float acc[1][V];
        autosage::warp_range<T, G, V, U, 1>(begin, end, indices, values, B, ldb, col, k, acc);
        if (lane < G && col < k) {
            if (!is_chunk) {
                epi.template apply<V>(col, k, acc[0]);
                autosage::store_vec<V>(C + row * ldc + col, acc[0]);
            } else if constexpr (TWOPHASE) {
                autosage::store_partials<V>(scratch + item * k + col, acc[0]);
            } else {
                const int h = __ldg(chunk_owner + item);
                autosage::atomic_add_vec<V>(scratch + static_cast<long long>(h) * k + col, acc[0]);
            }
        }
    }
    if (!is_chunk) return;
    const int h = __ldg(chunk_owner + item);
    // Publish this chunk's partials before taking a ticket.
    __threadfence();
    __syncwarp();
    int ticket = 0;
    if (lane == 0) ticket = atomicAdd(tickets + h, 1);
    ticket = __shfl_sync(AUTOSAGE_FULL_MASK, ticket, 0);
    const int c_begin = __ldg(heavy_chunk_ptr + h);
    const int c_end = __ldg(heavy_chunk_ptr + h + 1);
    if (ticket != c_end - c_begin - 1) return;  // not the last chunk of row h
    __threadfence();  // every other chunk's partials are visible from here on
    reduce_heavy_row<T, G, V, TWOPHASE>(h, row, c_begin, c_end, k, scratch, C, ldc, epi);
    if (lane == 0) tickets[h] = 0;
}
