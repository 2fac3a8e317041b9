// util_labelprop.cu: one round of label propagation (graphs/label_propagation.py is the definition;
// autosage_cli/torch/cuda_label_propagation.py runs the rounds): every vertex's vote, the most
// frequent label among its neighbours' (ties: the smallest label), counted exactly per vertex in a
// hash table, then the hashed three quarters of the vertices take it.
//
// Why kernels: the torch version counts (vertex, label) pairs in one table for the whole graph,
// built by scatters over 2 x nnz int64 keys (a 2^29-slot table on products-like-shuffled's 124M
// edges) in several passes over multi-GB arrays a round; the whole reordering took 0.55 s on the
// H200. Here a vertex's votes are counted where it is, in a table of its own, and a round reads each
// edge's neighbour id once (int32) and its label from a 4 x n-byte array that stays in L2.
//
//   autosage_labelprop_warps<I>   a warp per vertex with at most `max_votes` votes, its table in the
//                                 warp's slice of shared memory (LABELPROP_WARP_SLOTS slots)
//   autosage_labelprop_blocks<I>  a block per vertex of `large` (the others): a table of
//                                 LABELPROP_BLOCK_SLOTS slots in shared memory, or, for a vertex
//                                 whose offsets[i + 1] > offsets[i], its own slots of a global table
//
// A vertex v's votes: the labels of A's row v (rowptr, cols) and of Aᵀ's row v (rowptr_t, rows_t:
// the rows of the edges of column v), self-loops skipped; so a stored (i, j) votes for i with j's
// label and for j with i's, as the reference's edge_lists. The counts do not depend on the order in
// which the votes are taken, so neither row needs to be sorted. Vertex ids and labels are int32
// (n < 2^31); I is the type of the row pointers (int, or long long past 2^31 edges).
//
// Both kernels read `labels` and write `next` (never in place: every vertex votes with the round's
// old labels): next[v] = the vote where the hash of (v, salt) moves v (bits 33-34 of
// v x multiplier + salt, mod 2^64, not both 0: graphs.label_propagation._moving), else labels[v];
// a vertex without votes keeps its label. counters[0] += the vertices whose vote differs from their
// label (all of them, moving or not: the stopping rule), counters[1] += tables that could not hold a
// vote (a caller's sizing error, never expected: the caller raises, so a wrong label never passes).
//
// A table is open addressing with linear probing, a slot a (label, count) pair of int32, EMPTY = -1
// (labels are >= 0). Sized at least twice the vertex's votes (so at most half full), every probe
// loop is bounded by the table's size whatever the sizes passed, and a full table is counted, not
// looped on. The vote is the maximum over the slots of count << 32 | (2^31 - 1 - label): the most
// votes, then the smallest label. Reading a slot empties it (atomicExch), so every table is empty
// again for the next vertex and, for the global tables, the next round (the caller fills them once).
#include "util.cuh"

#define LABELPROP_EMPTY (-1)
#define LABELPROP_WARPS 8              // warps per block of autosage_labelprop_warps (256 threads)
#define LABELPROP_WARP_SLOTS 512       // each warp's table: 4 KB; vertices of up to 256 votes
#define LABELPROP_BLOCK_SLOTS 4096     // a block's shared table: 32 KB; vertices of up to 2048 votes

// lowbias32 (C. Wellons): a label's first slot. Only the probe lengths depend on its quality.
__device__ __forceinline__ unsigned int labelprop_hash(unsigned int x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// The power of two at or above 2 x votes (at least 32, one slot per lane), at most `capacity`.
__device__ __forceinline__ long long labelprop_slots(long long votes, long long capacity) {
    long long slots = 32;
    while (slots < 2 * votes && slots < capacity) slots <<= 1;
    return slots;
}

// One vote for `label` in the table (key, count) of `slots` slots (generic pointers: shared or
// global memory); false when every slot holds another label.
__device__ __forceinline__ bool labelprop_vote(int* key, int* count, long long slots, int label) {
    long long h = (long long)(labelprop_hash((unsigned int)label) & (unsigned long long)(slots - 1));
    for (long long probe = 0; probe < slots; ++probe) {
        const int held = atomicCAS(key + h, LABELPROP_EMPTY, label);
        if (held == LABELPROP_EMPTY || held == label) {
            atomicAdd(count + h, 1);
            return true;
        }
        h = h + 1 == slots ? 0 : h + 1;
    }
    return false;
}

// Slot s as a score (0: empty), emptied.
__device__ __forceinline__ unsigned long long labelprop_take(int* key, int* count, long long s) {
    const int label = atomicExch(key + s, LABELPROP_EMPTY);
    const int votes = atomicExch(count + s, 0);
    if (label == LABELPROP_EMPTY) return 0ull;
    return ((unsigned long long)(unsigned int)votes << 32) | (unsigned long long)(0x7fffffff - label);
}

__device__ __forceinline__ unsigned long long labelprop_max(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}

__device__ __forceinline__ unsigned long long labelprop_warp_max(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) v = labelprop_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The maximum over the block (blockDim.x a multiple of 32); thread 0's result is the block's. The
// caller syncs before `partial` is written again.
__device__ __forceinline__ unsigned long long labelprop_block_max(unsigned long long v,
                                                                  unsigned long long* partial) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = labelprop_warp_max(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0ull;
    if (warp == 0) v = labelprop_warp_max(v);
    return v;
}

// next[v] from v's best score (0: no votes); whether v's vote differs from its label.
__device__ __forceinline__ bool labelprop_settle(long long v, unsigned long long best, const int* labels,
                                                 unsigned long long multiplier, unsigned long long salt,
                                                 int* next) {
    const int held = labels[v];
    if (best == 0ull) {
        next[v] = held;
        return false;
    }
    const int winner = 0x7fffffff - (int)(unsigned int)(best & 0xffffffffull);
    const unsigned long long mixed = (unsigned long long)v * multiplier + salt;   // wraps mod 2^64
    next[v] = ((mixed >> 33) & 3ull) != 0ull ? winner : held;
    return winner != held;
}

// v's vote e (0 <= e < da + its Aᵀ row's length): A's row first, then Aᵀ's.
__device__ __forceinline__ long long labelprop_neighbour(const int* cols, const int* rows_t, long long a0,
                                                         long long da, long long t0, long long e) {
    return e < da ? (long long)cols[a0 + e] : (long long)rows_t[t0 + (e - da)];
}

// A warp per vertex v < n with at most max_votes votes (the others are autosage_labelprop_blocks'):
// its lanes take the votes 32 apart into the warp's table, then scan the table's slots.
template <typename I>
__global__ void autosage_labelprop_warps(const I* rowptr, const int* cols, const I* rowptr_t, const int* rows_t,
                                         const int* labels, long long n, long long max_votes,
                                         unsigned long long multiplier, unsigned long long salt, int* next,
                                         unsigned long long* counters) {
    __shared__ int keys[LABELPROP_WARPS][LABELPROP_WARP_SLOTS];
    __shared__ int counts[LABELPROP_WARPS][LABELPROP_WARP_SLOTS];
    if (blockDim.x != 32 * LABELPROP_WARPS) {   // the tables are laid out for this block
        if (threadIdx.x == 0) atomicAdd(counters + 1, 1ull);
        return;
    }
    const int lane = threadIdx.x & 31;
    int* key = keys[threadIdx.x >> 5];
    int* count = counts[threadIdx.x >> 5];
    for (int s = lane; s < LABELPROP_WARP_SLOTS; s += 32) {
        key[s] = LABELPROP_EMPTY;
        count[s] = 0;
    }
    __syncwarp();
    unsigned long long changed = 0, full = 0;
    const long long warps = grid_stride() >> 5;
    for (long long v = first_index() >> 5; v < n; v += warps) {
        const long long a0 = rowptr[v], da = (long long)rowptr[v + 1] - a0;
        const long long t0 = rowptr_t[v], votes = da + ((long long)rowptr_t[v + 1] - t0);
        if (votes > max_votes) continue;   // the same for the whole warp
        const long long slots = labelprop_slots(votes, LABELPROP_WARP_SLOTS);
        for (long long e = lane; e < votes; e += 32) {
            const long long u = labelprop_neighbour(cols, rows_t, a0, da, t0, e);
            if (u != v && !labelprop_vote(key, count, slots, labels[u])) full = 1;
        }
        __syncwarp();
        unsigned long long best = 0;
        for (long long s = lane; s < slots; s += 32) best = labelprop_max(best, labelprop_take(key, count, s));
        best = labelprop_warp_max(best);
        __syncwarp();   // the table is empty before the next vertex's votes
        if (lane == 0 && labelprop_settle(v, best, labels, multiplier, salt, next)) ++changed;
    }
    changed = block_sum(changed);
    full = block_sum(full);
    if (threadIdx.x == 0) {
        if (changed) atomicAdd(counters, changed);
        if (full) atomicAdd(counters + 1, full);
    }
}

// A block per vertex large[i] (i < n_large): its threads take the votes blockDim.x apart into the
// block's shared table, or into global slots offsets[i] .. offsets[i + 1] when there are any (a
// vertex with too many votes for shared memory; the caller fills them with EMPTY and 0 once), then
// scan the table's slots.
template <typename I>
__global__ void autosage_labelprop_blocks(const I* rowptr, const int* cols, const I* rowptr_t, const int* rows_t,
                                          const int* labels, const int* large, long long n_large,
                                          const long long* offsets, int* table_keys, int* table_counts,
                                          unsigned long long multiplier, unsigned long long salt, int* next,
                                          unsigned long long* counters) {
    __shared__ int keys[LABELPROP_BLOCK_SLOTS];
    __shared__ int counts[LABELPROP_BLOCK_SLOTS];
    __shared__ unsigned long long partial[32];
    if (blockDim.x & 31) {   // labelprop_block_max sums whole warps
        if (threadIdx.x == 0) atomicAdd(counters + 1, 1ull);
        return;
    }
    for (int s = threadIdx.x; s < LABELPROP_BLOCK_SLOTS; s += blockDim.x) {
        keys[s] = LABELPROP_EMPTY;
        counts[s] = 0;
    }
    __syncthreads();
    unsigned long long changed = 0, full = 0;
    for (long long i = blockIdx.x; i < n_large; i += gridDim.x) {
        const long long v = large[i];
        const long long a0 = rowptr[v], da = (long long)rowptr[v + 1] - a0;
        const long long t0 = rowptr_t[v], votes = da + ((long long)rowptr_t[v + 1] - t0);
        const long long own = offsets[i + 1] - offsets[i];
        int* key = own > 0 ? table_keys + offsets[i] : keys;
        int* count = own > 0 ? table_counts + offsets[i] : counts;
        const long long slots = own > 0 ? own : labelprop_slots(votes, LABELPROP_BLOCK_SLOTS);
        for (long long e = threadIdx.x; e < votes; e += blockDim.x) {
            const long long u = labelprop_neighbour(cols, rows_t, a0, da, t0, e);
            if (u != v && !labelprop_vote(key, count, slots, labels[u])) full = 1;
        }
        __syncthreads();
        unsigned long long best = 0;
        for (long long s = threadIdx.x; s < slots; s += blockDim.x)
            best = labelprop_max(best, labelprop_take(key, count, s));
        best = labelprop_block_max(best, partial);
        if (threadIdx.x == 0 && labelprop_settle(v, best, labels, multiplier, salt, next)) ++changed;
        __syncthreads();   // the table is empty and `partial` read before the next vertex
    }
    changed = block_sum(changed);
    full = block_sum(full);
    if (threadIdx.x == 0) {
        if (changed) atomicAdd(counters, changed);
        if (full) atomicAdd(counters + 1, full);
    }
}
