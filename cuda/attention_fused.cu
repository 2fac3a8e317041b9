// CSR multi-head attention in one pass (FlashAttention-style online softmax), never writing scores.
//
//   out[i,h] = sum_{j in row i} softmax_j(scale * <Q[i,h], K[j,h]> (+ a_ij)) * V[j,h]
//
// Q: n_rows x H x d, K, V: n_cols x H x d, out: n_rows x H x d (row-major, head-major inside a row).
//
// Work decomposition: a *group* of LANES lanes owns one (row, head) pair; lane t of a group holds the
// features f = (c * LANES + t) * VEC .. +VEC-1 for c < NV (guarded by f < d, so any d with
// d % VEC == 0 and d <= LANES * VEC * NV runs). Groups are numbered row-major over (row, head), so the
// groups of consecutive heads of one row sit side by side in a warp. A *team* of W = LANES * HPB lanes
// (HPB heads of the same row; the host guarantees H % HPB == 0) loads W (column, value) pairs of the
// row with one coalesced load and shares them by shuffles: the indices of a row are read once per
// team for all its heads. The next W indices are prefetched while the current ones are consumed.
//
// Per step a group takes E edges: every lane issues 2 * E * NV independent VEC-wide loads (K and V rows,
// 16 bytes when VEC = 4), computes E partial dots and reduces them with E interleaved shuffle trees,
// then updates the running max m, sum l and accumulator acc once for the E edges:
//   m' = max(m, s_1..s_E);  l = l * 2^(m - m') + sum_e 2^(s_e - m');  acc likewise.
// Scores are kept in the log2 domain (q is pre-multiplied by scale * log2(e), the bias by log2(e)) so
// that every exponential is one ex2.approx; the result is the same softmax.
//
// Long rows (fused_split): the host cuts rows with more than `split` edges into chunks of `chunk` edges.
// attention_fused_segments runs the chunks (writing partial (m, l, acc) per (chunk, head)) and the light
// rows (writing out) in one launch; attention_combine merges the partials of each heavy row:
//   M = max_c m_c;  L = sum_c l_c 2^(m_c - M);  out = sum_c acc_c 2^(m_c - M) / L.
//
// Template knobs (see autosage_cli/kernels/attention_space.py):
//   T      value type (float, __half, __nv_bfloat16; float math)   I   index type (int, long long)
//   LANES  lanes per (row, head) group     VEC elements per vector load (1, 2, 4; 8 halves)
//   NV     vectors per lane (features held per lane = NV * VEC)
//   E      edges per step                  W   team width in lanes = LANES * heads sharing the indices
// Rows without edges produce zeros. Grid: one group per work item, blockDim.x a multiple of 32.

#include "common.cuh"

namespace attention_fused_detail {

using autosage::group_mask;
using autosage::load_raw;
using autosage::load_vec;
using autosage::Raw;
using autosage::store_vec;
using autosage::unpack_raw;
using autosage::zero_raw;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x with one MUFU instruction (relative error ~2^-22); 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Running online-softmax state of one (row or chunk, head) in one group.
template <int NV, int VEC>
struct State {
  float m, l;
  float acc[NV][VEC];
};

// Fold one step of E scores (log2 domain, -inf for padding edges) and their V rows into `st`:
//   m' = max(m, s_1..s_E);  l = l * 2^(m - m') + sum_e 2^(s_e - m');  acc likewise.
// m_new (= m') is finite: the step's first edge is always valid. First step: m = -inf gives alpha = 0.
// The V rows arrive as loaded (Raw: a 2-byte type's 8 elements in 4 registers) and are converted
// edge by edge here, so the step's loads stay in flight in half the registers.
template <typename T, int E, int NV, int VEC>
__device__ __forceinline__ void fold_step(State<NV, VEC>& st, const float (&s)[E], float m_new,
                                          const Raw<T, VEC> (&vv)[E][NV]) {
  const float alpha = fast_exp2(st.m - m_new);
  st.m = m_new;
  st.l *= alpha;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) st.acc[c][v] *= alpha;
  }
#pragma unroll
  for (int u = 0; u < E; ++u) {
    const float p = fast_exp2(s[u] - m_new);  // 0 for the padding edges (s = -inf)
    st.l += p;
#pragma unroll
    for (int c = 0; c < NV; ++c) {
      float x[VEC];
      unpack_raw<T, VEC>(vv[u][c], x);
#pragma unroll
      for (int v = 0; v < VEC; ++v) st.acc[c][v] = fmaf(p, x[v], st.acc[c][v]);
    }
  }
}

// Walk edges [begin, end) of one row for one head and fold them into `st`. Every lane of the team
// must call this with the same begin/end (the team shares a row), since it shuffles across the team.
template <typename T, typename I, int LANES, int VEC, int NV, int E, int W>
__device__ __forceinline__ void attend_edges(
    const I* __restrict__ indices, const float* __restrict__ values,
    const T* __restrict__ Kmat, const T* __restrict__ Vmat,
    I begin, I end, long long row_stride, int head_off, int d, float bias_scale,
    const float (&q)[NV][VEC], State<NV, VEC>& st) {
  static_assert(W % E == 0 && W % LANES == 0 && W <= 32, "team must hold whole groups and steps");
  const unsigned mask = group_mask<W>();
  const int g_lane = threadIdx.x & (LANES - 1);
  const int t_lane = threadIdx.x & (W - 1);

  // Edge positions in 64 bits: base + W must not wrap for int indices near 2^31 nonzeros.
  const long long stop = (long long)end;
  // Prefetch the first batch of W (column, bias) pairs: one coalesced load for the whole team.
  const long long e = (long long)begin + t_lane;
  I col_next = 0;
  float bias_next = 0.f;
  if (e < stop) {
    col_next = indices[e];
    if (values) bias_next = values[e] * bias_scale;
  }
  for (long long base = begin; base < stop; base += W) {
    const I col_mine = col_next;
    const float bias_mine = bias_next;
    const long long en = base + W + t_lane;
    if (en < stop) {
      col_next = indices[en];
      if (values) bias_next = values[en] * bias_scale;
    }
    const int n = (stop - base < W) ? (int)(stop - base) : W;
    for (int e0 = 0; e0 < n; e0 += E) {
      Raw<T, VEC> kv[E][NV], vv[E][NV];
      float s[E];
      bool ok[E];
#pragma unroll
      for (int u = 0; u < E; ++u) {
        const I col = __shfl_sync(mask, col_mine, e0 + u, W);
        ok[u] = e0 + u < n;
        const long long off = (long long)col * row_stride + head_off;
#pragma unroll
        for (int c = 0; c < NV; ++c) {
          const int f = (c * LANES + g_lane) * VEC;
          if (ok[u] && f < d) {
            load_raw<T, VEC>(Kmat + off + f, kv[u][c]);
            load_raw<T, VEC>(Vmat + off + f, vv[u][c]);
          } else {
            zero_raw<T, VEC>(kv[u][c]);
            zero_raw<T, VEC>(vv[u][c]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < E; ++u) {
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < NV; ++c) {
          float x[VEC];
          unpack_raw<T, VEC>(kv[u][c], x);
#pragma unroll
          for (int v = 0; v < VEC; ++v) dot = fmaf(q[c][v], x[v], dot);
        }
        s[u] = dot;
      }
      // E reductions interleaved: independent shuffle chains hide each other's latency.
#pragma unroll
      for (int off = LANES / 2; off > 0; off >>= 1) {
#pragma unroll
        for (int u = 0; u < E; ++u) s[u] += __shfl_xor_sync(mask, s[u], off, W);
      }
      float m_new = st.m;
#pragma unroll
      for (int u = 0; u < E; ++u) {
        float b = 0.f;
        if (values) b = __shfl_sync(mask, bias_mine, e0 + u, W);
        s[u] = ok[u] ? s[u] + b : neg_inf();
        m_new = fmaxf(m_new, s[u]);
      }
      fold_step<T, E, NV, VEC>(st, s, m_new, vv);
    }
  }
}

template <typename T, int LANES, int VEC, int NV>
__device__ __forceinline__ void load_query(const T* __restrict__ Qrow, int d, float qscale,
                                           float (&q)[NV][VEC]) {
  const int g_lane = threadIdx.x & (LANES - 1);
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int f = (c * LANES + g_lane) * VEC;
    if (f < d) {
      load_vec<VEC>(Qrow + f, q[c]);
#pragma unroll
      for (int v = 0; v < VEC; ++v) q[c][v] *= qscale;
    } else {
#pragma unroll
      for (int v = 0; v < VEC; ++v) q[c][v] = 0.f;
    }
  }
}

template <int NV, int VEC>
__device__ __forceinline__ void init_state(State<NV, VEC>& st) {
  st.m = neg_inf();
  st.l = 0.f;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) st.acc[c][v] = 0.f;
  }
}

// out = acc / l, zeros for a row without edges (l = 0).
template <typename T, int LANES, int VEC, int NV>
__device__ __forceinline__ void store_normalised(T* __restrict__ orow, int d, const State<NV, VEC>& st) {
  const int g_lane = threadIdx.x & (LANES - 1);
  const float inv = st.l > 0.f ? 1.f / st.l : 0.f;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int f = (c * LANES + g_lane) * VEC;
    if (f < d) {
      float r[VEC];
#pragma unroll
      for (int v = 0; v < VEC; ++v) r[v] = st.acc[c][v] * inv;
      store_vec<VEC>(orow + f, r);
    }
  }
}

// The work item of one group in fused_split: segment `seg` (a chunk of a heavy row, at most `chunk`
// edges from chunk_begin[seg] clipped to the row end, or a whole light row), its row and head, and
// its edges [begin, end). False for the groups past the last segment.
template <typename I>
struct Segment {
  long long seg, row;
  int head;
  bool is_chunk;
  I begin, end;
};

// The (row, head) a group of LANES lanes serves in the "fused" grid (one group per row and head);
// false for the groups past the last row (whole teams leave together: H % heads-per-team == 0).
struct RowHead {
  long long g, row, row_stride;
  int head;
};

template <int LANES>
__device__ __forceinline__ bool locate_row(long long n_rows, int heads, int d, RowHead& w) {
  w.g = (long long)blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES;
  w.row = w.g / heads;
  if (w.row >= n_rows) return false;
  w.head = (int)(w.g - w.row * heads);
  w.row_stride = (long long)heads * d;
  return true;
}

template <int LANES, typename I>
__device__ __forceinline__ bool locate_segment(const I* __restrict__ indptr, const I* __restrict__ seg_rows,
                                               const I* __restrict__ chunk_begin, long long n_chunks,
                                               long long n_segments, long long chunk, int heads,
                                               Segment<I>& w) {
  const long long g = (long long)blockIdx.x * (blockDim.x / LANES) + threadIdx.x / LANES;
  w.seg = g / heads;
  if (w.seg >= n_segments) return false;
  w.head = (int)(g - w.seg * heads);
  w.row = (long long)seg_rows[w.seg];
  w.is_chunk = w.seg < n_chunks;
  w.end = indptr[w.row + 1];
  if (w.is_chunk) {
    w.begin = chunk_begin[w.seg];
    if ((long long)(w.end - w.begin) > chunk) w.end = w.begin + (I)chunk;
  } else {
    w.begin = indptr[w.row];
  }
  return true;
}

// A chunk's partial state for attention_combine: (m, l) once per group, acc by every lane.
template <int LANES, int VEC, int NV>
__device__ __forceinline__ void store_partial(float2* __restrict__ part_ml, float* __restrict__ part_acc,
                                              long long slot, int d, const State<NV, VEC>& st) {
  const int g_lane = threadIdx.x & (LANES - 1);
  if (g_lane == 0) part_ml[slot] = make_float2(st.m, st.l);
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int f = (c * LANES + g_lane) * VEC;
    if (f < d) autosage::store_partials<VEC>(part_acc + slot * d + f, st.acc[c]);
  }
}

}  // namespace attention_fused_detail

// Family "fused": one group per (row, head) over all rows, no lists.
template <typename T, typename I, int LANES, int VEC, int NV, int E, int W>
__global__ void attention_fused_rows(
    const I* __restrict__ indptr, const I* __restrict__ indices, const float* __restrict__ values,
    const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ out,
    long long n_rows, int heads, int d, float qscale, float bias_scale) {
  using namespace attention_fused_detail;
  RowHead w;
  if (!locate_row<LANES>(n_rows, heads, d, w)) return;
  const long long qo = w.row * w.row_stride + (long long)w.head * d;

  float q[NV][VEC];
  load_query<T, LANES, VEC, NV>(Q + qo, d, qscale, q);
  State<NV, VEC> st;
  init_state(st);
  attend_edges<T, I, LANES, VEC, NV, E, W>(indices, values, K, V, indptr[w.row], indptr[w.row + 1],
                                           w.row_stride, w.head * d, d, bias_scale, q, st);
  store_normalised<T, LANES, VEC, NV>(out + qo, d, st);
}

// Family "fused_split": segments 0..n_chunks-1 are chunks of heavy rows (seg_rows[s] is the row,
// chunk_begin[s] the first edge, at most `chunk` edges, clipped to the row end) and write partials
// part_ml[(s*H + h)] = (m, l), part_acc[(s*H + h)*d + f]; segments n_chunks.. are whole light rows
// (seg_rows[s]) and write out directly.
template <typename T, typename I, int LANES, int VEC, int NV, int E, int W>
__global__ void attention_fused_segments(
    const I* __restrict__ indptr, const I* __restrict__ indices, const float* __restrict__ values,
    const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ out,
    const I* __restrict__ seg_rows, const I* __restrict__ chunk_begin, long long n_chunks,
    long long n_segments, long long chunk, int heads, int d, float qscale, float bias_scale,
    float2* __restrict__ part_ml, float* __restrict__ part_acc) {
  using namespace attention_fused_detail;
  Segment<I> w;
  if (!locate_segment<LANES>(indptr, seg_rows, chunk_begin, n_chunks, n_segments, chunk, heads, w)) return;
  const long long row_stride = (long long)heads * d;
  const long long qo = w.row * row_stride + (long long)w.head * d;

  float q[NV][VEC];
  load_query<T, LANES, VEC, NV>(Q + qo, d, qscale, q);
  State<NV, VEC> st;
  init_state(st);
  attend_edges<T, I, LANES, VEC, NV, E, W>(indices, values, K, V, w.begin, w.end, row_stride,
                                           w.head * d, d, bias_scale, q, st);
  if (!w.is_chunk) {
    store_normalised<T, LANES, VEC, NV>(out + qo, d, st);
    return;
  }
  store_partial<LANES, VEC, NV>(part_ml, part_acc, w.seg * heads + w.head, d, st);
}

// Merge the chunk partials of each heavy row: one thread per (heavy row, head, feature).
// heavy_rows[r] is the row, its chunks are slots chunk_ptr[r] .. chunk_ptr[r+1]-1 (never empty).
template <typename T, typename I>
__global__ void attention_combine(const I* __restrict__ heavy_rows, const I* __restrict__ chunk_ptr,
                                  const float2* __restrict__ part_ml, const float* __restrict__ part_acc,
                                  T* __restrict__ out, long long n_heavy, int heads, int d) {
  using namespace attention_fused_detail;
  const long long total = n_heavy * heads * d;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    const int f = (int)(idx % d);
    const long long t = idx / d;
    const int head = (int)(t % heads);
    const long long r = t / heads;
    const long long c0 = chunk_ptr[r], c1 = chunk_ptr[r + 1];
    float M = neg_inf();
    for (long long c = c0; c < c1; ++c) M = fmaxf(M, part_ml[c * heads + head].x);
    float L = 0.f, a = 0.f;
    for (long long c = c0; c < c1; ++c) {
      const float2 ml = part_ml[c * heads + head];
      const float w = fast_exp2(ml.x - M);
      L = fmaf(ml.y, w, L);
      a = fmaf(part_acc[(c * heads + head) * d + f], w, a);
    }
    const long long row = (long long)heavy_rows[r];
    out[(row * heads + head) * d + f] = autosage::from_float<T>(L > 0.f ? a / L : 0.f);
  }
}

// ------------------------------------------------------------------------------------------------
// Additive score (GAT): s_ij = LeakyReLU(a_dst[i,h] + a_src[j,h]), two scalars per node and head.
//
//   out[i,h] = sum_{j in row i} softmax_j(s_ij) * V[j,h]
//
// a_dst: n_rows x H, a_src: n_cols x H, V: n_cols x H x d, out: n_rows x H x d. There is no per-edge
// dot product: a step of E edges loads E V rows (the same vector loads as the dot-product walk) and
// E scalars a_src[j,h] (the lanes of a group read the same address: one broadcast transaction).
// The groups, teams, schedule knobs, log2-domain online softmax and the chunk partials of long rows
// (merged by attention_combine) are those of the dot-product kernels above, so every fused and
// fused_split schedule runs this score too. LeakyReLU commutes with the positive factor log2(e).
//
// Row statistics for backward: when `stats` is not null, stats[i*H + h] = (row max of s, sum over
// the row of e^(s - max)) in natural units (-inf, 0 for a row without edges), so backward rebuilds
// every probability as e^(s_ij - max_i) / sum_i without a row reduction. Light rows write theirs in
// the walk; heavy rows' come from their chunk partials (attention_additive_stats).

namespace attention_fused_detail {

constexpr float kLn2 = 0.6931471805599453f;   // log2-domain maxima back to natural units

// One group's row statistics (lane 0 writes; no-op without a stats buffer).
template <int LANES>
__device__ __forceinline__ void store_stats(float2* __restrict__ stats, long long slot, float m, float l) {
  if (stats && (threadIdx.x & (LANES - 1)) == 0) stats[slot] = make_float2(m * kLn2, l);
}

template <typename T, typename I, int LANES, int VEC, int NV, int E, int W>
__device__ __forceinline__ void attend_edges_additive(
    const I* __restrict__ indices, const float* __restrict__ a_src, const T* __restrict__ Vmat,
    I begin, I end, long long row_stride, int heads, int head, int d, float a_dst, float slope,
    State<NV, VEC>& st) {
  static_assert(W % E == 0 && W % LANES == 0 && W <= 32, "team must hold whole groups and steps");
  constexpr float kLog2e = 1.4426950408889634f;
  const unsigned mask = group_mask<W>();
  const int g_lane = threadIdx.x & (LANES - 1);
  const int t_lane = threadIdx.x & (W - 1);
  const int head_off = head * d;
  const long long stop = (long long)end;
  const long long e = (long long)begin + t_lane;
  I col_next = e < stop ? indices[e] : (I)0;
  for (long long base = begin; base < stop; base += W) {
    const I col_mine = col_next;
    const long long en = base + W + t_lane;
    if (en < stop) col_next = indices[en];
    const int n = (stop - base < W) ? (int)(stop - base) : W;
    for (int e0 = 0; e0 < n; e0 += E) {
      Raw<T, VEC> vv[E][NV];
      float s[E];
#pragma unroll
      for (int u = 0; u < E; ++u) {
        const I col = __shfl_sync(mask, col_mine, e0 + u, W);
        const bool ok = e0 + u < n;
        s[u] = ok ? autosage::load_scalar(a_src + (long long)col * heads + head) : 0.f;
        const long long off = (long long)col * row_stride + head_off;
#pragma unroll
        for (int c = 0; c < NV; ++c) {
          const int f = (c * LANES + g_lane) * VEC;
          if (ok && f < d) {
            load_raw<T, VEC>(Vmat + off + f, vv[u][c]);
          } else {
            zero_raw<T, VEC>(vv[u][c]);
          }
        }
        const float x = a_dst + s[u];
        s[u] = ok ? (x > 0.f ? x : x * slope) * kLog2e : neg_inf();
      }
      float m_new = st.m;
#pragma unroll
      for (int u = 0; u < E; ++u) m_new = fmaxf(m_new, s[u]);
      fold_step<T, E, NV, VEC>(st, s, m_new, vv);
    }
  }
}

}  // namespace attention_fused_detail

// Family "fused", additive score: one group per (row, head) over all rows.
template <typename T, typename I, int LANES, int VEC, int NV, int E, int W>
__global__ void attention_additive_rows(
    const I* __restrict__ indptr, const I* __restrict__ indices, const float* __restrict__ a_dst,
    const float* __restrict__ a_src, const T* __restrict__ V, T* __restrict__ out, long long n_rows,
    int heads, int d, float slope, float2* __restrict__ stats) {
  using namespace attention_fused_detail;
  RowHead w;
  if (!locate_row<LANES>(n_rows, heads, d, w)) return;
  State<NV, VEC> st;
  init_state(st);
  attend_edges_additive<T, I, LANES, VEC, NV, E, W>(indices, a_src, V, indptr[w.row], indptr[w.row + 1],
                                                    w.row_stride, heads, w.head, d, a_dst[w.g], slope, st);
  store_normalised<T, LANES, VEC, NV>(out + w.row * w.row_stride + (long long)w.head * d, d, st);
  store_stats<LANES>(stats, w.g, st.m, st.l);
}

// Family "fused_split", additive score: the segment list and partials of attention_fused_segments.
template <typename T, typename I, int LANES, int VEC, int NV, int E, int W>
__global__ void attention_additive_segments(
    const I* __restrict__ indptr, const I* __restrict__ indices, const float* __restrict__ a_dst,
    const float* __restrict__ a_src, const T* __restrict__ V, T* __restrict__ out,
    const I* __restrict__ seg_rows, const I* __restrict__ chunk_begin, long long n_chunks,
    long long n_segments, long long chunk, int heads, int d, float slope,
    float2* __restrict__ part_ml, float* __restrict__ part_acc, float2* __restrict__ stats) {
  using namespace attention_fused_detail;
  Segment<I> w;
  if (!locate_segment<LANES>(indptr, seg_rows, chunk_begin, n_chunks, n_segments, chunk, heads, w)) return;
  const long long row_stride = (long long)heads * d;
  State<NV, VEC> st;
  init_state(st);
  attend_edges_additive<T, I, LANES, VEC, NV, E, W>(indices, a_src, V, w.begin, w.end, row_stride, heads,
                                                    w.head, d, a_dst[w.row * heads + w.head], slope, st);
  if (!w.is_chunk) {
    store_normalised<T, LANES, VEC, NV>(out + w.row * row_stride + (long long)w.head * d, d, st);
    store_stats<LANES>(stats, w.row * heads + w.head, st.m, st.l);
    return;
  }
  store_partial<LANES, VEC, NV>(part_ml, part_acc, w.seg * heads + w.head, d, st);
}

// The row statistics of heavy rows from their chunk partials (the (m, l) merge of
// attention_combine): one thread per (heavy row, head).
template <typename I>
__global__ void attention_additive_stats(const I* __restrict__ heavy_rows, const I* __restrict__ chunk_ptr,
                                         const float2* __restrict__ part_ml, float2* __restrict__ stats,
                                         long long n_heavy, int heads) {
  using namespace attention_fused_detail;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n_heavy * heads;
       t += (long long)gridDim.x * blockDim.x) {
    const int head = (int)(t % heads);
    const long long r = t / heads;
    const long long c0 = chunk_ptr[r], c1 = chunk_ptr[r + 1];
    float M = neg_inf();
    for (long long c = c0; c < c1; ++c) M = fmaxf(M, part_ml[c * heads + head].x);
    float L = 0.f;
    for (long long c = c0; c < c1; ++c) {
      const float2 ml = part_ml[c * heads + head];
      L = fmaf(ml.y, fast_exp2(ml.x - M), L);
    }
    stats[(long long)heavy_rows[r] * heads + head] = make_float2(M * kLn2, L);
  }
}
