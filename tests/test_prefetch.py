"""The work a tune starts while its graph loads (scheduler/prefetch.py): it runs on one thread,
never outlives the block, hands over the machine description only when it found it, and keeps
its failures to itself (the tune meets them again and reports them)."""
from __future__ import annotations

import dataclasses
import threading

from autosage_cli import capability, ops
from autosage_cli.scheduler import prefetch, tune as tune_mod


def test_without_a_gpu_nothing_is_found_and_the_thread_is_joined(monkeypatch):
    monkeypatch.setattr(capability, "gpu_status", lambda: (False, "no CUDA device visible"))
    with prefetch.Prefetch("sddmm") as ahead:
        pass
    assert not ahead._thread.is_alive() and ahead.machine() == {}


def test_the_machine_and_the_op_vendor_imports_are_fetched_on_another_thread(monkeypatch):
    seen = []
    monkeypatch.setattr(capability, "gpu_status", lambda: (True, "ok"))
    monkeypatch.setattr(tune_mod, "machine", lambda: (seen.append(threading.current_thread().name)
                                                      or ({"name": "H200"}, {"cupy": "14"})))
    spec = dataclasses.replace(ops.get("sddmm"), vendor_imports=(lambda: seen.append("vendor import"),))
    monkeypatch.setitem(ops.SPECS, "sddmm", spec)
    with prefetch.Prefetch("sddmm") as ahead:
        pass
    assert seen == ["autosage-prefetch", "vendor import"]
    assert ahead.machine() == {"device_info": {"name": "H200"}, "software_info": {"cupy": "14"}}


def test_a_failure_is_kept_and_the_block_still_joins(monkeypatch):
    monkeypatch.setattr(capability, "gpu_status", lambda: (True, "ok"))
    monkeypatch.setattr(tune_mod, "machine", lambda: 1 / 0)
    with prefetch.Prefetch("spmm") as ahead:
        pass
    assert not ahead._thread.is_alive() and ahead.machine() == {}


def test_disabled_runs_nothing(monkeypatch):
    monkeypatch.setattr(capability, "gpu_status", lambda: (_ for _ in ()).throw(AssertionError("ran")))
    with prefetch.Prefetch("spmm", enabled=False) as ahead:
        pass
    assert not ahead._thread.is_alive() and ahead.machine() == {}
