"""CPU tests of the attention schedule space, its kernels' compile reports, the host-side work lists
and the online-softmax / partial-combine math the kernels implement (emulated in NumPy)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from autosage_cli.backends.native_attention import attention_scale, split_segments
from autosage_cli.kernels import attention_space as space
from autosage_cli.kernels import schedule as schedule_mod
import ptxas_helpers

SCHEDULES = space.SCHEDULES
FUSED = [s for s in SCHEDULES if s.family in ("fused", "fused_split")]
POW2_D = (16, 32, 64, 128)


# ------------------------------------------------------------------ registry

def test_names_unique_and_valid():
    names = [s.name for s in SCHEDULES]
    assert len(names) == len(set(names))
    for s in SCHEDULES:
        space.check_space_rules(s)
        assert s.op == "attention"
        assert schedule_mod.get(s.name) == s


def test_registry_is_the_attention_registry():
    assert schedule_mod.registry("attention") == SCHEDULES
    assert {s.family for s in SCHEDULES} == {"fused", "fused_split", "unfused"}


@pytest.mark.parametrize("heads", [1, 4, 8])
@pytest.mark.parametrize("d", POW2_D)
def test_every_power_of_two_d_has_vector_schedules(d, heads):
    cands = schedule_mod.candidates("attention", d, heads)
    fused = [s for s in cands if s.family == "fused"]
    split = [s for s in cands if s.family == "fused_split"]
    assert any(s.vec == 4 for s in fused), d
    assert any(s.vec == 4 for s in split), d
    assert any(s.family == "unfused" for s in cands)
    # two 16-byte-load group shapes per d (one vector per lane, or two with fewer lanes)
    assert len({(s.lanes, s.tile) for s in fused if s.vec == 4}) >= 2
    for s in fused + split:
        assert s.lanes * s.vec * space.vectors_per_lane(s) >= d
        assert heads % s.heads_per_block == 0


@pytest.mark.parametrize("d", [1, 3, 5, 7, 17, 33, 50, 100, 127, 170, 255, 256])
def test_odd_d_runs_scalar_or_unfused(d):
    cands = schedule_mod.candidates("attention", d, 2)
    assert any(s.family == "unfused" for s in cands)
    for s in cands:
        if s.family != "unfused":
            assert d % s.vec == 0 and d <= s.tile
    if 3 <= d <= space.MAX_FEATURES:
        assert any(s.family == "fused" and s.vec == 1 for s in cands), d


def test_refusals_give_reasons():
    s = next(x for x in FUSED if x.vec == 4 and x.lanes == 16 and x.tile == 64)
    assert "multiple of the vector width" in s.supports(66, 1)
    assert "exceeds" in s.supports(128, 1)
    assert "idle" in s.supports(16, 1)
    wide = next(x for x in FUSED if x.heads_per_block == 4)
    assert "heads_per_block" in wide.supports(wide.tile, 2)
    assert wide.supports(wide.tile, 8) is None
    assert all(x.supports(300, 1) for x in FUSED)  # beyond registers: fused refuses ...
    assert any(x.supports(300, 1) is None for x in SCHEDULES)  # ... the unfused pipeline runs


def test_expressions():
    for s in FUSED:
        nv = space.vectors_per_lane(s)
        assert space.fused_expression(s).endswith(
            f"<float, int, {s.lanes}, {s.vec}, {nv}, {s.unroll}, {s.lanes * s.heads_per_block}>")
        assert s.name_expression("float") == space.fused_expression(s)
    split = next(s for s in FUSED if s.family == "fused_split")
    assert space.expressions(split, "float", "long long") == (
        space.fused_expression(split, "float", "long long"), "attention_combine<float, long long>")
    for f in (space.FUSED_SOURCE, space.SOFTMAX_SOURCE):
        exprs = space.file_expressions(f)
        assert len(exprs) == len(set(exprs)) and exprs


def test_launch_covers_all_groups():
    s = next(x for x in FUSED if x.lanes == 16 and x.family == "fused")
    for items in (0, 1, 15, 16, 17, 1000):
        (gx, gy, gz), (bx, _, _) = s.launch(items, 64)
        assert gy == gz == 1 and bx == s.threads
        assert gx * (bx // s.lanes) >= items and gx >= 1


# ------------------------------------------------------------------ compile reports (nvcc, sm_90)

def _check_reports(source: str, exprs: list[str]) -> None:
    reports = ptxas_helpers.reports(source, exprs)
    assert len(reports) == len(exprs), [r.name_expression for r in reports]
    bad = [r for r in reports if r.spill_stores or r.spill_loads or r.stack_frame or r.registers > 255]
    assert not bad, bad


@pytest.mark.parametrize("source", [space.FUSED_SOURCE, space.SOFTMAX_SOURCE])
def test_every_schedule_compiles_without_spills(source):
    _check_reports(source, list(space.file_expressions(source, "float", "int")))


def test_int64_indices_compile():
    picks = [next(s for s in SCHEDULES if s.family == f) for f in ("fused", "fused_split", "unfused")]
    for source in (space.FUSED_SOURCE, space.SOFTMAX_SOURCE):
        exprs = sorted({e for s in picks if s.source_file == source
                        for e in space.expressions(s, "float", "long long")})
        _check_reports(source, exprs)


# ------------------------------------------------------------------ host work lists

def test_split_segments_cover_every_edge_once():
    rng = np.random.default_rng(3)
    deg = rng.integers(0, 40, size=60)
    deg[[0, 7, 59]] = [1000, 513, 2048]
    deg[[3, 4]] = 0
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int32)
    split, chunk = 512, 256
    seg_rows, chunk_begin, heavy, chunk_ptr = split_segments(indptr, split, chunk)
    assert heavy.tolist() == [0, 7, 59]
    assert chunk_ptr.tolist() == [0, 4, 7, 15]
    n_chunks = chunk_begin.shape[0]
    covered = np.zeros(indptr[-1], dtype=int)
    for c in range(n_chunks):
        row = seg_rows[c]
        end = min(chunk_begin[c] + chunk, indptr[row + 1])
        assert indptr[row] <= chunk_begin[c] < end
        covered[chunk_begin[c]:end] += 1
    light = seg_rows[n_chunks:]
    assert sorted(light.tolist()) == [r for r in range(60) if r not in (0, 7, 59)]
    bins = np.floor(np.log2(deg[light] + 1.0))
    assert (np.diff(bins) <= 0).all()  # a warp's rows come from one degree bin where it can
    for row in light:
        covered[indptr[row]:indptr[row + 1]] += 1
    assert (covered == 1).all()
    for r, row in enumerate(heavy):  # a heavy row's chunks are its slots, in order
        assert (seg_rows[chunk_ptr[r]:chunk_ptr[r + 1]] == row).all()


def test_split_segments_without_heavy_rows_and_int64():
    indptr = np.array([0, 0, 3, 3], dtype=np.int64)
    seg_rows, chunk_begin, heavy, chunk_ptr = split_segments(indptr, 512, 256)
    # light rows longest degree bin first, ascending ids within a bin
    assert seg_rows.tolist() == [1, 0, 2] and chunk_begin.size == 0 and heavy.size == 0
    assert chunk_ptr.tolist() == [0] and seg_rows.dtype == np.int64


def test_attention_scale():
    assert attention_scale(64) == pytest.approx(0.125)
    assert attention_scale(64, 0.5) == 0.5
    with pytest.raises(ValueError):
        attention_scale(64, math.inf)


# ------------------------------------------------------------------ the kernels' math in NumPy

def online_softmax(scores2: np.ndarray, values: np.ndarray, step: int):
    """What one group of attention_fused.cu does, in float64: scores in the log2 domain, taken `step`
    at a time; returns the partial (m, l, acc)."""
    m, l, acc = -np.inf, 0.0, np.zeros(values.shape[1])
    for s in range(0, scores2.shape[0], step):
        batch = scores2[s:s + step]
        m_new = max(m, batch.max())
        alpha = np.exp2(m - m_new)
        p = np.exp2(batch - m_new)
        l = l * alpha + p.sum()
        acc = acc * alpha + p @ values[s:s + step]
        m = m_new
    return m, l, acc


def combine(partials):
    """attention_combine: M = max m_c, L = sum l_c 2^(m_c - M), out = sum acc_c 2^(m_c - M) / L."""
    M = max(m for m, _, _ in partials)
    w = [np.exp2(m - M) for m, _, _ in partials]
    L = sum(l * wc for (_, l, _), wc in zip(partials, w))
    return sum(acc * wc for (_, _, acc), wc in zip(partials, w)) / L


def softmax_reference(scores: np.ndarray, values: np.ndarray) -> np.ndarray:
    p = np.exp(scores - scores.max())
    return (p / p.sum()) @ values


@pytest.mark.parametrize("magnitude", [1.0, 50.0 * 50.0])
@pytest.mark.parametrize("step", [1, 2, 4])
def test_online_softmax_equals_softmax(step, magnitude):
    rng = np.random.default_rng(step)
    scores = rng.uniform(-1, 1, 1001) * magnitude      # x50 on Q and K: scores ~2500x larger
    values = rng.uniform(-1, 1, (1001, 8))
    m, l, acc = online_softmax(scores * math.log2(math.e), values, step)
    assert np.isfinite(acc).all() and np.isfinite(l)
    np.testing.assert_allclose(acc / l, softmax_reference(scores, values), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 7, 256, 1000])
def test_merging_chunk_partials_equals_full_softmax(chunk):
    rng = np.random.default_rng(chunk)
    n = 2500
    scores = rng.normal(0, 30, n)
    scores[1234] = 400.0                                 # one chunk dominates: others get 2^-huge
    values = rng.uniform(-1, 1, (n, 16))
    s2 = scores * math.log2(math.e)
    partials = [online_softmax(s2[c:c + chunk], values[c:c + chunk], 4) for c in range(0, n, chunk)]
    np.testing.assert_allclose(combine(partials), softmax_reference(scores, values), rtol=1e-12,
                               atol=1e-12)


def test_combine_is_order_free_and_empty_rows_are_zero():
    rng = np.random.default_rng(5)
    s2, v = rng.normal(0, 5, 300), rng.uniform(-1, 1, (300, 4))
    parts = [online_softmax(s2[c:c + 50], v[c:c + 50], 2) for c in range(0, 300, 50)]
    np.testing.assert_allclose(combine(parts), combine(parts[::-1]), rtol=1e-12)
    m, l, acc = online_softmax(np.empty(0), np.empty((0, 4)), 4)
    assert m == -np.inf and l == 0.0 and not acc.any()  # the kernel writes acc * (l > 0 ? 1/l : 0)


# ------------------------------------------------------------------ unfused sub-steps, vendor names

@pytest.mark.parametrize("d", [1, 4, 16, 32, 33, 48, 64, 100, 128, 200, 300])
def test_unfused_substeps_support_d_and_prefer_long_row_families(d):
    from autosage_cli.backends.attention_unfused import substep_schedules

    for s in (x for x in SCHEDULES if x.family == "unfused"):
        sddmm, spmm = substep_schedules(s, d)
        assert sddmm.op == "sddmm" and spmm.op == "spmm"
        assert sddmm.supports(d, 1) is None and spmm.supports(d, 1) is None
        if d <= 256:  # within the register tiles: a long-row aware schedule exists
            assert sddmm.chunk or sddmm.family == "edge", sddmm.name
            assert spmm.split, spmm.name


def test_unfused_substeps_can_be_given():
    from autosage_cli.backends.attention_unfused import substep_schedules

    unfused = next(x for x in SCHEDULES if x.family == "unfused")
    sd = next(s for s in schedule_mod.registry("sddmm") if s.supports(64, 1) is None)
    sp = next(s for s in schedule_mod.registry("spmm") if s.supports(64, 1) is None)
    assert substep_schedules(unfused, 64, (sd.name, sp)) == (sd, sp)
    with pytest.raises(ValueError):
        substep_schedules(unfused, 64, (sp, sd))


def test_vendor_names_and_unknown_name():
    from autosage_cli.backends import attention_vendor

    assert attention_vendor.VENDOR_NAMES == ["vendor-unfused-alg1", "vendor-unfused-alg2",
                                             "vendor-unfused-alg3", "vendor-unfused-default"]
    with pytest.raises(ValueError):
        attention_vendor.prepare(None, "vendor-unfused-alg9", 64)


def test_additive_score_kernels_compile_without_spills():
    """The GAT score over every fused schedule, int and long long indices (nvcc, sm_90)."""
    exprs = list(space.additive_expressions("float", "int"))
    fused32 = [s for s in FUSED if s.vec <= 4]     # the 16-byte half schedules never run in float
    assert len(exprs) == len({space.additive_expression(s) for s in fused32}) + 1
    assert all(e.startswith(("attention_additive_rows<", "attention_additive_segments<",
                             "attention_additive_stats<")) for e in exprs)
    wide = sorted({space.additive_expression(s, "float", "long long")
                   for s in fused32 if s.lanes == 32 or s.family == "fused_split"}
                  | {space.additive_stats_expression("long long")})
    _check_reports(space.FUSED_SOURCE, exprs + wide)


def test_additive_schedule_is_the_best_fused_estimate_or_a_checked_name():
    from autosage_cli.errors import AutosageError
    from autosage_cli.features import compute_features
    from autosage_cli.graphs.load import load_graph
    from autosage_cli.scheduler.decisions.additive import additive_schedule
    from autosage_cli.scheduler.estimate import rank

    g = load_graph(dataset="cora")
    for d, heads in ((8, 8), (41, 1), (64, 1), (5, 3)):
        chosen = additive_schedule(g, d, heads)
        # ranked by the additive op's own model (ops/additive.additive_rows), over the fused families
        fused = [s for s, _ in rank(compute_features(g, symmetry=False), "attention-additive", d, heads)]
        assert all(s.family in ("fused", "fused_split") for s in fused)
        assert chosen == fused[0] and chosen.supports(d, heads) is None
    named = next(s for s in FUSED if s.family == "fused_split" and s.supports(64, 2) is None)
    assert additive_schedule(g, 64, 2, named.name) == named
    unfused = next(s for s in SCHEDULES if s.family == "unfused")
    with pytest.raises(AutosageError, match="families fused, fused_split only"):
        additive_schedule(g, 64, 1, unfused.name)
    with pytest.raises(AutosageError, match="cannot run d=63"):
        additive_schedule(g, 63, 2, named.name)
    with pytest.raises(AutosageError, match="at most 256"):
        additive_schedule(g, 300, 1)


def test_prepare_additive_refuses_what_it_cannot_run():
    from autosage_cli.backends.native_attention import prepare_additive

    unfused = next(s for s in SCHEDULES if s.family == "unfused")
    with pytest.raises(ValueError, match="fused families only"):
        prepare_additive(None, unfused, 64, 1)
    fused = next(s for s in FUSED if s.supports(64, 1) is None)
    with pytest.raises(ValueError, match="cannot run d=63"):
        prepare_additive(None, fused, 63, 1)
    with pytest.raises(ValueError, match="negative_slope must be finite"):
        prepare_additive(None, fused, 64, 1, float("inf"))


def test_every_attention_family_names_a_plan_layout_and_its_variants_too():
    from autosage_cli.backends import native_attention
    from autosage_cli.kernels.attention_families import FAMILIES
    from autosage_cli.scheduler.decisions.additive import ADDITIVE_FAMILIES

    assert {f.plan for f in FAMILIES.values()} == set(native_attention.PLANS)
    assert ADDITIVE_FAMILIES == ("fused", "fused_split")
    assert {FAMILIES[name].plan for name in ADDITIVE_FAMILIES} == set(native_attention.ADDITIVE_PLANS)
    assert [name for name, f in FAMILIES.items() if f.substeps] == ["unfused"]
    assert all(f.wide_indices for f in FAMILIES.values())


def test_prepare_refuses_a_schedule_of_another_op_before_touching_the_graph():
    from autosage_cli import ops
    from autosage_cli.backends.native_attention import prepare
    from autosage_cli.errors import AutosageError

    spmm = schedule_mod.candidates("spmm", 64)[0]
    with pytest.raises(ValueError, match="is not an attention schedule"):
        prepare(None, spmm, 64, 1)
    fused = next(s for s in FUSED if s.supports(64, 1) is None)
    with pytest.raises(AutosageError, match="cannot run K=63"):   # the one check, before any plan
        ops.prepare_native(None, fused, 63, 1)
