"""Small graphs of the shapes that break reorderings and label propagation: empty rows, self-loops,
one long row and one long column, n = 1. Shared by the torch reordering tests (CPU) and the label
propagation kernels' GPU tests."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from autosage_cli.graphs.csr import canonical_csr


def hurtful_shapes(weighted: bool = False) -> dict:
    """{name: CSRGraph}: a random 40 x 40 pattern (its values uniform in [0.5, 1.5) when `weighted`),
    the same with every self-loop, a 30 x 30 graph with a full row and a full column, and 1 x 1."""
    rng = np.random.default_rng(3)
    dense = sp.random(40, 40, density=0.15, random_state=rng, format="csr")
    if weighted:
        dense.data = rng.uniform(0.5, 1.5, dense.nnz)
    looped = (dense + sp.eye(40, format="csr")).tocsr()
    hub = sp.lil_matrix((30, 30))
    hub[4, :] = 1.0
    hub[:, 7] = 2.0
    return {"random": canonical_csr(dense), "loops": canonical_csr(looped),
            "hub": canonical_csr(hub.tocsr()), "one": canonical_csr(sp.csr_matrix(np.ones((1, 1))))}
