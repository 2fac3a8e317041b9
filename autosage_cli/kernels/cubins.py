"""The cubins built at install time (autosage_cli/prebuild.py), at run time: loading a module's
kernels from them instead of compiling with NVRTC (kernels/compile.py asks here first).

A kernel is taken from the prebuilt cubins only when everything NVRTC would compile it from
matches: the same hash of every cuda/ source, the same options (less the include path), this
GPU's architecture, and a name the build matched to the expression. Anything else (no cubins,
another architecture, an edited kernel, AUTOSAGE_PREBUILT=0) returns None, and the caller
compiles as before. Loading is per cubin file, once per process.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from ..cuda_sources import sources_hash
from .. import prebuild

PREBUILT_DIR = Path(os.environ.get("AUTOSAGE_PREBUILT_DIR", Path(__file__).resolve().parents[1] / "_cubins"))


def read_manifest(directory: Path = PREBUILT_DIR) -> dict | None:
    """The manifest of a cubin directory, or None where there is none."""
    path = Path(directory) / prebuild.MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def is_current(manifest: dict) -> bool:
    """Whether the cubins were built from the cuda/ sources of this tree."""
    return manifest.get("sources_hash") == sources_hash()


def ptxas_reports(arch: str, directory: Path = PREBUILT_DIR) -> dict:
    """(file, expression) -> (options, (registers, spill store bytes, spill load bytes, stack frame
    bytes)): ptxas' report of each kernel in the current cubins for `arch` ("90"), as the build
    recorded it; {} where there are none or they were built from other sources."""
    manifest = read_manifest(directory)
    if manifest is None or not is_current(manifest):
        return {}
    return {(m["file"], expr): (m["options"], tuple(report))
            for m in manifest.get("archs", {}).get(arch, {}).values()
            for expr, report in m.get("ptxas", {}).items()}


def enabled() -> bool:
    return os.environ.get("AUTOSAGE_PREBUILT", "1") != "0"


class Prebuilt:
    """The manifest of one cubin directory, and the cubins loaded from it in this process."""

    def __init__(self, directory: Path = PREBUILT_DIR):
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._modules: dict[str, object] = {}
        self._index: dict[str, dict] = {}   # per architecture
        self.reason = ""

    def _load_index(self, arch: str) -> dict:
        """(file, expression) -> (cubin, mangled name, options) for `arch`, or {} with a reason."""
        manifest = read_manifest(self.directory)
        if manifest is None:
            self.reason = f"no prebuilt kernels in {self.directory}"
            return {}
        if not is_current(manifest):
            self.reason = "the prebuilt kernels were built from other cuda/ sources"
            return {}
        modules = manifest.get("archs", {}).get(arch)
        if not modules:
            self.reason = f"no prebuilt kernels for sm_{arch} (built for {sorted(manifest.get('archs', {}))})"
            return {}
        self.reason = ""
        return {(m["file"], expr): (m["cubin"], mangled, m["options"])
                for m in modules.values() for expr, mangled in m["names"].items()}

    def index(self, arch: str) -> dict:
        with self._lock:
            if arch not in self._index:
                self._index[arch] = self._load_index(arch)
            return self._index[arch]

    def entries(self, source_file: str, expressions, options: list[str], arch: str) -> list | None:
        """The (cubin, mangled) of every expression, or None when one is missing or was built
        with other `options` than NVRTC would get now (less the include path)."""
        index = self.index(arch)
        found = [index.get((source_file, e)) for e in expressions]
        if not all(found) or any(f[2] != options for f in found):
            return None
        return [(cubin, mangled) for cubin, mangled, _ in found]

    def functions(self, source_file: str, expressions, options: list[str]) -> dict | None:
        """{expression: kernel} loaded from the cubins, or None (compile with NVRTC)."""
        import cupy

        if not enabled():
            return None
        arch = cupy.cuda.Device().compute_capability
        entries = self.entries(source_file, expressions, options, arch)
        if entries is None:
            return None
        out = {}
        for expr, (cubin, mangled) in zip(expressions, entries):
            with self._lock:
                module = self._modules.get(cubin)
                if module is None:
                    module = self._modules[cubin] = cupy.RawModule(path=str(self.directory / cubin))
            out[expr] = module.get_function(mangled)
        return out


_default = Prebuilt()


def functions(source_file: str, expressions, options: list[str]) -> dict | None:
    return _default.functions(source_file, expressions, options)


def status() -> dict:
    """What `autosage info` shows: where the cubins are, for which architectures, how many
    modules, and whether they match these sources."""
    manifest = read_manifest()
    if manifest is None:
        return {"path": str(PREBUILT_DIR), "modules": 0, "kernels": 0, "archs": [], "current": False}
    archs = manifest.get("archs", {})
    return {"path": str(PREBUILT_DIR), "modules": sum(len(m) for m in archs.values()),
            "kernels": sum(len(m["names"]) for mods in archs.values() for m in mods.values()),
            "archs": sorted(archs), "current": is_current(manifest)}

