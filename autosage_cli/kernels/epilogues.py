"""SpMM epilogues as data: what the SpMM kernels apply to a row's sums where they store them,

    out[i, :] = act(scale * sum_j a_ij B[j, :] + bias, alpha)

one row (`Epilogue`) per epilogue in `EPILOGUES`. A row names the CUDA activation struct of
cuda/spmm_epilogue.cuh, whether it adds a bias (a vector of K, one per column: a per-call operand
like B and out), the value of the activation's own scalar `alpha` when none is given, and the
reference of the same arithmetic for any array module (`xp`: NumPy, CuPy or torch) with the
activation's derivative read off its output (what autograd saves: relu's mask is `out > 0`).

"none" is today's SpMM: its kernels and name expressions are the schedules' own, its op is
"spmm". Every other row instantiates each SpMM kernel with `autosage::Epilogue<ACT, BIAS>` as its
last template argument (`expression`); such a module is compiled with `DEFINE` (compile.
header_defines reads it off the expression, as it does the 2-byte types' defines), which gives the
kernels their three epilogue arguments (bias pointer, scale, alpha), after all the others.
The scale and alpha are per-call scalars, not part of a decision: the same instructions and bytes
run for every value (ops/epilogue.py probes at scale 1 and the row's alpha).

Adding an epilogue (a leaky ReLU with a slope, say) is a struct in cuda/spmm_epilogue.cuh and a
row here; docs/INTERNALS.md walks through it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

# What a module of epilogue instantiations is compiled with (cuda/spmm_epilogue.cuh), and the text
# that marks an expression as one.
DEFINE = "AUTOSAGE_SPMM_EPILOGUE"
MARKER = "autosage::Epilogue<"


def _identity(x, alpha, xp):
    return x


def _relu(x, alpha, xp):
    return xp.where(x > 0, x, x * 0)


def _relu_slope(out, alpha, xp):
    """relu's derivative from its output: 1 where the output is positive, else 0."""
    return out > 0


@dataclass(frozen=True)
class Epilogue:
    name: str                      # the row's name ("bias-relu"); the fused op is "spmm-<name>"
    activation: Optional[str]      # its CUDA struct in cuda/spmm_epilogue.cuh; None: no epilogue
    bias: bool = False             # adds a K-vector, one value per column
    alpha: float = 0.0             # the activation's own scalar when the caller gives none
    # act(x, alpha, xp): the activation, elementwise, for an array module xp (numpy, cupy, torch)
    act: Callable = _identity
    # slope(out, alpha, xp): d act / d x from act's output (a mask or an array), None: identity
    slope: Optional[Callable] = None

    @property
    def fused(self) -> bool:
        """Whether the kernels apply it (every row but "none")."""
        return self.activation is not None

    @property
    def cuda_type(self) -> str:
        """The kernels' last template argument."""
        return f"{MARKER}autosage::{self.activation}, {'true' if self.bias else 'false'}>"

    @property
    def operands(self) -> tuple[str, ...]:
        """The per-call array operands it takes besides B (and out)."""
        return ("bias",) if self.bias else ()

    def apply(self, x, bias=None, scale: float = 1.0, alpha: float | None = None, xp=None):
        """The reference: act(scale * x + bias, alpha) in x's own type (pass float64 or float32)."""
        if xp is None:
            import numpy as xp
        y = x * scale if scale != 1.0 else x
        if self.bias:
            y = y + bias
        return self.act(y, self.alpha if alpha is None else alpha, xp)


NONE = Epilogue("none", None)

EPILOGUES: dict[str, Epilogue] = {e.name: e for e in (
    NONE,
    Epilogue("bias", "Identity", bias=True),
    Epilogue("relu", "Relu", act=_relu, slope=_relu_slope),
    Epilogue("bias-relu", "Relu", bias=True, act=_relu, slope=_relu_slope),
    Epilogue("scale", "Identity"),
)}
FUSED = tuple(e for e in EPILOGUES.values() if e.fused)


def get(name: str) -> Epilogue:
    from ..errors import AutosageError

    found = EPILOGUES.get(name)
    if found is None:
        raise AutosageError(f"unknown epilogue {name!r}; choose from {', '.join(EPILOGUES)}")
    return found


def activations() -> tuple[str, ...]:
    """The activation names a caller may ask for (the rows' without a bias, but none)."""
    return tuple(e.name for e in FUSED if not e.bias and e.activation != "Identity")


def choose(bias: bool, activation: str | None, scale: float = 1.0) -> Epilogue:
    """The row for an SpMM with (or without) a bias, an activation name (None: none) and a scale:
    "none" for none of them, "scale" for a scale alone. Raises AutosageError for an unknown
    activation."""
    from ..errors import AutosageError

    if activation is not None and activation not in activations():
        raise AutosageError(f"activation {activation!r} is not one the SpMM kernels apply; choose "
                            f"from {', '.join(activations())} (or None)")
    if activation is None:
        row = "bias" if bias else ("scale" if scale != 1.0 else "none")
    else:
        row = f"bias-{activation}" if bias else activation
    return get(row)


def expression(name_expression: str, epilogue: Epilogue) -> str:
    """A kernel's name expression with `epilogue` as its last template argument (unchanged for
    none: NoEpilogue is the kernels' default)."""
    if not epilogue.fused:
        return name_expression
    if not name_expression.endswith(">"):
        raise ValueError(f"not a template instantiation: {name_expression!r}")
    return f"{name_expression[:-1]}, {epilogue.cuda_type}>"


def header_defines(expressions) -> tuple[str, ...]:
    """The -D option of a module whose expressions instantiate an epilogue (its kernels' three
    epilogue arguments exist only then), else none."""
    return (f"-D{DEFINE}=1",) if any(MARKER in e for e in expressions) else ()


def op_name(epilogue: Epilogue) -> str:
    """The op of an SpMM with this epilogue: "spmm" for none (today's op and cache keys), else
    "spmm-<name>" (ops/epilogue.py: a decision of its own)."""
    return "spmm" if not epilogue.fused else f"spmm-{epilogue.name}"


# The vendor path's epilogue as a launch of its own (cuda/spmm_epilogue.cu).
VENDOR_FILE = "spmm_epilogue.cu"


def vendor_expression(c_type: str, epilogue: Epilogue) -> str:
    return f"spmm_epilogue<{c_type}, {epilogue.cuda_type}>"


def with_variants(families: dict) -> dict:
    """SpMM family entries with each fused epilogue as a kernel variant (`Family.variants`: (schedule,
    dtype, index) -> the family's kernel with that epilogue); the fused SpMM ops (ops/epilogue.py)
    run the schedules of the families that have theirs. A family that cannot apply an epilogue
    exactly once, after a row's full sum, is left out of this call: the fused ops then refuse its
    schedules, with the reason (ops.runs_schedule)."""
    def variant(family, epilogue):
        return lambda s, dtype, index="int": expression(family.kernels(s, dtype, index)[0], epilogue)
    return {name: replace(f, variants={**(f.variants or {}), **{e.name: variant(f, e) for e in FUSED}})
            for name, f in families.items()}
