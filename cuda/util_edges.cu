// util_edges.cu: per-edge helpers in one index type: the row id of every edge, and rows gathered
// per edge (the gather-dot SDDMM and the check of a library SDDMM).
#include "util.cuh"

// rows[e] = the last row r with indptr[r] <= e (empty rows never match), by binary search.
template <typename I>
__global__ void autosage_edge_rows(const I* indptr, long long n_rows, long long nnz, I* rows) {
    for (long long e = first_index(); e < nnz; e += grid_stride()) {
        long long lo = 0, hi = n_rows;
        while (hi - lo > 1) {
            const long long mid = (lo + hi) >> 1;
            if ((long long)indptr[mid] <= e) lo = mid; else hi = mid;
        }
        rows[e] = (I)lo;
    }
}

// dst (n x k, float32) = rows `rows[i]` of src (row stride ld elements), widened to float32.
template <class C, typename I>
__global__ void autosage_gather_rows(const typename C::T* src, long long ld, const I* rows,
                                     long long n, int k, float* dst) {
    for (long long t = first_index(); t < n * k; t += grid_stride()) {
        const long long i = t / k, j = t - i * k;
        dst[t] = C::load(src[(long long)rows[i] * ld + j]);
    }
}

// The graph features' diagonal sums (features.DiagonalSums) in one pass over the edges: a warp per
// row, its lanes striding the row's edges, so a hub row is spread over a warp. sums[0] = sum of
// |col - row|, sums[1] = sum of (col - row) (two's complement, 64 bits), sums[2] / sums[3] = the
// edges below / above the diagonal; one block sum and one atomic per block each.
template <typename I>
__global__ void autosage_diagonal_sums(const I* indptr, const I* indices, long long n_rows,
                                       unsigned long long* sums) {
    const long long warps = grid_stride() >> 5;
    const int lane = threadIdx.x & 31;
    unsigned long long abs_sum = 0, signed_sum = 0, below = 0, above = 0;
    for (long long r = first_index() >> 5; r < n_rows; r += warps) {
        const long long end = (long long)indptr[r + 1];
        for (long long e = (long long)indptr[r] + lane; e < end; e += 32) {
            const long long d = (long long)indices[e] - r;
            abs_sum += (unsigned long long)(d < 0 ? -d : d);
            signed_sum += (unsigned long long)d;
            below += d < 0;
            above += d > 0;
        }
    }
    abs_sum = block_sum(abs_sum);
    signed_sum = block_sum(signed_sum);
    below = block_sum(below);
    above = block_sum(above);
    if (threadIdx.x == 0) {
        atomicAdd(sums + 0, abs_sum);
        atomicAdd(sums + 1, signed_sum);
        atomicAdd(sums + 2, below);
        atomicAdd(sums + 3, above);
    }
}
