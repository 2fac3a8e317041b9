"""The torch path's memo of a plan's packed launches (torch/cuda.py `_packed_launches`), on the CPU
with CuPy's contexts faked: a plan packs once per argument tuple, and a copy of a plan (what
native_spmm's rebind makes for another graph, __dict__ included) packs its own launches instead of
launching the original's on the original's graph."""
from __future__ import annotations

import contextlib
import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from autosage_cli.torch import cuda  # noqa: E402


class FakePlan:
    def __init__(self, graph):
        self.graph, self.packs = graph, 0

    def packed(self, per_call_values=False):
        self.packs += 1
        return [("launch on", self.graph, per_call_values)]


@pytest.fixture(autouse=True)
def no_cupy_context(monkeypatch):
    monkeypatch.setattr(cuda, "_on_torch_stream", lambda device: contextlib.nullcontext())


def test_a_plan_packs_once_per_argument_tuple():
    plan, dev = FakePlan("g1"), torch.device("cpu")
    assert cuda._packed_launches(plan, dev, False) == [("launch on", "g1", False)]
    assert cuda._packed_launches(plan, dev, False) == [("launch on", "g1", False)]
    assert cuda._packed_launches(plan, dev, True) == [("launch on", "g1", True)]
    assert plan.packs == 2


def test_a_copied_plan_packs_for_its_own_graph():
    plan, dev = FakePlan("g1"), torch.device("cpu")
    cuda._packed_launches(plan, dev, False)
    rebound = copy.copy(plan)            # the memo travels in the copy's __dict__
    rebound.graph = "g2"
    assert cuda._packed_launches(rebound, dev, False) == [("launch on", "g2", False)]
    assert cuda._packed_launches(plan, dev, False) == [("launch on", "g1", False)]
    assert cuda._packed_launches(rebound, dev, False) == [("launch on", "g2", False)]


def test_a_plan_without_packed_launches_runs_through_cupy():
    class Vendor:
        pass
    assert cuda._packed_launches(Vendor(), torch.device("cpu")) is None
