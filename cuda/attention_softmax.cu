// Row softmax over the per-edge scores of a CSR graph, in place: the middle step of the unfused
// attention pipeline (SDDMM -> row softmax -> SpMM).
//
//   S[h, e] <- exp(S[h, e] + a_e - m) / sum_{e' in row} exp(S[h, e'] + a_e' - m),  m = row max
//
// S is (heads x nnz), head-major (each head's scores are the contiguous output of one SDDMM launch).
// The bias a_e (A's values) is added only when `values` is not null. Every pass is an online softmax:
// each lane keeps a running (max, sum) over its edges, the lanes merge their pairs with shuffles
// (and the warps of a block through shared memory), then a second pass writes the probabilities. So
// a row is read twice and written once, whatever its length. Scores are moved to the log2 domain so
// each exponential is one ex2.approx.
//
// Long-row aware: attention_softmax_rows gives each (row, head) one group of LANES lanes and skips
// rows with more than `split` edges; attention_softmax_heavy gives each such (heavy row, head) a block
// of THREADS threads (heavy_rows is built once by the plan). Rows without edges have nothing to do.
//
// Template knobs (autosage_cli/kernels/attention_space.py, family "unfused"):
//   I index type (int, long long); LANES lanes per (row, head); THREADS threads per heavy-row block;
//   T the scores' type (float, __half, __nv_bfloat16: the SDDMM's output type; max, sum and exp are
//   float whatever T is). T is last and defaults to float so float32 names stay `<I, LANES>`.

#include "common.cuh"

namespace attention_softmax_detail {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Merge (m2, l2) into (m, l). An empty side has m = -inf, l = 0; comparing with the new max first
// avoids 2^(-inf - -inf) = NaN when both sides are empty.
__device__ __forceinline__ void merge(float& m, float& l, float m2, float l2) {
  const float M = fmaxf(m, m2);
  l = (m == M ? l : l * fast_exp2(m - M)) + (m2 == M ? l2 : l2 * fast_exp2(m2 - M));
  m = M;
}

// Running (max, sum) of this thread's edges begin+first, begin+first+stride, ... < end.
template <typename I, typename T>
__device__ __forceinline__ void partial_max_sum(const T* __restrict__ s, const float* __restrict__ values,
                                                I begin, I end, I first, I stride, float& m, float& l) {
  m = neg_inf();
  l = 0.f;
  for (long long e = (long long)begin + first; e < (long long)end; e += stride) {
    float t = autosage::to_float(s[e]);
    if (values) t += values[e];
    t *= kLog2e;
    merge(m, l, t, 1.f);
  }
}

template <typename I, typename T>
__device__ __forceinline__ void write_probabilities(T* __restrict__ s, const float* __restrict__ values,
                                                    I begin, I end, I first, I stride, float m, float l) {
  const float inv = 1.f / l;  // l >= 1: the max edge contributes 2^0
  for (long long e = (long long)begin + first; e < (long long)end; e += stride) {
    float t = autosage::to_float(s[e]);
    if (values) t += values[e];
    s[e] = autosage::from_float<T>(fast_exp2(t * kLog2e - m) * inv);
  }
}

}  // namespace attention_softmax_detail

// One group of LANES lanes per (row, head); groups are numbered head-major (g = head * n_rows + row)
// so consecutive groups read consecutive scores.
template <typename I, int LANES, typename T = float>
__global__ void attention_softmax_rows(const I* __restrict__ indptr, const float* __restrict__ values,
                                       T* __restrict__ S, long long n_rows, long long nnz, int heads,
                                       long long split) {
  using namespace attention_softmax_detail;
  const long long g = (long long)blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES;
  if (g >= n_rows * heads) return;  // whole groups leave together
  const long long head = g / n_rows;
  const long long row = g - head * n_rows;
  const I begin = indptr[row], end = indptr[row + 1];
  if ((long long)(end - begin) > split) return;  // a heavy row: attention_softmax_heavy's
  T* s = S + head * nnz;
  const I lane = (I)(threadIdx.x & (LANES - 1));
  float m, l;
  partial_max_sum<I, T>(s, values, begin, end, lane, (I)LANES, m, l);
  const unsigned mask = autosage::group_mask<LANES>();
#pragma unroll
  for (int off = LANES / 2; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(mask, m, off, LANES);
    const float l2 = __shfl_xor_sync(mask, l, off, LANES);
    merge(m, l, m2, l2);
  }
  write_probabilities<I, T>(s, values, begin, end, lane, (I)LANES, m, l);
}

// One block of THREADS threads per (heavy row, head): blockIdx.x = r * heads + head.
template <typename I, int THREADS, typename T = float>
__global__ void __launch_bounds__(THREADS) attention_softmax_heavy(
    const I* __restrict__ indptr, const float* __restrict__ values, T* __restrict__ S,
    const I* __restrict__ heavy_rows, long long n_heavy, long long nnz, int heads) {
  using namespace attention_softmax_detail;
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  constexpr int kWarps = THREADS / 32;
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float row_m, row_l;
  const long long item = blockIdx.x;
  if (item >= n_heavy * heads) return;  // the whole block leaves together
  const long long r = item / heads;
  const long long head = item - r * heads;
  const long long row = heavy_rows[r];
  const I begin = indptr[row], end = indptr[row + 1];
  T* s = S + head * nnz;
  float m, l;
  partial_max_sum<I, T>(s, values, begin, end, (I)threadIdx.x, (I)THREADS, m, l);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(AUTOSAGE_FULL_MASK, m, off);
    const float l2 = __shfl_xor_sync(AUTOSAGE_FULL_MASK, l, off);
    merge(m, l, m2, l2);
  }
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = sm_m[0], L = sm_l[0];
    for (int w = 1; w < kWarps; ++w) merge(M, L, sm_m[w], sm_l[w]);
    row_m = M;
    row_l = L;
  }
  __syncthreads();
  write_probabilities<I, T>(s, values, begin, end, (I)threadIdx.x, (I)THREADS, row_m, row_l);
}
