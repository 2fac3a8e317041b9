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
