"""What a tune will need from the machine, started while the graph loads.

A first `autosage tune` in a new process pays, besides reading the graph (pandas, SciPy, parsing),
for CUDA's initialisation (CuPy, the device, its context: about 0.3 s on the H200), the machine
description its cache key records (cuSPARSE's version needs a handle: 0.1-0.15 s) and, for SDDMM and
attention, importing the cuSPARSE binding of the vendor path (nvmath-python). None of these
depends on the graph, and reading the graph leaves the GPU and the driver idle, so `Prefetch` runs
them on one thread meanwhile. The graph is still validated before anything is asked of the GPU in
the caller's own order: a failure here is ignored (the caller's own calls meet it again and report
it), and leaving the `with` block joins the thread whatever happened, so no thread outlives the
step it served.
"""
from __future__ import annotations

import threading




class Prefetch:
    """`with Prefetch(op) as ahead:` runs the device's initialisation, the machine description
    (`ahead.machine()`: tune's device_info and software_info, {} unless both were found) and the
    op's vendor imports on a thread for the duration of the block (`enabled=False`: nothing runs)."""

    def __init__(self, op: str, enabled: bool = True):
        self.op, self.enabled = op, enabled
        self.device_info: dict | None = None
        self.software_info: dict | None = None
        self._thread = threading.Thread(target=self._run, name="autosage-prefetch", daemon=True)

    def __enter__(self) -> Prefetch:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        if self.enabled:
            self._thread.join()
        return False

    def machine(self) -> dict:
        """The machine description found (tune's device_info and software_info), or {}."""
        if self.device_info is None or self.software_info is None:
            return {}
        return {"device_info": self.device_info, "software_info": self.software_info}

    def _run(self) -> None:
        try:
            from ..capability import gpu_status

            if not gpu_status()[0]:          # CuPy's import and the device count, remembered
                return
            from .tune import machine

            # (cuSPARSE's version takes a handle, which creates the device's context)
            self.device_info, self.software_info = machine()
            from .. import ops as op_specs

            for load in op_specs.get(self.op).vendor_imports:   # the op's vendor libraries
                load()
        except Exception:   # the tune's own calls meet the same failure and report it
            pass
