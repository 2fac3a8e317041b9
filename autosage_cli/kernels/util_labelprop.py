"""One round of label propagation (cuda/util_labelprop.cu; autosage_cli/torch/cuda_label_propagation.py
runs the rounds): every vertex's vote counted in a hash table of its own, in one of three places by
how many votes it has, so that no table is ever shared between vertices:

  votes <= WARP_MAX_VOTES    a warp per vertex, its table in the warp's slice of shared memory
  votes <= BLOCK_MAX_VOTES   a block per vertex, its table in the block's shared memory
  more (hubs)                a block per vertex, its table in global memory, `global_slots` slots
                             (the caller allocates them once per call, filled with EMPTY and 0;
                             every round leaves them so)

Each table holds at least twice its vertex's votes (at most half full, short probes). The limits
are the kernel file's table sizes halved (LABELPROP_WARP_SLOTS, LABELPROP_BLOCK_SLOTS; a CPU test
reads them there). The groups are util.GROUPS' `labelprop/{index}`, built on first use like every
helper group; launches take device addresses (ints) and the raw CUDA stream (kernels/launch.py).
"""
from __future__ import annotations

import numpy as np

from ..graphs.label_propagation import MOVING_MULTIPLIER, moving_salt
from .compile import get_module_functions
from .util import MODULES, _launch

WARP_THREADS = 256        # autosage_labelprop_warps' block: LABELPROP_WARPS = 8 warps, a table each
BLOCK_THREADS = 512       # autosage_labelprop_blocks' block
WARP_MAX_VOTES = 256      # LABELPROP_WARP_SLOTS / 2
BLOCK_MAX_VOTES = 2048    # LABELPROP_BLOCK_SLOTS / 2
EMPTY = -1                # LABELPROP_EMPTY: a free slot's label


def global_slots(votes):
    """The global table of each vertex with `votes` votes (an int64 tensor, every entry above
    BLOCK_MAX_VOTES): the power of two at or above 2 x votes, by integer bit smearing (exact)."""
    slots = 2 * votes - 1
    for shift in (1, 2, 4, 8, 16, 32):
        slots = slots | (slots >> shift)
    return slots + 1


def labelprop_round(p: dict, n: int, n_large: int, round_: int, index: str, stream: int) -> None:
    """One round: next[v] for every v < n from labels, counters[0] += the vertices whose vote
    differs from their label, counters[1] += tables that overflowed (0 unless sizes are wrong).
    `p`: rowptr, cols, rowptr_t, rows_t, labels, next, counters (uint64 x 2, summed into), large
    (int32, the n_large vertices of more than WARP_MAX_VOTES votes), offsets (int64, n_large + 1:
    large[i]'s global slots are offsets[i] .. offsets[i + 1], none when equal), table_keys,
    table_counts (int32, the global slots). `round_` picks the moving vertices' hash (graphs.
    label_propagation's MOVING_MULTIPLIER and moving_salt); `index`: "int" or "long long", the row
    pointers' type."""
    hashing = (np.uint64(MOVING_MULTIPLIER), np.uint64(moving_salt(round_)))
    _launch(f"autosage_labelprop_warps<{index}>", n * 32,
            (p["rowptr"], p["cols"], p["rowptr_t"], p["rows_t"], p["labels"], np.int64(n),
             np.int64(WARP_MAX_VOTES), *hashing, p["next"], p["counters"]),
            threads=WARP_THREADS, stream=stream)
    _launch(f"autosage_labelprop_blocks<{index}>", n_large * BLOCK_THREADS,
            (p["rowptr"], p["cols"], p["rowptr_t"], p["rows_t"], p["labels"], p["large"], np.int64(n_large),
             p["offsets"], p["table_keys"], p["table_counts"], *hashing, p["next"], p["counters"]),
            threads=BLOCK_THREADS, stream=stream)


def module(index: str) -> dict:
    """{expression: kernel} of group `labelprop/{index}` (built on first use, as every group)."""
    return get_module_functions(MODULES[f"labelprop/{index}"])
