"""The kernel-family registry (CPU): explicit (importing kernels.schedule is enough), one entry per
family that matches its kernel file, schedule names and order pinned (they are cache keys), and a
new SpMM family needing only its entry and schedules to be tuned like any other."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import schedule as sched
from autosage_cli.kernels.schedule import FAMILIES, Family, Schedule
from autosage_cli.dtypes import vector_bytes_fit
from autosage_cli.scheduler.estimate import estimate_ms, rank

from scheduler_fakes import REDDIT_LIKE, UNIFORM_1M

REPO = Path(__file__).resolve().parents[1]

# Per op: (count, sha256 of the names joined by newlines, in registry order). Schedule names are
# cache keys and the registry order breaks estimate ties, so a rename, a reorder, an addition or a
# removal must be deliberate: update these numbers together with the change that needs them.
REGISTRY_SNAPSHOT = {
    "spmm": (128, "cefecc27d6156594"),  # split's short-chunk variants (64/64, 32/32; half: 64/64), after its others
    "sddmm": (41, "16961c3ff133561b"),
    "attention": (77, "60212896b62ebb9c"),
}
# The same for the schedules float32 can run (vectors of at most 16 bytes): the 16-byte half
# schedules were appended, so float32's names and order are those from before they existed (but
# for split's short-chunk variants, float32 schedules added since).
FLOAT32_SNAPSHOT = {
    "spmm": (111, "8b9235164ffd753e"),
    "sddmm": (31, "ea36edbb8d6eca39"),
    "attention": (59, "7a4a194d14a39ccc"),
}


def _digest(names: list[str]) -> tuple[int, str]:
    return len(names), hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


@pytest.mark.parametrize("op", sched.OPS)
def test_registry_names_and_order_match_the_snapshot(op):
    names = [s.name for s in sched.registry(op)]
    assert _digest(names) == REGISTRY_SNAPSHOT[op], names


@pytest.mark.parametrize("op", sched.OPS)
def test_float32_schedules_are_unchanged_by_the_half_schedules(op):
    names = [s.name for s in sched.registry(op) if vector_bytes_fit(s.vec, "float32") is None]
    assert _digest(names) == FLOAT32_SNAPSHOT[op], names


def test_importing_schedule_alone_knows_every_family():
    """A fresh interpreter that imports nothing but kernels.schedule can ask any schedule what it
    supports (the families are not filled in by importing a space module first)."""
    code = ("from autosage_cli.kernels.schedule import Schedule\n"
            "s = Schedule('spmm', 'subwarp', lanes=8, vec=4, threads=256)\n"
            "print(repr(s.supports(8)), repr(s.supports(6)), s.name_expression(), s.source_file)\n"
            "import sys\n"
            "print(sorted(m for m in sys.modules if m.endswith('_space')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == ("None 'K=6 is not a multiple of the vector width 4' "
                     "spmm_subwarp<float, 8, 4, 1> spmm_subwarp.cu")
    assert second == "[]"  # no space module was needed


def test_family_tables_are_disjoint_and_each_family_has_schedules():
    from autosage_cli.kernels import attention_families, sddmm_families, spmm_families

    tables = (spmm_families.FAMILIES, sddmm_families.FAMILIES, attention_families.FAMILIES)
    assert len(FAMILIES) == sum(len(t) for t in tables)
    for op, table in zip(sched.OPS, tables):
        assert {f.op for f in table.values()} == {op}
        assert {s.family for s in sched.registry(op)} == set(table)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_entry_matches_its_kernel_file(name):
    family = FAMILIES[name]
    source = (REPO / "cuda" / family.source_file).read_text()
    assert family.knobs.strip() and "\n" not in family.knobs
    for s in (s for s in sched.registry(family.op) if s.family == name):
        kernel = s.name_expression("float").split("<", 1)[0]
        assert re.search(rf"__global__[^;{{]*\b{kernel}\s*\(", source), (s.name, kernel)
        assert s.source_file == family.source_file
        assert s.lanes_per_item in (s.lanes, 32)


def test_an_unknown_family_is_refused_by_validate():
    with pytest.raises(ValueError, match="unknown family"):
        Schedule("spmm", "nosuch").validate()


# ------------------------------------------------------------------ adding a SpMM family

def _rowpair_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_rowpair<{dtype}, {s.lanes}, {s.vec}, {s.unroll}>"


def _rowpair_supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    return None if k % s.vec == 0 else f"K={k} is not a multiple of the vector width {s.vec}"


def _rowpair_space(make) -> list[Schedule]:
    return [make(lanes=g, vec=4, threads=256, unroll=4) for g in (8, 16)]


def _rowpair_rules(s: Schedule) -> str | None:
    return "a rowpair schedule has no tile" if s.tile else None


# The worked example of docs/INTERNALS.md: everything the family is, in its entry.
ROWPAIR = Family("spmm", "spmm_rowpair.cu", _rowpair_expr, _rowpair_supports,
                 "a warp per row; lanes: lanes per edge slot; vec: floats per load; unroll: edges "
                 "in flight", lanes_per_item=lambda s: 32, schedules=_rowpair_space,
                 space_rules=_rowpair_rules, stages_edges=True)


def test_a_new_spmm_family_is_tuned_from_its_entry_alone():
    """One Family entry makes a family whose schedules the registry lists, whose rules the space
    checks, which the cost model ranks, whose kernel the compiler knows and whose launches lay out
    (a warp per row), with no other module changed."""
    from autosage_cli.backends.native_spmm import LAYOUTS
    from autosage_cli.kernels.schedule import check_family_rules
    from autosage_cli.scheduler.estimate import cost_models

    with sched.extra_schedules(families={"rowpair": ROWPAIR}):
        mine = [s for s in sched.registry("spmm") if s.family == "rowpair"]
        assert [s.name for s in mine] == ["spmm.rowpair.g8.v4.t256.u4", "spmm.rowpair.g16.v4.t256.u4"]
        s = mine[0]
        check_family_rules(s)
        with pytest.raises(ValueError, match="rowpair schedule has no tile"):
            check_family_rules(Schedule("spmm", "rowpair", lanes=8, vec=4, tile=64))
        assert s in sched.candidates("spmm", 16) and s not in sched.candidates("spmm", 6)
        assert sched.get(s.name) == s
        assert kcompile.schedule_kernels(s) == (kcompile.KernelRef("spmm_rowpair.cu",
                                                                   "spmm_rowpair<float, 8, 4, 4>"),)
        assert s.name_expression("bfloat16") == "spmm_rowpair<__nv_bfloat16, 8, 4, 4>"
        assert s.launch(1000, 16) == ((125, 1, 1), (256, 1, 1))  # 8 warps, so 8 rows, per block
        assert ROWPAIR.plan in LAYOUTS and ROWPAIR.cost in cost_models("spmm")
        for features in (UNIFORM_1M, REDDIT_LIKE):
            assert 0 < estimate_ms(features, "spmm", 16, s) < float("inf")
            assert s in [r for r, _ in rank(features, "spmm", 16)]
    assert "rowpair" not in FAMILIES and s not in sched.registry("spmm")


def test_a_family_that_walks_like_parreduce_is_costed_from_its_entry_alone():
    """A family naming parreduce's cost model, plan layout and heavy threshold gets parreduce's
    estimates schedule for schedule, from its entry alone (no branch on its name anywhere)."""
    real = FAMILIES["parreduce"]
    twin = dataclasses.replace(real, source_file="spmm_twin.cu")
    with sched.extra_schedules(families={"twin": twin}):
        twins = [s for s in sched.registry("spmm") if s.family == "twin"]
        originals = [s for s in sched.registry("spmm") if s.family == "parreduce"]
        assert [dataclasses.replace(s, family="parreduce") for s in twins] == originals
        for k in (1, 2, 4, 8):
            for features in (UNIFORM_1M, REDDIT_LIKE):
                for t, p in zip(twins, originals):
                    assert estimate_ms(features, "spmm", k, t) == estimate_ms(features, "spmm", k, p)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_names_a_cost_model_and_a_plan_layout_that_exist(name):
    from autosage_cli.backends.native_spmm import LAYOUTS
    from autosage_cli.scheduler.estimate import cost_models

    family = FAMILIES[name]
    assert family.cost in cost_models(family.op)
    if family.op == "spmm":
        assert family.plan in LAYOUTS
    if family.op in ("spmm", "sddmm"):   # their spaces are the entries' schedules
        assert family.schedules is not None and family.space_rules is not None


def test_the_rows_layout_launches_a_group_per_row():
    from types import SimpleNamespace

    from autosage_cli.backends.native_spmm import LAYOUTS

    graph = SimpleNamespace(n_rows=1000, indptr="indptr", indices="indices")
    plan = SimpleNamespace(native_schedule=sched.get("spmm.warprow.g8.v4.t256.u4"), graph=graph, k=16, launches=[],
                           kernel="kernel")
    LAYOUTS["rows"](plan)
    [(_, grid, block, head, _, tail)] = plan.launches
    assert (grid, block) == ((125, 1, 1), (256, 1, 1))  # a warp per row: 8 rows per block
    assert [int(head[0]), int(head[1]), head[2], head[3]] == [1000, 16, "indptr", "indices"]
    assert tail == ()


def test_extra_families_may_not_replace_a_real_one():
    with pytest.raises(ValueError, match="exist already"):
        with sched.extra_schedules(families={"subwarp": ROWPAIR}):
            pass
    assert FAMILIES["subwarp"].source_file == "spmm_subwarp.cu"


def test_a_stream_plan_refuses_a_graph_whose_last_window_passes_int32_offsets():
    from types import SimpleNamespace

    from autosage_cli.backends.native_spmm import INT32_MAX, LAYOUTS
    from autosage_cli.errors import AutosageError

    s = next(s for s in sched.registry("spmm") if s.family == "stream")
    graph = SimpleNamespace(n_rows=1000, nnz=INT32_MAX - s.threads * s.unroll + 1, indptr="indptr",
                            indices="indices")
    plan = SimpleNamespace(native_schedule=s, graph=graph, k=s.tile, launches=[], kernel="kernel")
    with pytest.raises(AutosageError, match="int32 edge offsets"):
        LAYOUTS["stream"](plan)
    assert plan.launches == []
