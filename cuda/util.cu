// util.cu: the helper kernels every tune launches: fills (NaN poisoning, cache flushing), the
// all-ones check of a graph's values and the spin that precedes each timed launch.
#include "util.cuh"

// ------------------------------------------------------------------ fills

__global__ void autosage_fill_u32(unsigned int* p, unsigned int bits, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) p[i] = bits;
}

__global__ void autosage_fill_u16(unsigned short* p, unsigned short bits, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) p[i] = bits;
}

// ------------------------------------------------------------------ counts

__global__ void autosage_count_not_equal(const float* x, float value, long long n,
                                         unsigned long long* count) {
    unsigned long long c = 0;
    for (long long i = first_index(); i < n; i += grid_stride()) c += !(x[i] == value);
    c = block_sum(c);
    if (threadIdx.x == 0 && c) atomicAdd(count, c);
}

// ------------------------------------------------------------------ timing

// One thread that keeps the GPU busy for `ns` nanoseconds before a timed launch, so the host's
// enqueue of (start event, launch, end event) completes while the GPU still spins and the events
// measure GPU time only (backends/timing.py).
__global__ void autosage_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
