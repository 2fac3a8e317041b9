"""Which vendors a tune's guardrail measures: for SDDMM, nvmath-python's cusparseSDDMM and the
gather-dot composition, torch's sampled_addmm only where nvmath-python is missing (it runs the same
cuSPARSE SDDMM with its preprocessing on every call, and importing torch costs seconds); the
benchmark's toolkit measures every vendor entry. Decided from which libraries are installed,
without importing them (CPU only)."""
from __future__ import annotations

import importlib.util

import pytest

from autosage_cli import ops
from autosage_cli.backends import sddmm_vendor
from autosage_cli.scheduler.probing.measure import GpuMeasurer


@pytest.fixture
def installed(monkeypatch):
    """installed(*names): find_spec finds exactly these of nvmath and torch."""
    real = importlib.util.find_spec

    def set_installed(*names):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
            object() if name in names else None) if name in ("nvmath", "torch") else real(name, *a))
    return set_installed


@pytest.mark.parametrize("libraries, guardrail, every", [
    (("nvmath", "torch"), ["cusparse-sddmm", "gather-dot"],
     ["cusparse-sddmm", "torch-sampled-addmm", "gather-dot"]),
    (("torch",), ["torch-sampled-addmm", "gather-dot"], ["torch-sampled-addmm", "gather-dot"]),
    (("nvmath",), ["cusparse-sddmm", "gather-dot"], ["cusparse-sddmm", "gather-dot"]),
    ((), ["gather-dot"], ["gather-dot"]),
])
def test_the_sddmm_guardrail_leaves_torch_out_only_where_nvmath_runs(installed, libraries, guardrail, every):
    installed(*libraries)
    assert sddmm_vendor.sddmm_vendor_names(guardrail=True) == guardrail
    assert ops.guardrail_vendor_names("sddmm") == guardrail
    assert GpuMeasurer().vendor_names("sddmm") == guardrail      # what a tune measures
    assert ops.vendor_names("sddmm") == every                     # what the benchmark measures


def test_the_other_ops_guardrail_measures_every_vendor_entry():
    for op in ("spmm", "attention"):
        assert ops.guardrail_vendor_names(op) == ops.vendor_names(op)


def test_the_benchmark_toolkit_measures_every_vendor(installed):
    from autosage_cli.bench.toolkit import GpuToolkit

    installed("nvmath", "torch")
    assert GpuToolkit().vendor_names("sddmm") == ops.vendor_names("sddmm")
