"""torch sparse CSR tensors over autosage's own CSR arrays, without torch's warnings about them.

torch warns on building every CSR tensor that the layout is in beta, and, unless the caller says
whether it wants them, that the invariant checks are off. Neither is news to a user of `bench` or
the training suite, and both came out in the middle of its output. autosage's arrays are canonical
(sorted, int32, checked when the graph was built), so the checks are off on purpose here, and only
these two warnings are silenced, only around the construction: any other warning still shows.
"""
from __future__ import annotations

import warnings

_SILENCED = ("Sparse CSR tensor support is in beta state",
             "Sparse invariant checks are implicitly disabled")


def csr_tensor(crow, col, values, size):
    """torch.sparse_csr_tensor(crow, col, values, size), the invariant checks off, silently."""
    import torch

    with warnings.catch_warnings():
        for message in _SILENCED:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)
