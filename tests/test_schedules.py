"""SpMM and SDDMM schedule spaces (CPU): registry size and names, validation, supports(), launch
geometry, and the native backend's refusals that need no GPU."""
from __future__ import annotations

import re
from itertools import product

import pytest

from autosage_cli.errors import AutosageError
from autosage_cli.kernels import schedule as sched
from autosage_cli.kernels.schedule import check_family_rules
from autosage_cli.kernels.schedule import Schedule
from autosage_cli.dtypes import DTYPES, vector_bytes_fit

SUITE_K = (1, 2, 4, 8, 16, 32, 64, 128, 256)
AWKWARD_K = (3, 5, 33, 127)
OWN_OPS = ("spmm", "sddmm")
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535


def own_schedules():
    return [s for op in OWN_OPS for s in sched.registry(op)]


def test_registry_sizes():
    spmm, sddmm = sched.registry("spmm"), sched.registry("sddmm")
    # Bounds per value type: what one tune may screen (the 16-byte half schedules are refused by
    # float32, the widest float schedules run in every type).
    for dtype in ("float32", "bfloat16"):
        runnable = [s for s in spmm + sddmm if vector_bytes_fit(s.vec, dtype) is None]
        assert 24 <= sum(s.op == "spmm" for s in runnable) <= 130, dtype
        assert 8 <= sum(s.op == "sddmm" for s in runnable) <= 41, dtype
    assert {s.family for s in spmm} == {"subwarp", "warprow", "split", "splitwarp", "vector", "parreduce",
                                       "stream"}
    assert {s.family for s in sddmm} == {"rowgroup", "edge"}
    assert {s.reduce for s in spmm if s.split} == {"atomic", "twophase"}


def test_names_unique_and_stable():
    names = [s.name for s in own_schedules()]
    assert len(names) == len(set(names))
    for s in own_schedules():
        assert sched.get(s.name) == s
        assert re.fullmatch(r"[a-z0-9.]+", s.name), s.name
    # One name pinned, so accidental renames (which orphan cache entries) fail here.
    assert Schedule("spmm", "split", lanes=4, vec=4, split=256, chunk=256, reduce="atomic",
                    unroll=4).name == "spmm.split.g4.v4.t256.u4.s256c256a"
    assert Schedule("sddmm", "rowgroup", lanes=1, vec=1, tile=1, chunk=256,
                    unroll=4).name == "sddmm.rowgroup.g1.v1.t256.k1.u4.c256"


@pytest.mark.parametrize("s", own_schedules(), ids=lambda s: s.name)
def test_validate_and_space_rules(s):
    s.validate()
    check_family_rules(s)


def test_space_rules_reject_inconsistent_knobs():
    with pytest.raises(ValueError):
        check_family_rules(Schedule("spmm", "warprow", lanes=32, vec=4, tile=96))
    with pytest.raises(ValueError):
        check_family_rules(Schedule("spmm", "subwarp", lanes=4, vec=1, split=64, chunk=64,
                                              reduce="atomic"))
    with pytest.raises(ValueError):
        check_family_rules(Schedule("sddmm", "rowgroup", lanes=4, vec=4, tile=0))
    with pytest.raises(ValueError):
        check_family_rules(Schedule("sddmm", "edge", lanes=4, vec=1, chunk=64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OWN_OPS)
@pytest.mark.parametrize("k", SUITE_K + AWKWARD_K)
def test_every_width_has_candidates(op, k, dtype):
    assert sched.candidates(op, k, dtype=dtype), f"no {op} schedule runs K={k} in {dtype}"


@pytest.mark.parametrize("s", own_schedules(), ids=lambda s: s.name)
def test_every_schedule_is_purposeful(s):
    """Each schedule runs at least one suite width in some value type (else it could never win)."""
    assert any(s.supports(k, 1, dtype) is None for k in SUITE_K for dtype in DTYPES)


@pytest.mark.parametrize("s", own_schedules(), ids=lambda s: s.name)
def test_supports_reasons(s):
    for k, dtype in product(SUITE_K + AWKWARD_K, DTYPES):
        reason = s.supports(k, 1, dtype)
        assert reason is None or (isinstance(reason, str) and reason.strip())
        if vector_bytes_fit(s.vec, dtype):
            assert reason and "16-byte vector loads" in reason
        elif k % s.vec:
            assert reason and "vector width" in reason
    assert s.supports(0) and s.supports(-3)


def test_supports_refuses_wasted_lanes_and_registers():
    wide = Schedule("spmm", "subwarp", lanes=32, vec=4, unroll=4)
    assert "idle" in wide.supports(4)
    assert wide.supports(32) is None
    rowgroup = Schedule("sddmm", "rowgroup", lanes=32, vec=4, tile=256, unroll=2)
    assert "exceeds" in Schedule("sddmm", "rowgroup", lanes=4, vec=4, tile=16).supports(32)
    assert "chunk" in rowgroup.supports(128)
    assert rowgroup.supports(256) is None
    assert "chunk" in Schedule("spmm", "warprow", lanes=32, vec=4, tile=256, unroll=2).supports(128)


def test_name_expressions_are_template_instantiations():
    for s in own_schedules():
        expr = s.name_expression("float")
        assert re.fullmatch(r"[a-z_]+<float(, (\d+|true|false))+>", expr), expr
        assert s.source_file.endswith(".cu")
    split_tp = Schedule("spmm", "splitwarp", lanes=8, vec=4, split=2048, chunk=1024, reduce="twophase",
                        unroll=4)
    assert split_tp.name_expression("float") == "spmm_split<float, 8, 4, 4, true, true>"
    assert (Schedule("spmm", "warprow", lanes=32, vec=4, tile=256, unroll=2).name_expression("float")
            == "spmm_warprow<float, 32, 4, 2, 2>")
    assert (Schedule("sddmm", "rowgroup", lanes=16, vec=4, tile=128, unroll=2).name_expression("float")
            == "sddmm_rowgroup<float, 16, 4, 2, 2>")


# ------------------------------------------------------------------ launch geometry

def test_launch_groups_per_block():
    sub = Schedule("spmm", "subwarp", lanes=4, vec=4, threads=256, unroll=4)
    assert sub.launch(1000, 16) == ((16, 1, 1), (256, 1, 1))      # 64 rows per block
    warp = Schedule("spmm", "warprow", lanes=4, vec=4, threads=256, unroll=4)
    assert warp.lanes_per_item == 32
    assert warp.launch(1000, 16) == ((125, 1, 1), (256, 1, 1))    # a warp per row, 8 per block
    split = Schedule("spmm", "split", lanes=2, vec=4, split=256, chunk=256, reduce="atomic", unroll=4)
    assert split.launch(1000, 8)[0] == (8, 1, 1)                   # light rows: 128 per block
    assert split.launch(1000, 8, lanes_per_item=32)[0] == (125, 1, 1)  # chunks: a warp each


def test_launch_feature_tiles_on_y():
    tiled = Schedule("spmm", "warprow", lanes=32, vec=4, tile=128, unroll=4)
    assert tiled.launch(10, 256)[0] == (2, 2, 1)
    assert tiled.launch(10, 129)[0][1] == 2 and tiled.launch(10, 128)[0][1] == 1


def test_launch_with_no_items_is_one_safe_block():
    for s in own_schedules():
        grid, block = s.launch(0, 4)
        assert grid[0] == 1 and block[0] == s.threads


@pytest.mark.parametrize("s", own_schedules(), ids=lambda s: s.name)
def test_launch_limits_on_large_inputs(s):
    """2.45M rows / 124M edges (products-like) at every supported width fit the grid limits."""
    for k in SUITE_K:
        if s.supports(k):
            continue
        for n_items in (2_449_029, 123_718_280):
            grid, block = s.launch(n_items, k)
            assert 1 <= grid[0] <= GRID_X_MAX and grid[1] <= GRID_YZ_MAX and grid[2] == 1
            assert grid[0] * block[0] // s.lanes_per_item >= n_items


@pytest.mark.parametrize("s", [s for s in sched.registry("spmm") if s.split], ids=lambda s: s.name)
def test_split_grid_covers_chunks_and_light_rows(s):
    from autosage_cli.backends.native_spmm import split_blocks

    for n_chunks, n_light in ((0, 1), (1, 0), (470, 199_996), (900_000, 120_000), (3, 2_449_000)):
        chunk_blocks, light_blocks = split_blocks(s, n_chunks, n_light, 16)
        assert chunk_blocks * s.threads // 32 >= n_chunks and (chunk_blocks == 0) == (n_chunks == 0)
        assert light_blocks * s.threads // s.lanes_per_item >= n_light and (light_blocks == 0) == (n_light == 0)
        assert (chunk_blocks - 1) * s.threads // 32 < max(n_chunks, 1)       # no whole idle block
        assert 0 < chunk_blocks + light_blocks <= GRID_X_MAX


# ------------------------------------------------------------------ native refusals without a GPU

def test_native_prepare_refuses_unsupported_width_and_heads():
    from autosage_cli import ops

    s = Schedule("spmm", "subwarp", lanes=4, vec=4, unroll=4)
    with pytest.raises(AutosageError, match="vector width"):
        ops.prepare_native(None, s, 6)
    with pytest.raises(AutosageError, match="one head"):
        ops.prepare_native(None, s, 8, heads=2)
    with pytest.raises(AutosageError, match="attention only"):
        ops.prepare_native(None, s, 8, use_values=True)
    with pytest.raises(AutosageError, match="unknown schedule"):
        ops.prepare_native(None, "spmm.nosuch.g1.v1.t256", 4)


# ------------------------------------------------------------------ the vector family (K <= 8)

VECTOR = [s for s in sched.registry("spmm") if s.family == "vector"]


def test_vector_family_covers_every_small_width_with_both_row_shapes():
    assert 16 <= len(VECTOR) <= 24, len(VECTOR)
    for k in range(1, 9):
        lanes = {s.lanes for s in VECTOR if s.supports(k) is None}
        assert {32, 8} <= lanes, (k, lanes)   # a warp per row (long rows) and a short-row group
    assert all(s.supports(k) for s in VECTOR for k in (9, 16, 32, 33, 256))


@pytest.mark.parametrize("s", VECTOR, ids=lambda s: s.name)
def test_vector_schedule_serves_exactly_its_band(s):
    kmax = s.tile
    served = [k for k in range(1, 300) if s.supports(k) is None]
    assert served == list(range(kmax // 2 + 1, kmax + 1))
    assert "exceeds" in s.supports(kmax + 1)
    if kmax > 1:
        assert "idle" in s.supports(kmax // 2)
    assert s.vec == 1 and not s.split and not s.chunk
    assert s.name_expression("float") == f"spmm_vector<float, {s.lanes}, {kmax}, {s.unroll}>"
    assert s.source_file == "spmm_vector.cu"


def test_vector_launch_is_one_group_per_row():
    s = Schedule("spmm", "vector", lanes=8, vec=1, threads=256, tile=4, unroll=4)
    assert s.name == "spmm.vector.g8.v1.t256.k4.u4"
    assert s.lanes_per_item == 8
    assert s.launch(1000, 3) == ((32, 1, 1), (256, 1, 1))      # 32 rows per block, no y tiles
    assert s.launch(1, 4) == ((1, 1, 1), (256, 1, 1))
    warp = Schedule("spmm", "vector", lanes=32, vec=1, threads=256, tile=1, unroll=8)
    assert warp.launch(2_449_029, 1)[0] == (306_129, 1, 1)


def test_vector_space_rules_reject_inconsistent_knobs():
    for bad in (dict(tile=3), dict(tile=16), dict(lanes=2), dict(vec=2), dict(unroll=3),
                dict(split=64, chunk=64, reduce="atomic")):
        knobs = dict(lanes=8, vec=1, threads=256, tile=4, unroll=4) | bad
        with pytest.raises(ValueError):
            check_family_rules(Schedule("spmm", "vector", **knobs))
