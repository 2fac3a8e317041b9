// spmm_epilogue.cuh: what the SpMM kernels apply to a row's sums where they store them,
//   out[i, c] = ACT(scale * sum_j a_ij B[j, c] + bias[c], alpha),
// so that a GCN layer's SpMM, bias and activation are one launch and one pass over the output.
//
// A kernel's last template argument is its epilogue: NoEpilogue (the default: today's kernels,
// the store writes the sum) or Epilogue<ACT, BIAS>, with ACT one of the activation structs below
// and BIAS whether a K-vector is added. Modules of an Epilogue<...> instantiation are compiled
// with AUTOSAGE_SPMM_EPILOGUE defined (kernels/compile.py header_defines, from the expression, as
// for the 2-byte types): their kernels then take three more arguments at the end,
//   bias (T*, K elements; nullptr when BIAS is false), scale (float), alpha (float: ACT's own
//   parameter, e.g. a leaky ReLU's slope),
// which the plans pass per call (backends/native_spmm.py). The epilogue is applied exactly once,
// where a row's final value is written: never to partial sums that another warp or launch
// combines later (split chunks, stream windows), but where those are combined.
//
// Adding an activation: a struct with `apply(x, alpha)` here and a row in
// autosage_cli/kernels/epilogues.py naming it.
#pragma once
#include "common.cuh"

namespace autosage {

// ---------------------------------------------------------------- activations: y = apply(x, alpha)
struct Identity {
    static __device__ __forceinline__ float apply(float x, float) { return x; }
};

struct Relu {
    static __device__ __forceinline__ float apply(float x, float) { return fmaxf(x, 0.0f); }
};

// ---------------------------------------------------------------- epilogue types (template tags)
struct NoEpilogue {};

template <typename ACT, bool BIAS>
struct Epilogue {};

// The operands of a kernel's epilogue and its application at a store. For NoEpilogue nothing:
// the stores of today's kernels are unchanged.
template <typename T, typename EPI>
struct EpilogueArgs {
    __device__ __forceinline__ EpilogueArgs() {}
    __device__ __forceinline__ EpilogueArgs(const T*, float, float) {}
    template <int V>
    __device__ __forceinline__ void apply(int, int, float (&)[V]) const {}
};

template <typename T, typename ACT, bool BIAS>
struct EpilogueArgs<T, Epilogue<ACT, BIAS>> {
    const T* __restrict__ bias;
    float scale;
    float alpha;

    __device__ __forceinline__ EpilogueArgs(const T* b, float s, float a) : bias(b), scale(s), alpha(a) {}

    // acc holds the final sums of columns [col, col + V) of one row; columns >= k are not stored
    // (and their bias is not read).
    template <int V>
    __device__ __forceinline__ void apply(int col, int k, float (&acc)[V]) const {
#pragma unroll
        for (int v = 0; v < V; ++v) {
            float x = acc[v] * scale;
            if (BIAS && col + v < k) x += to_float(load_scalar(bias + col + v));
            acc[v] = ACT::apply(x, alpha);
        }
    }
};

template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

// A kernel built without AUTOSAGE_SPMM_EPILOGUE has no epilogue operands: only NoEpilogue.
template <typename T, typename EPI>
__device__ __forceinline__ EpilogueArgs<T, EPI> no_epilogue_operands() {
    static_assert(same_type<EPI, NoEpilogue>::value,
                  "an Epilogue<...> instantiation needs -DAUTOSAGE_SPMM_EPILOGUE=1 (its operands)");
    return EpilogueArgs<T, EPI>();
}

}  // namespace autosage

// The epilogue operands at the end of a kernel's argument list, and the kernel's EpilogueArgs.
#if AUTOSAGE_SPMM_EPILOGUE
#define AUTOSAGE_EPILOGUE_PARAMS \
    , const T* __restrict__ epilogue_bias, const float epilogue_scale, const float epilogue_alpha
#define AUTOSAGE_EPILOGUE_ARGS(EPI) \
    autosage::EpilogueArgs<T, EPI>(epilogue_bias, epilogue_scale, epilogue_alpha)
#else
#define AUTOSAGE_EPILOGUE_PARAMS
#define AUTOSAGE_EPILOGUE_ARGS(EPI) autosage::no_epilogue_operands<T, EPI>()
#endif
