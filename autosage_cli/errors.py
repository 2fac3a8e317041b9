"""User-facing errors and the exit codes they end in.

Every problem with the user's input (a file, an option, a dataset name) is raised as `AutosageError`
with a one-line message naming the problem. The CLI turns it into `Error: <message>` and the error's
exit code; the library lets it propagate so callers can catch it.

Exit codes (the CLI's contract, documented in the README):
  0  success
  1  a command's own verdict failed (replay found entries that do not reproduce), or a bug
  2  bad input, or input refused before any work because it would not fit in memory
  3  ran out of memory while working (host MemoryError, or CUDA out of memory)
  4  a CUDA fault (a kernel launch failed, an illegal address, a broken context)
  130  interrupted (Ctrl-C), said by the CLI as `Error: interrupted`
"""

import re

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_OUT_OF_MEMORY = 3
EXIT_CUDA_FAULT = 4


_NUMPY_REPR = re.compile(r"np\.[a-z_0-9]+\(((?:'[^']*'|\"[^\"]*\"|[^()'\"])*)\)")


class AutosageError(Exception):
    """Bad input or an unusable environment, explained in one line."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str):
        super().__init__(plain(message))


def one_line(exc: BaseException, limit: int = 240) -> str:
    """'Type: message' on one line, cut to `limit` characters: how a failure is recorded as data
    (a probe candidate's reason, a kernel that did not compile)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def exception_text(exc: BaseException) -> str:
    """A library exception's message on one line, plain values, or its type when it has none."""
    return plain(str(exc)) or type(exc).__name__


def plain(message) -> str:
    """One line, with NumPy scalar reprs that library messages carry (np.float64(1.5),
    np.str_('x')) shown as plain values (1.5, 'x')."""
    return _NUMPY_REPR.sub(r"\1", " ".join(str(message).split()))


class NoGPUError(AutosageError):
    """The operation needs a CUDA device and none is visible."""


class BudgetError(AutosageError):
    """The input would need more memory than is available; refused before allocating."""


class OutOfMemory(AutosageError):
    """An allocation failed while working (host or device)."""

    exit_code = EXIT_OUT_OF_MEMORY


class CudaFault(AutosageError):
    """The GPU reported a fault: a failed launch, an illegal address, a lost context."""

    exit_code = EXIT_CUDA_FAULT


# CUDA errors after which the context is unusable: every later call on it fails the same way.
_STICKY_CUDA = ("cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorIllegalInstruction",
                "cudaErrorMisalignedAddress", "cudaErrorInvalidAddressSpace", "cudaErrorInvalidPc",
                "cudaErrorHardwareStackError", "cudaErrorAssert", "cudaErrorECCUncorrectable",
                "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_ASSERT", "illegal memory access",
                "unspecified launch failure")
_OOM_WORDS = ("out of memory", "cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY",
              "CUSPARSE_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED")
# Exception classes of the CUDA stack (CuPy, its cuda bindings, torch) by module prefix, so this
# leaf module never imports them.
_CUDA_MODULES = ("cupy", "cupy_backends", "cupyx", "cuda", "torch", "nvmath")


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def is_cuda_exception(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.split(".")[0] in _CUDA_MODULES and not isinstance(exc, AutosageError)


def resource_error(exc: BaseException) -> AutosageError | None:
    """The one-line user error for a failed allocation or a CUDA fault, or None for anything else.

    A host MemoryError says host memory ran out; CuPy's OutOfMemoryError, torch's and a CUDA or
    cuSPARSE allocation status say GPU memory did; any other exception raised by the CUDA stack
    (CUDARuntimeError, CUDADriverError, CUSPARSEError...) is a CUDA fault."""
    if isinstance(exc, AutosageError):
        return exc
    text = _text(exc)
    if isinstance(exc, MemoryError) and not is_cuda_exception(exc):
        return OutOfMemory(f"out of host memory ({text}); free memory or use a machine with more")
    if not is_cuda_exception(exc):
        return None
    if type(exc).__name__ == "OutOfMemoryError" or any(w in text for w in _OOM_WORDS):
        return OutOfMemory(f"out of GPU memory: {text}")
    return CudaFault(f"CUDA fault: {type(exc).__name__}: {text}")


def is_sticky_cuda_fault(exc: BaseException) -> bool:
    """True when the CUDA context cannot be used again in this process after `exc`."""
    return isinstance(resource_error(exc), CudaFault) and any(w in _text(exc) for w in _STICKY_CUDA)
