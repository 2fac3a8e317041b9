"""Element types as values: one table of what autosage knows about each dense value type.

A dtype travels through autosage as its NumPy name ("float32", "float16", "bfloat16"): op inputs,
plans, verification, the decision cache key, probe records and benchmark rows all carry it. This
table answers every question about a name: the C++ type the kernels are instantiated with, the
element size (the cost model, memory estimates, vector widths), how arrays of it are stored, the
helper kernels' codec, the CUDA library data type, the torch dtype, the compile define its headers
need, and the verification tolerance. Every other module reads these from the row; none tells a
type by its element size or its storage (a type stored as another's bits, as bfloat16 is in uint16,
is found by `of_storage`, the one reverse lookup). Which dtypes an op *accepts* is the op spec's to
say (`autosage_cli.ops`); a name missing here is unknown everywhere.

Every kernel accumulates in float32 whatever it loads and stores (cuda/common.cuh): the 2-byte
types only change what moves through memory. bfloat16 is stored as its 16-bit patterns in uint16
arrays (NumPy and CuPy have no general bfloat16 type; the kernels and cuSPARSE only see a pointer);
on the host it is rounded through `ml_dtypes`, on the device by backends/value_arrays.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import AutosageError

DEFAULT = "float32"
MAX_VECTOR_BYTES = 16   # one ld.global.v4.u32: the widest load the kernels issue


# Vendor outputs in the narrow types are checked within this multiple of the bound. On the H200,
# cuSPARSE SpMM (every algorithm), torch's CSR addmm and the vendor attention composition in
# float16/bfloat16 reached 1.1-2.6x it (float16 relative errors up to 0.0038 with float32 compute), as
# if partial sums were rounded to the storage type. They are the baseline, not candidates: the check
# is that they compute the right thing. Our kernels are held to the bound itself.
VENDOR_SLACK_2BYTE = 4.0

# The define cuda/common.cuh needs to include cuda_fp16.h and cuda_bf16.h (a float32 module
# compiles without them, as fast as before they existed).
TWO_BYTE_DEFINE = "AUTOSAGE_2BYTE_TYPES"


@dataclass(frozen=True)
class DType:
    name: str            # the NumPy name, as the CLI, the cache and the results take it
    c_type: str          # the kernels' template argument (NVRTC name expressions)
    itemsize: int        # bytes per element
    storage: str         # the NumPy/CuPy dtype arrays of it are stored in
    unit_roundoff: float  # 2^-p, p significand bits: the largest relative error of one rounding
    max_finite: float     # the largest finite value: a graph value beyond it becomes inf
    codec: str           # the helper kernels' codec struct of it (cuda/util.cuh: F32, F16, BF16)
    cuda_data_type: int  # its cudaDataType_t (library_types.h: CUDA_R_32F 0, _16F 2, _16BF 14)
    torch_name: str      # the torch dtype attribute (torch.bfloat16)
    # The preprocessor define (without -D) a module instantiating kernels on it needs for its
    # headers, None when it needs none (compile.runtime_options).
    header_define: str | None
    # Narrower than the float32 the kernels accumulate in: an output is rounded to it, vendors round
    # partial sums to it (so the float64 reference decides, and the device reference runs in every
    # tune, kernels/util.tune_groups), and vendors are held to `vendor_slack` x the bound.
    narrow: bool
    nan_bits: int | None = None   # a quiet NaN's bit pattern, for a type stored as bits (bfloat16)

    @property
    def max_vec(self) -> int:
        """The widest vector (elements per load) of this type: 4 floats or 8 halves."""
        return MAX_VECTOR_BYTES // self.itemsize

    @property
    def bit_patterns(self) -> bool:
        """Whether arrays of it hold its bit patterns in another type's storage (bfloat16 in
        uint16): such an array is read as this type only when the caller names it."""
        return self.storage != self.name

    @property
    def vendor_slack(self) -> float:
        return VENDOR_SLACK_2BYTE if self.narrow else 1.0


DTYPES: dict[str, DType] = {
    "float32": DType("float32", "float", 4, "float32", 2.0 ** -24, 3.4028234663852886e38,
                     "F32", 0, "float32", None, narrow=False),
    "float16": DType("float16", "__half", 2, "float16", 2.0 ** -11, 65504.0,
                     "F16", 2, "float16", TWO_BYTE_DEFINE, narrow=True),
    "bfloat16": DType("bfloat16", "__nv_bfloat16", 2, "uint16", 2.0 ** -8, 3.3895313892515355e38,
                      "BF16", 14, "bfloat16", TWO_BYTE_DEFINE, narrow=True, nan_bits=0x7FC0),
}
_BY_C_TYPE = {d.c_type: d for d in DTYPES.values()}
_BY_STORAGE = {d.storage: d for d in DTYPES.values()}
if len(_BY_STORAGE) != len(DTYPES):   # an array's storage must say which row it is
    raise ImportError("two value types share a storage dtype; give each its own (dtypes.DTYPES)")


def info(dtype: str) -> DType:
    """The table row of a dtype name ("bfloat16") or of its C++ type ("__nv_bfloat16"); an unknown
    name is a one-line AutosageError naming the known ones."""
    found = (DTYPES.get(dtype) or _BY_C_TYPE.get(dtype)) if isinstance(dtype, str) else None
    if found is None:
        raise _unknown(dtype)
    return found


def _unknown(dtype) -> AutosageError:
    return AutosageError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")


def of_storage(storage) -> DType | None:
    """The row whose arrays are stored as NumPy/CuPy dtype `storage` ("uint16" -> bfloat16), or
    None (float64, integers): the one place an array's storage is mapped back to a value type."""
    import numpy as np

    try:
        return _BY_STORAGE.get(np.dtype(storage).name)
    except TypeError:
        return None


def c_type(dtype: str) -> str:
    return info(dtype).c_type


def itemsize(dtype: str) -> int:
    return info(dtype).itemsize


def storage_dtype(dtype: str) -> str:
    """The NumPy/CuPy dtype an array of `dtype` is stored in: "float32", "float16", "uint16"."""
    return info(dtype).storage


def check_range(values, dtype: str, what: str) -> None:
    """A one-line AutosageError when a value of `values` (a host array, or None: all ones) is beyond
    `dtype`'s largest finite value: rounded, it would be inf, and every result of it inf or NaN."""
    if values is None or not len(values):
        return
    import numpy as np

    t = info(dtype)
    values = np.asanyarray(values)
    if values.dtype.kind == "f" and float(np.finfo(values.dtype).max) <= t.max_finite:
        return      # nothing finite it holds is too large (float32 values in float32: no pass at all)
    # max and min, not max(abs(.)): no temporary the size of the values (500 MB and ~0.2 s of a
    # cold tune on a 124M-nonzero graph)
    largest = max(float(values.max()), -float(values.min()))
    if largest > t.max_finite:
        raise AutosageError(f"{what} has values up to {largest:.4g}, beyond {t.name}'s largest finite value "
                            f"{t.max_finite:.6g}; choose another --dtype (bfloat16 or float32)")


def require(dtype: str, supported, what: str) -> str:
    """`dtype` when it is among `supported`, else a one-line AutosageError naming them."""
    info(dtype)
    if dtype not in supported:
        raise AutosageError(f"dtype {dtype} is not supported for {what}; supported: {', '.join(supported)}")
    return dtype


def parse_list(text: str) -> tuple[str, ...]:
    """'float32,float16' -> ('float32', 'float16'): known names only, no empties, no repeats."""
    names = tuple(dict.fromkeys(part.strip() for part in str(text).split(",")))
    if not names or any(not n for n in names):
        raise AutosageError(f"--dtypes takes a comma list of dtype names, got {text!r}")
    for name in names:
        if name not in DTYPES:   # the C++ spellings are for name expressions, not for users
            raise _unknown(name)
    return names


def vector_bytes_fit(vec: int, dtype: str) -> str | None:
    """None when `vec` elements of `dtype` fit one vector load; otherwise the reason."""
    t = info(dtype)
    if vec > t.max_vec:
        return (f"vec={vec} x {t.itemsize}-byte {t.name} is {vec * t.itemsize} bytes, wider than "
                f"the {MAX_VECTOR_BYTES}-byte vector loads (at most {t.max_vec} per load)")
    return None


# ------------------------------------------------------------------ verification tolerance

# The float32 bound: two float32 implementations summing in widely different orders (long rows).
FLOAT32_TOLERANCE = 1e-4
# Roundings to the value type whose errors can reach an output: the output's own, the unfused
# attention's scores and probabilities, and a vendor's own output when it is the reference.
ROUNDINGS = 3
# lambda of the probabilistic bound on a float32 sum of n terms, lambda * sqrt(n) * u (Higham and
# Mary, 2019): holds with probability above 1 - 2 exp(-lambda^2 / 2) per sum.
SUM_LAMBDA = 4.0


def vendor_slack(dtype: str) -> float:
    return info(dtype).vendor_slack


def tolerance(dtype: str, length: int = 1) -> float:
    """The relative-error bound (docs/MEASUREMENT.md) of an output in `dtype` whose longest float32
    sum has `length` terms, against a float64 reference computed from the inputs as rounded to
    `dtype`: the float32 bound, or the roundings to `dtype` plus the float32 sum's drift when that
    is larger. A function of the type and the length only, never of a case; float32 keeps 1e-4 for
    every sum shorter than ~170k terms. An op's length is its spec's (`OpSpec.accumulation_length`)."""
    t = info(dtype)
    u_out = t.unit_roundoff if t.narrow else 0.0
    drift = SUM_LAMBDA * max(1, int(length)) ** 0.5 * DTYPES["float32"].unit_roundoff
    return max(FLOAT32_TOLERANCE, ROUNDINGS * u_out + drift)


# ------------------------------------------------------------------ host arrays

def to_storage(x, dtype: str):
    """Host values rounded to nearest even into `dtype`'s storage: float32, float16, or the bit
    patterns (uint16) of bfloat16 (ml_dtypes rounds exactly as __float2bfloat16_rn)."""
    import numpy as np

    t = info(dtype)
    x = np.asarray(x)
    if t.bit_patterns:   # NumPy has no such type: ml_dtypes rounds, the bits are stored
        import ml_dtypes

        return x.astype(np.float32).astype(getattr(ml_dtypes, t.name)).view(t.storage)
    return x.astype(t.storage)


def from_storage(a, dtype: str):
    """float64 values of a host array stored as `dtype` (exact: every value of the 2-byte types
    and of float32 is a float64)."""
    import numpy as np

    a = np.asarray(a)
    t = info(dtype)
    if t.bit_patterns:
        import ml_dtypes

        return a.view(t.storage).view(getattr(ml_dtypes, t.name)).astype(np.float64)
    return a.astype(np.float64)


def rounded(x, dtype: str):
    """float64 values of host `x` as the kernels of `dtype` read them: rounded into the type."""
    return from_storage(to_storage(x, dtype), dtype)
