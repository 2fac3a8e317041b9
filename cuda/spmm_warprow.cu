// spmm_warprow.cu: SpMM C = A * B with one warp per row and cooperative (col, val) staging
// (GE-SpMM, Huang et al., SC'20): the warp loads 32 pairs with one coalesced access, prefetches the
// next 32, and hands them out with __shfl_sync.
//
// Knobs (template parameters): T value type; G lanes per edge slot (the warp is 32/G slots working
// on different edges of the same row, summed by xor-shuffles at the end: G = 32 is GE-SpMM, small G
// puts a whole warp on one long row at small K); V elements per lane per load; U staged edges whose
// B loads are in flight at once; P feature chunks of G*V columns held per lane, so one staging pass
// covers W = G*V*P columns.
// Feature passes of width W start at blockIdx.y * W and step by gridDim.y * W: a schedule with a
// feature tile (tile == W) launches ceil(K / W) blocks along y, one pass each; without a tile, one
// block row loops over all passes.
//
// Arguments: n_rows; k; CSR indptr/indices (int32); values (nullptr: all ones); B (ldb); C (ldc).
// EPI: the epilogue applied where a row is stored (spmm_epilogue.cuh; default NoEpilogue); an
// Epilogue<...> instantiation takes (bias, scale, alpha) after the arguments above.
#include "spmm_common.cuh"

template <typename T, int G, int V, int U, int P, typename EPI = autosage::NoEpilogue>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_warprow(const int n_rows, const int k, const int* __restrict__ indptr,
             const int* __restrict__ indices, const T* __restrict__ values,
             const T* __restrict__ B, const long long ldb, T* __restrict__ C,
             const long long ldc AUTOSAGE_EPILOGUE_PARAMS) {
    constexpr int W = G * V * P;
    const auto epi = AUTOSAGE_EPILOGUE_ARGS(EPI);
    const long long warp = autosage::global_thread() >> 5;
    if (warp >= n_rows) return;  // uniform per warp, so the shuffles below see full warps
    const int row = static_cast<int>(warp);
    const int begin = __ldg(indptr + row);
    const int end = __ldg(indptr + row + 1);
    const int lane = autosage::lane_id();
#pragma unroll 1
    for (int base = blockIdx.y * W; base < k; base += gridDim.y * W) {
        const int col0 = base + (lane & (G - 1)) * V;
        float acc[P][V];
        autosage::warp_range<T, G, V, U, P>(begin, end, indices, values, B, ldb, col0, k, acc);
        if (lane < G) {
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const int col = col0 + p * G * V;
                if (col < k) {
                    epi.template apply<V>(col, k, acc[p]);
                    autosage::store_vec<V>(C + row * ldc + col, acc[p]);
                }
            }
        }
    }
}
