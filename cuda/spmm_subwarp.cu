// spmm_subwarp.cu: SpMM C = A * B with a group of G lanes per row, 32/G rows per warp.
//
// Knobs (template parameters): T value type; G lanes per row (1..32); V elements per lane per load
// (1, 2, 4: 16-byte loads for float at V = 4); U edges whose B loads are in flight at once.
// Each group walks its row once per G*V-wide feature chunk (K > G*V loops over chunks). Rows with no
// edges are written as zeros. Best for short, even rows (uniform, products-like) where a whole warp
// per row would idle; the schedule space pairs G*V with K.
//
// Arguments: n_rows; k; CSR indptr/indices (int32); values (nullptr: all ones); B (ldb elements per
// row); C (ldc elements per row).
// EPI: the epilogue applied where a row is stored (spmm_epilogue.cuh; default NoEpilogue); an
// Epilogue<...> instantiation takes (bias, scale, alpha) after the arguments above.
#include "spmm_common.cuh"

template <typename T, int G, int V, int U, typename EPI = autosage::NoEpilogue>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_subwarp(const int n_rows, const int k, const int* __restrict__ indptr,
             const int* __restrict__ indices, const T* __restrict__ values,
             const T* __restrict__ B, const long long ldb, T* __restrict__ C,
             const long long ldc AUTOSAGE_EPILOGUE_PARAMS) {
    const long long row = autosage::global_thread() / G;
    if (row >= n_rows) return;  // whole groups leave together; this family uses no shuffles
    autosage::group_row<T, G, V, U>(static_cast<int>(row), k, indptr, indices, values, B, ldb, C, ldc,
                                    AUTOSAGE_EPILOGUE_ARGS(EPI));
}
