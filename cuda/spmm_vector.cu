// spmm_vector.cu: SpMM C = A * B for small K, edge-parallel within a row (CSR-vector, Bell & Garland
// 2009): a group of G lanes owns a row and lane l takes edges begin+l, begin+l+G, ..., so the
// group's (col, val) loads are coalesced, and every lane keeps all K (<= KMAX) sums in registers.
// At the end the G lanes' sums are combined with xor-shuffles inside the group's lane mask.
//
// Why: the feature-parallel families (subwarp, warprow, split) put lanes on features, so at K <= 4
// a group is 1-4 lanes and each lane walks every edge of its row: the index/value stream is read by
// 16-32 narrow independent streams per warp and latency, not bandwidth, binds (H200, products-like
// K=2: 1.14 ms, 0.9 TB/s effective; cuSPARSE ALG1 at K=1 reaches 2.8 TB/s).
//
// Knobs (template parameters): T value type; G lanes per row (4..32; G = 32 is a warp per row, which
// also serves long rows since their edges are spread over the lanes); KMAX the widest K served
// (1, 2, 4, 8; a schedule serves KMAX/2 < K <= KMAX); U edges per lane whose B loads are in flight at
// once. The next U edges' (col, val) are loaded while the current ones' B rows are gathered, so a
// step costs one gather latency, not an index load followed by a gather.
// B rows are read as vectors of up to 16 bytes when K == KMAX >= 2 and B's base pointer and ldb allow it
// (checked here, per launch, so a misaligned view falls back to scalar loads instead of failing);
// otherwise as K scalars. Rows with no edges are written as zeros.
//
// Arguments: n_rows; k; CSR indptr/indices (int32); values (nullptr: all ones); B (ldb elements per
// row); C (ldc elements per row). EPI: the epilogue applied to each value where it is stored
// (spmm_epilogue.cuh; default NoEpilogue); an Epilogue<...> instantiation takes (bias, scale,
// alpha) last.
// No standard headers: NVRTC compiles this at run time without a host include path.
#include "common.cuh"
#include "spmm_epilogue.cuh"

namespace autosage {

// Gather B[c, 0..KMAX) into b: vector loads when `vec` (K == KMAX, aligned), else K guarded scalars.
// Elements of one vector load of B: 16 bytes (4 floats, 8 halves), or the whole row when shorter.
template <typename T, int KMAX>
__host__ __device__ constexpr int gather_width() {
    return KMAX < static_cast<int>(16 / sizeof(T)) ? KMAX : static_cast<int>(16 / sizeof(T));
}

// Whether B rows can be gathered as vectors: K fills all KMAX sums and B's base pointer and ldb are
// aligned to gather_row's widest load (16 bytes, or the whole row when it is shorter). Checked per
// launch, so a misaligned view falls back to scalar loads instead of failing.
template <typename T, int KMAX>
__device__ __forceinline__ bool gather_vectorizable(int k, const T* B, long long ldb) {
    constexpr int VW = gather_width<T, KMAX>();
    return KMAX > 1 && k == KMAX && ldb % VW == 0 &&
           reinterpret_cast<unsigned long long>(B) % (VW * sizeof(T)) == 0;
}

template <typename T, int KMAX>
__device__ __forceinline__ void gather_row(const T* __restrict__ p, int k, bool vec, float (&b)[KMAX]) {
    constexpr int VW = gather_width<T, KMAX>();
    if (KMAX > 1 && vec) {
#pragma unroll
        for (int j = 0; j < KMAX; j += VW) {
            float t[VW];
            load_vec<VW>(p + j, t);
#pragma unroll
            for (int v = 0; v < VW; ++v) b[j + v] = t[v];
        }
    } else {
#pragma unroll
        for (int j = 0; j < KMAX; ++j) b[j] = j < k ? to_float(load_scalar(p + j)) : 0.0f;
    }
}

// This lane's share of edges [begin, end): edges glane, glane + G, ... accumulated into acc.
template <typename T, int G, int KMAX, int U, bool VALUES>
__device__ __forceinline__ void vector_row_accumulate(int begin, int end, int glane, int k, bool vec,
                                                      const int* __restrict__ indices,
                                                      const T* __restrict__ values,
                                                      const T* __restrict__ B, long long ldb,
                                                      float (&acc)[KMAX]) {
    int c[U];
    float a[U];
    int e = begin + glane;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int eu = e + u * G;
        c[u] = eu < end ? __ldg(indices + eu) : 0;
        a[u] = VALUES && eu < end ? to_float(load_scalar(values + eu)) : 1.0f;
    }
#pragma unroll 1
    for (; e < end; e += U * G) {
        float b[U][KMAX];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (e + u * G < end) {
                gather_row<T, KMAX>(B + c[u] * ldb, k, vec, b[u]);
            } else {
#pragma unroll
                for (int j = 0; j < KMAX; ++j) b[u][j] = 0.0f;
            }
        }
        // Prefetch the next step's (col, val) while the gathers above are in flight.
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int en = e + (U + u) * G;
            const bool ok = en < end;
            const int cn = ok ? __ldg(indices + en) : 0;
            const float an = VALUES && ok ? to_float(load_scalar(values + en)) : 1.0f;
#pragma unroll
            for (int j = 0; j < KMAX; ++j) acc[j] = VALUES ? fmaf(a[u], b[u][j], acc[j]) : acc[j] + b[u][j];
            c[u] = cn;
            a[u] = an;
        }
    }
}

// Row `row` of C from the group's share of edges [begin, end): accumulate, sum the G lanes' partials
// with xor-shuffles inside the group's lane mask, and write columns 0..k (an empty row as zeros).
// Called by all G lanes of the group.
template <typename T, int G, int KMAX, int U, typename EA = EpilogueArgs<T, NoEpilogue>>
__device__ __forceinline__ void vector_row(long long row, int begin, int end, int glane, int k, bool vec,
                                           const int* __restrict__ indices,
                                           const T* __restrict__ values, const T* __restrict__ B,
                                           long long ldb, T* __restrict__ C, long long ldc,
                                           const EA& epi = EA()) {
    float acc[KMAX];
#pragma unroll
    for (int j = 0; j < KMAX; ++j) acc[j] = 0.0f;
    if (values != nullptr) {
        vector_row_accumulate<T, G, KMAX, U, true>(begin, end, glane, k, vec, indices, values, B, ldb, acc);
    } else {
        vector_row_accumulate<T, G, KMAX, U, false>(begin, end, glane, k, vec, indices, values, B, ldb, acc);
    }
    const unsigned mask = group_mask<G>();
#pragma unroll
    for (int j = 0; j < KMAX; ++j) acc[j] = group_sum<G>(acc[j], mask);

    // Lane l of the group writes columns l, l + G, ... (< k): coalesced within the group. acc is
    // indexed with compile-time constants only (a select), so it stays in registers.
    T* __restrict__ out = C + row * ldc;
#pragma unroll
    for (int j0 = 0; j0 < KMAX; j0 += G) {
        const int col = j0 + glane;
        float v[1] = {0.0f};
#pragma unroll
        for (int j = j0; j < KMAX && j < j0 + G; ++j) v[0] = col == j ? acc[j] : v[0];
        if (col < k) {
            epi.template apply<1>(col, k, v);
            out[col] = from_float<T>(v[0]);
        }
    }
}

}  // namespace autosage

template <typename T, int G, int KMAX, int U, typename EPI = autosage::NoEpilogue>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_vector(const int n_rows, const int k, const int* __restrict__ indptr,
            const int* __restrict__ indices, const T* __restrict__ values,
            const T* __restrict__ B, const long long ldb, T* __restrict__ C,
            const long long ldc AUTOSAGE_EPILOGUE_PARAMS) {
    static_assert(G == 4 || G == 8 || G == 16 || G == 32, "G must be 4, 8, 16 or 32");
    static_assert(KMAX == 1 || KMAX == 2 || KMAX == 4 || KMAX == 8, "KMAX must be 1, 2, 4 or 8");
    const long long row = autosage::global_thread() / G;
    // Whole groups leave together (G divides 32 and the block), so the shuffles below only ever
    // name lanes of groups that are still running.
    if (row >= n_rows) return;
    const int begin = __ldg(indptr + row);
    const int end = __ldg(indptr + row + 1);
    const int glane = autosage::lane_id() & (G - 1);
    const bool vec = autosage::gather_vectorizable<T, KMAX>(k, B, ldb);
    autosage::vector_row<T, G, KMAX, U>(row, begin, end, glane, k, vec, indices, values, B, ldb, C, ldc,
                                        AUTOSAGE_EPILOGUE_ARGS(EPI));
}
