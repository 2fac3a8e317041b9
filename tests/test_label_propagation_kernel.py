"""Label propagation's CUDA kernel path (cuda/util_labelprop.cu, kernels/util_labelprop.py,
torch/cuda_label_propagation.py) where no GPU is needed: the kernels compile for sm_90 with nvcc
(and tests/test_kernels_compile.py checks them for spills with every helper group), the kernel
file's table sizes fit the vote limits the launches pass, the vote lists and the tables are built
right (on CPU tensors: the same torch code runs on the device), and the round driver with a NumPy
round that follows the kernels' rules gives the host's labels. Also: CPU tensors never take the
kernel path. The kernels themselves run in tests/test_label_propagation_kernel_gpu.py."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import scipy.sparse as sp  # noqa: E402

from autosage_cli.cuda_sources import kernel_source  # noqa: E402
from autosage_cli.graphs import label_propagation as host_lp  # noqa: E402
from autosage_cli.graphs.csr import canonical_csr  # noqa: E402
from autosage_cli.graphs.synthetic import generate  # noqa: E402
from autosage_cli.kernels import compile as kcompile, util, util_labelprop as kernel  # noqa: E402
from autosage_cli.torch import cuda_label_propagation as clp, label_propagation as tlp, relabel  # noqa: E402
import ptxas_helpers  # noqa: E402


def _defines() -> dict[str, int]:
    text = kernel_source("util_labelprop.cu")
    return {name: int(value) for name, value in re.findall(r"#define (LABELPROP_\w+) \(?(-?\d+)\)?", text)}


def test_the_launch_limits_fit_the_kernel_files_tables():
    d = _defines()
    assert kernel.WARP_THREADS == 32 * d["LABELPROP_WARPS"]
    assert 2 * kernel.WARP_MAX_VOTES <= d["LABELPROP_WARP_SLOTS"]     # a warp's table at most half full
    assert 2 * kernel.BLOCK_MAX_VOTES <= d["LABELPROP_BLOCK_SLOTS"]   # a block's too
    assert kernel.WARP_MAX_VOTES < kernel.BLOCK_MAX_VOTES
    assert kernel.BLOCK_THREADS % 32 == 0 and kernel.BLOCK_THREADS <= 1024
    assert kernel.EMPTY == d["LABELPROP_EMPTY"]


def test_the_kernels_are_a_helper_group_in_each_index_type():
    for index in util.INDEX:
        ref = util.MODULES[f"labelprop/{index}"]
        assert ref.source_file == "util_labelprop.cu"
        assert ref.expressions == (f"autosage_labelprop_warps<{index}>", f"autosage_labelprop_blocks<{index}>")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_kernels_compile_for_sm90_without_spills():
    exprs = [e for index in util.INDEX for e in util.GROUPS[f"labelprop/{index}"]]
    report = ptxas_helpers.reports("util_labelprop.cu", exprs)
    assert len(report) == 4
    assert not any(r.spill_stores or r.spill_loads or r.stack_frame for r in report), report


def test_the_kernels_moving_hash_is_the_hosts():
    """next[v] takes the vote where bits 33-34 of v x multiplier + salt (mod 2^64) are not both 0."""
    ids = np.arange(100_000, dtype=np.uint64)
    for round_ in (0, 1, 5, 9):
        mixed = ids * np.uint64(host_lp.MOVING_MULTIPLIER) + np.uint64(host_lp.moving_salt(round_))
        np.testing.assert_array_equal((mixed >> np.uint64(33)) & np.uint64(3) != 0,
                                      host_lp._moving(ids.size, round_, np))


@pytest.mark.parametrize("votes", [2049, 3000, 4096, 4097, 20_000, 2**20 + 1, 2**40 - 3])
def test_global_slots_are_the_power_of_two_at_or_above_twice_the_votes(votes):
    got = int(kernel.global_slots(torch.tensor([votes], dtype=torch.int64))[0])
    assert got == 1 << (2 * votes - 1).bit_length()
    assert got >= 2 * votes > got // 2


# ---------------------------------------------------------------- graphs


def _csr(matrix) -> "object":
    return canonical_csr(sp.csr_matrix(matrix))


def _hub_graph(hub_votes=(5000, 1500, 300), n=6000, seed=0):
    """Rows of every regime: small random rows, a vertex per entry of `hub_votes` with about that
    many votes (a hub over BLOCK_MAX_VOTES, a shared-block one, one just over WARP_MAX_VOTES),
    self-loops, empty rows, isolated vertices, pairs stored both ways."""
    rng = np.random.default_rng(seed)
    rows, cols = [rng.integers(0, n // 2, 4 * n)], [rng.integers(0, n // 2, 4 * n)]
    for h, votes in enumerate(hub_votes):
        hub = n // 2 + h
        out = rng.choice(n // 2, votes // 2, replace=False)
        rows += [np.full(out.size, hub), out]      # the hub's row and its column: both directions
        cols += [out, np.full(out.size, hub)]
    loops = np.arange(0, n // 2, 7)
    rows.append(loops)
    cols.append(loops)
    coo = sp.coo_matrix((np.ones(sum(r.size for r in rows)), (np.concatenate(rows), np.concatenate(cols))),
                        shape=(n, n))
    return canonical_csr(coo.tocsr())


def _graphs():
    blocks = {"n": 3000, "nnz": 45_000, "q50": 12, "q90": 30, "q99": 60, "max": 200, "locality": 0.8,
              "block": 256, "shuffle": 1}
    star = np.zeros((40, 40))
    star[0, 1:] = 1
    return {"blocks": generate("power-law", blocks), "hubs": _hub_graph(), "star": _csr(star),
            "loops-only": _csr(np.eye(6)), "one-edge": _csr(np.eye(5, k=1) * (np.arange(5) == 2)[:, None])}


GRAPHS = _graphs()


def _votes_of(lists: clp.VoteLists, v: int) -> np.ndarray:
    rowptr, rowptr_t = lists.rowptr.numpy(), lists.rowptr_t.numpy()
    mine = np.concatenate([lists.cols.numpy()[rowptr[v]:rowptr[v + 1]],
                           lists.rows_t.numpy()[rowptr_t[v]:rowptr_t[v + 1]]])
    return np.sort(mine[mine != v])


def _host_votes(g) -> list[np.ndarray]:
    src, dst = host_lp.edge_lists(g.indptr, g.indices, g.n_rows, np)
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    bounds = np.searchsorted(src, np.arange(g.n_rows + 1))
    return [dst[bounds[v]:bounds[v + 1]] for v in range(g.n_rows)]


@pytest.mark.parametrize("shuffled", [False, True], ids=["row-order", "any-order"])
@pytest.mark.parametrize("name", ["blocks", "hubs", "star"])
def test_the_vote_lists_hold_every_vertexs_votes(name, shuffled):
    """A's row plus Aᵀ's row, self-loops dropped, is each vertex's multiset of the host's
    undirected edge list, whether the edges come in row order or not."""
    g = GRAPHS[name]
    _, row, col, _ = relabel.csr_tensors(g, "cpu")
    if shuffled:
        order = torch.from_numpy(np.random.default_rng(5).permutation(row.numel()))
        row, col = row[order], col[order]
    lists = clp.vote_lists(row, col, g.n_rows)
    assert lists.cols.dtype == lists.rows_t.dtype == torch.int32
    lengths = np.diff(lists.rowptr.numpy()) + np.diff(lists.rowptr_t.numpy())
    np.testing.assert_array_equal(lists.votes.numpy(), lengths)
    for v, expected in enumerate(_host_votes(g)):
        np.testing.assert_array_equal(_votes_of(lists, v), expected)


def test_an_id_outside_the_vertices_is_refused():
    from autosage_cli.errors import AutosageError

    with pytest.raises(AutosageError, match="outside 0..4"):
        clp.vote_lists(torch.tensor([0, 1]), torch.tensor([1, 5]), 5)


def test_every_vertex_has_one_table_of_the_right_size():
    g = GRAPHS["hubs"]
    _, row, col, _ = relabel.csr_tensors(g, "cpu")
    votes = clp.vote_lists(row, col, g.n_rows).votes
    tabs = clp.tables(votes)
    large = tabs.large.numpy()
    np.testing.assert_array_equal(large, np.flatnonzero(votes.numpy() > kernel.WARP_MAX_VOTES))
    assert tabs.large.dtype == torch.int32
    own = np.diff(tabs.offsets.numpy())
    many = votes.numpy()[large]
    hubs = many > kernel.BLOCK_MAX_VOTES
    assert hubs.sum() >= 1 and (~hubs).sum() >= 2          # the graph has every regime
    assert np.all(own[~hubs] == 0)
    assert np.all((own[hubs] >= 2 * many[hubs]) & (own[hubs] & (own[hubs] - 1) == 0))
    assert tabs.keys.numel() == tabs.counts.numel() == own.sum() == int(tabs.offsets[-1])
    assert bool((tabs.keys == kernel.EMPTY).all()) and bool((tabs.counts == 0).all())


def test_tables_past_their_bound_leave_the_graph_to_the_scatters(monkeypatch):
    g = GRAPHS["hubs"]
    _, row, col, _ = relabel.csr_tensors(g, "cpu")
    votes = clp.vote_lists(row, col, g.n_rows).votes
    monkeypatch.setattr(clp, "MAX_TABLE_SLOTS", 1000)
    assert clp.tables(votes) is None


# ---------------------------------------------------------------- the rounds


def numpy_round(lists: clp.VoteLists, n: int):
    """A round by the kernels' rules, vertex by vertex: the most frequent label of the vote
    lists (ties: the smallest), the moving hash with the kernels' multiplier and salt, next[v]
    written for every v, the changed count over every voting vertex."""
    ids = np.arange(n, dtype=np.uint64)
    votes = [_votes_of(lists, v) for v in range(n)]

    def one_round(labels, following, round_):
        old, out = labels.numpy(), following.numpy()
        mixed = ids * np.uint64(host_lp.MOVING_MULTIPLIER) + np.uint64(host_lp.moving_salt(round_))
        moving = (mixed >> np.uint64(33)) & np.uint64(3) != 0
        changed = 0
        for v in range(n):
            out[v] = old[v]
            if votes[v].size:
                values, counts = np.unique(old[votes[v]], return_counts=True)
                winner = values[np.argmax(counts)]      # the first maximum: the smallest label
                changed += int(winner != old[v])
                if moving[v]:
                    out[v] = winner
        return changed, 0

    return one_round


@pytest.mark.parametrize("name", list(GRAPHS))
def test_the_rounds_by_the_kernels_rules_give_the_hosts_labels(name):
    """run_rounds (double buffers, the stop before a settled round's winners apply) with the
    kernels' rules: the host's labels, and the scatter rounds'."""
    g = GRAPHS[name]
    _, row, col, _ = relabel.csr_tensors(g, "cpu")
    lists = clp.vote_lists(row, col, g.n_rows)
    labels = clp.run_rounds(g.n_rows, "cpu", numpy_round(lists, g.n_rows), host_lp.MAX_ROUNDS, host_lp.SETTLED)
    assert labels.dtype == torch.int32
    expected = host_lp.propagate(g.indptr, g.indices, g.n_rows)
    np.testing.assert_array_equal(labels.numpy(), expected)
    np.testing.assert_array_equal(tlp.propagate_scatter(row, col, g.n_rows).numpy(), expected)


def test_an_overflowed_table_is_an_error_not_a_labelling():
    with pytest.raises(clp.TableOverflow, match="overflowed"):
        clp.run_rounds(4, "cpu", lambda labels, following, round_: (4, 1), 3, 0.0)


def test_cpu_tensors_run_the_scatter_rounds(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("CPU tensors took the CUDA kernel path")

    monkeypatch.setattr(clp, "propagate", refuse)
    g = GRAPHS["blocks"]
    rowptr, row, col, _ = relabel.csr_tensors(g, "cpu")
    expected = host_lp.propagate(g.indptr, g.indices, g.n_rows)
    np.testing.assert_array_equal(tlp.propagate(row, col, g.n_rows).numpy(), expected)
