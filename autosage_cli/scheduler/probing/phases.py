"""Where a probe's wall time goes: host timers around its phases, summed per phase.

A phase that starts inside another is taken out of the outer one (an import of torch inside a
vendor's preparation counts as imports, not as vendor preparation), so the phases never overlap
and their sum is at most the probe's wall time; what is left over (closing plans, the loop itself)
is `other`. Phases that end on the GPU end on a synchronisation the measurer makes anyway (the
verification run, CUDA-event timing, a plan's preparation, the inputs), so no phase adds one.

The imports phase is the first import, in this process, of an optional vendor library
(`OPTIONAL_LIBRARIES`) while the clock is installed: a finder on `sys.meta_path` wraps those
packages' loaders for that long and times their execution (the library's own imports included).
"""
from __future__ import annotations

import importlib.abc
import sys
import time
from contextlib import contextmanager

# The phases, in the order the tuning line and the bench columns list them.
PHASES = ("upload", "inputs", "reference", "vendor_prepare", "vendor_timing", "native_prepare",
          "native_timing", "verify", "imports")
OPTIONAL_LIBRARIES = ("torch", "nvmath", "torch_geometric")

# How the tuning line names each phase (commands/tune.py prints one line of them).
LABELS = {"upload": "upload", "inputs": "inputs", "reference": "reference",
          "vendor_prepare": "vendor prepare", "vendor_timing": "vendor timing",
          "native_prepare": "native prepare", "native_timing": "native timing",
          "verify": "verify", "imports": "imports", "other": "other"}


def timing_key(phase: str) -> str:
    """The key of `phase` in a tune's timings and the bench row's column: probe_<phase>_ms."""
    return f"probe_{phase}_ms"


class PhaseClock:
    """Exclusive wall-clock ms per phase. Not thread-safe: the probe's phases run on one thread."""

    def __init__(self):
        self.ms = dict.fromkeys(PHASES, 0.0)
        self._stack: list[list] = []     # [phase, start, ms of nested phases]

    @contextmanager
    def phase(self, name: str):
        if name not in self.ms:
            raise ValueError(f"unknown probe phase {name!r}")
        frame = [name, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            elapsed = (time.perf_counter() - frame[1]) * 1e3
            self.ms[name] += elapsed - frame[2]
            if self._stack:
                self._stack[-1][2] += elapsed

    def add(self, other: "PhaseClock") -> "PhaseClock":
        for name, ms in other.ms.items():
            self.ms[name] += ms
        return self

    def timings(self, probe_ms: float | None = None) -> dict:
        """{probe_<phase>_ms: ms}; with the probe's wall ms, `probe_other_ms` too (never < 0)."""
        out = {timing_key(name): ms for name, ms in self.ms.items()}
        if probe_ms is not None:
            out[timing_key("other")] = max(0.0, probe_ms - sum(self.ms.values()))
        return out

    @contextmanager
    def timing_imports(self, packages=None):
        """While inside: the first import of any of `packages` (OPTIONAL_LIBRARIES) is timed as
        the imports phase."""
        finder = _TimedImports(self, tuple(OPTIONAL_LIBRARIES if packages is None else packages))
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            try:
                sys.meta_path.remove(finder)
            except ValueError:
                pass


def summary(timings: dict) -> str:
    """'inputs 3 ms, vendor prepare 40 ms, ...': the phases of a tune's timings that took time."""
    parts = [f"{LABELS[name]} {timings[timing_key(name)]:.0f} ms" for name in (*PHASES, "other")
             if timings.get(timing_key(name), 0.0) >= 0.5]
    return ", ".join(parts)


class _TimedImports(importlib.abc.MetaPathFinder):
    """Finds the named top-level packages with the finders after it and times their loading."""

    def __init__(self, clock: PhaseClock, packages: tuple[str, ...]):
        self.clock, self.packages = clock, packages

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.packages:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _TimedLoader(spec.loader, self.clock)
                return spec
        return None


class _TimedLoader(importlib.abc.Loader):
    """The package's own loader, its module execution timed as the imports phase."""

    def __init__(self, loader, clock: PhaseClock):
        self._loader, self._clock = loader, clock

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The module keeps its real loader (resource readers, reloads, pickling see the original).
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        with self._clock.phase("imports"):
            self._loader.exec_module(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)
