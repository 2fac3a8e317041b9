// spmm_stream.cu: SpMM C = A * B for small K (<= 8) as a stream of equal edge windows (CSR-stream,
// Greathouse & Daga, SC'14): block b takes nonzeros [b*W, (b+1)*W), W = BLOCK x U, whatever rows
// they belong to.
//
// Why: the row-walking families (vector, parreduce) start every row with a chain of dependent
// loads (bounds, then indices, then gathers) and keep only a row's few edges in flight; on
// products-like (124M nonzeros, rows of ~50) they reached 1.3 TB/s at K = 1 where cuSPARSE's SpMV
// reaches 2.8. Here a block's loads do not depend on where rows start: thread t loads edges
// t, t + BLOCK, ... of the window (U of them, all in flight at once, coalesced), gathers their B
// rows, and leaves the products in shared memory. Every block does the same work, so no row length
// can make a block the last one.
//
// Phase 2 sums the window's rows out of shared memory. The window's rows are window_row[b] ..
// window_row[b + 1] (the host's list: the first row ending after the window starts, up to the
// first row ending after it ends). P lanes take one row (P: the largest power of two <= 32 with
// rows x P <= BLOCK), sum its products lane-strided and combine with xor-shuffles. A row inside the
// window is written to C. A row that crosses a window edge has a partial in each window it touches:
// the window where it starts writes its "tail" slot 2b + 1 of the scratch, every later one its
// "head" slot 2b (a window has at most one row of each). A second launch (spmm_stream_crossing),
// one thread per crossing row, sums them in window order: bitwise deterministic, no atomics, no
// fences, and nothing to reset between launches. (A first version took a ticket per crossing row,
// the last window summing, as the split family does, which keeps a thread of most blocks waiting
// on a fence; together with 64 registers a thread, below, it ran products-like K = 2 in 0.87 ms on
// the H200 against 0.675 ms for this one.)
//
// Knobs (template parameters): T value type; KMAX the widest K served (1, 2, 4, 8; a schedule
// serves KMAX/2 < K <= KMAX); U edges per thread; BLOCK threads per block (the window and the
// shared products, W x KMAX floats, are sized by it); EPI the epilogue (spmm_epilogue.cuh; default
// NoEpilogue), applied where a row's final value is written: by the window kernel for a row inside
// its window, by the crossing kernel after it has summed a crossing row's partials (never to a
// partial); both kernels of an Epilogue<...> instantiation take (bias, scale, alpha) last.
//
// Arguments: n_rows; nnz; k; CSR indptr/indices (int32); values (nullptr: all ones); B (ldb elements
// per row); C (ldc elements per row); window_row (n_windows + 1 row ids); scratch (2 x n_windows x
// KMAX floats). Empty rows are written as zeros.
// No standard headers: NVRTC compiles this at run time without a host include path.
#include "spmm_vector.cu"

namespace autosage {

// KMAX products of one edge from shared memory, as one 8- or 16-byte load per 4 floats.
template <int KMAX>
__device__ __forceinline__ void load_products(const float* p, float (&out)[KMAX]) {
    if constexpr (KMAX == 1) {
        out[0] = p[0];
    } else if constexpr (KMAX == 2) {
        const float2 t = *reinterpret_cast<const float2*>(p);
        out[0] = t.x; out[1] = t.y;
    } else {
#pragma unroll
        for (int i = 0; i < KMAX; i += 4) {
            const float4 t = *reinterpret_cast<const float4*>(p + i);
            out[i] = t.x; out[i + 1] = t.y; out[i + 2] = t.z; out[i + 3] = t.w;
        }
    }
}

}  // namespace autosage

// Registers for 1536 resident threads per SM (6 blocks of 256: at most 40 registers a thread). The
// window's loads are all issued up front, so resident threads are what keeps bytes in flight; left
// at the 64 of AUTOSAGE_LAUNCH_BOUNDS, ptxas took all 64 at U = 8 (4 blocks per SM). A standalone
// H200 experiment at 40 registers (atomics for crossing rows) ran products-like K = 2 in 0.66 ms.
#define STREAM_MIN_BLOCKS(block) (1536 / (block))

template <typename T, int KMAX, int U, int BLOCK, typename EPI = autosage::NoEpilogue>
__global__ void __launch_bounds__(BLOCK, STREAM_MIN_BLOCKS(BLOCK))
spmm_stream(const int n_rows, const int nnz, const int k, const int* __restrict__ indptr,
            const int* __restrict__ indices, const T* __restrict__ values, const T* __restrict__ B,
            const long long ldb, T* __restrict__ C, const long long ldc,
            const int* __restrict__ window_row, float* __restrict__ scratch AUTOSAGE_EPILOGUE_PARAMS) {
    const auto epi = AUTOSAGE_EPILOGUE_ARGS(EPI);
    static_assert(KMAX == 1 || KMAX == 2 || KMAX == 4 || KMAX == 8, "KMAX must be 1, 2, 4 or 8");
    static_assert(BLOCK % 32 == 0 && BLOCK <= AUTOSAGE_MAX_THREADS, "BLOCK must be whole warps");
    constexpr int W = BLOCK * U;  // nonzeros per window
    __shared__ __align__(16) float products[W * KMAX];
    const int tid = threadIdx.x;
    const long long first_edge = static_cast<long long>(blockIdx.x) * W;
    const int e0 = static_cast<int>(first_edge);
    const int e1 = static_cast<int>(first_edge + W < nnz ? first_edge + W : nnz);

    // Phase 1: the window's (col, val) pairs, all U per thread in flight, then their B rows.
    int c[U];
    float a[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int e = e0 + u * BLOCK + tid;
        const bool ok = e < e1;
        c[u] = ok ? __ldg(indices + e) : 0;
        a[u] = !ok ? 0.0f : values != nullptr ? autosage::to_float(autosage::load_scalar(values + e)) : 1.0f;
    }
    const int r_lo = __ldg(window_row + blockIdx.x);
    const int r_hi = __ldg(window_row + blockIdx.x + 1);
    const bool vec = autosage::gather_vectorizable<T, KMAX>(k, B, ldb);
#pragma unroll
    for (int u = 0; u < U; ++u) {
        float b[KMAX];
        if (e0 + u * BLOCK + tid < e1) {
            autosage::gather_row<T, KMAX>(B + c[u] * ldb, k, vec, b);
        } else {
#pragma unroll
            for (int j = 0; j < KMAX; ++j) b[j] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < KMAX; ++j) b[j] *= a[u];
        autosage::store_partials<KMAX>(products + (u * BLOCK + tid) * KMAX, b);
    }

    // Phase 2: P lanes per row of the window (r_hi only if it starts inside the window).
    const long long n_win = static_cast<long long>(r_hi) - r_lo + 1;
    int P = 32;
    while (P > 1 && n_win * P > BLOCK) P >>= 1;
    const int lane = autosage::lane_id();
    const int glane = lane & (P - 1);
    const unsigned mask = P == 32 ? AUTOSAGE_FULL_MASK : ((1u << P) - 1u) << (lane & ~(P - 1));
    __syncthreads();
#pragma unroll 1
    for (long long i = tid / P; i < n_win; i += BLOCK / P) {
        const int row = r_lo + static_cast<int>(i);
        if (row >= n_rows) break;  // uniform per group: its lanes share i
        const int start = __ldg(indptr + row);
        const int end = __ldg(indptr + row + 1);
        if (row == r_hi && start >= e1) break;  // the next window's row
        const int s = start > e0 ? start : e0;
        const int t = end < e1 ? end : e1;
        float acc[KMAX];
#pragma unroll
        for (int j = 0; j < KMAX; ++j) acc[j] = 0.0f;
#pragma unroll 1
        for (int e = s + glane; e < t; e += P) {
            float p[KMAX];
            autosage::load_products<KMAX>(products + (e - e0) * KMAX, p);
#pragma unroll
            for (int j = 0; j < KMAX; ++j) acc[j] += p[j];
        }
#pragma unroll
        for (int j = 0; j < KMAX; ++j)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                if (off < P) acc[j] += __shfl_xor_sync(mask, acc[j], off);
        if (glane != 0) continue;
        if (start >= e0 && end <= e1) {
            epi.template apply<KMAX>(0, k, acc);
            T* __restrict__ out = C + row * ldc;
#pragma unroll
            for (int j = 0; j < KMAX; ++j)
                if (j < k) out[j] = autosage::from_float<T>(acc[j]);
        } else {  // a crossing row: its head (began earlier) or tail (goes on) slot of this window
            const long long slot = 2LL * blockIdx.x + (start < e0 ? 0 : 1);
            autosage::store_partials<KMAX>(scratch + slot * KMAX, acc);
        }
    }
}

// The second launch: one thread per crossing row sums its partials in window order (the tail slot
// of its first window, then the head slots of the others) and writes C's row.
template <typename T, int KMAX, typename EPI = autosage::NoEpilogue>
__global__ void AUTOSAGE_LAUNCH_BOUNDS
spmm_stream_crossing(const int n_crossing, const int* __restrict__ crossing_rows,
                     const int* __restrict__ indptr, const int window, const int k,
                     const float* __restrict__ scratch, T* __restrict__ C,
                     const long long ldc AUTOSAGE_EPILOGUE_PARAMS) {
    const auto epi = AUTOSAGE_EPILOGUE_ARGS(EPI);
    const long long item = autosage::global_thread();
    if (item >= n_crossing) return;
    const int row = __ldg(crossing_rows + item);
    const int first = __ldg(indptr + row) / window;
    const int last = (__ldg(indptr + row + 1) - 1) / window;
    float sum[KMAX];
    autosage::load_partials_cg<KMAX>(scratch + (2LL * first + 1) * KMAX, sum);
#pragma unroll 1
    for (long long w = first + 1; w <= last; ++w) {
        float part[KMAX];
        autosage::load_partials_cg<KMAX>(scratch + 2 * w * KMAX, part);
#pragma unroll
        for (int j = 0; j < KMAX; ++j) sum[j] += part[j];
    }
    epi.template apply<KMAX>(0, k, sum);
    T* __restrict__ out = C + row * ldc;
#pragma unroll
    for (int j = 0; j < KMAX; ++j)
        if (j < k) out[j] = autosage::from_float<T>(sum[j]);
}
