"""Install-time kernels: where nvcc is present, `pip install` builds the CUDA kernels' cubins
(autosage_cli/prebuild.py, standard library only, loaded here by path because pip's build
environment holds setuptools alone) into the package's `_cubins/`, so that a first tune loads its
kernels instead of compiling them. Without nvcc nothing is built: kernels compile on first use.
AUTOSAGE_BUILD_CUBINS=0 skips the build; AUTOSAGE_CUBIN_ARCHS (e.g. "80,90") picks the
architectures (default sm_90). A built (non-editable) install also carries the kernel sources, the
top-level cuda/, as the package's `_cuda/`, and the shipped graphs with their registry, datasets/,
as `_datasets/`. Everything else is in pyproject.toml."""
import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _prebuild():
    spec = importlib.util.spec_from_file_location("autosage_prebuild", HERE / "autosage_cli" / "prebuild.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithCubins(build_py):
    def run(self):
        super().run()
        prebuild = _prebuild()
        # An editable install imports the package from the source tree (cuda/ beside it, the
        # cubins into it); a built one carries its own copy of the kernel sources.
        root = HERE if self.editable_mode else Path(self.build_lib)
        if not self.editable_mode:
            prebuild.copy_sources(HERE / "cuda", root / "autosage_cli" / "_cuda")
            prebuild.copy_datasets(HERE / "datasets", root / "autosage_cli" / "_datasets")
        if os.environ.get("AUTOSAGE_BUILD_CUBINS", "1") == "0":
            return
        archs = tuple(a.strip().removeprefix("sm_") for a in
                      os.environ.get("AUTOSAGE_CUBIN_ARCHS", ",".join(prebuild.DEFAULT_ARCHS)).split(",") if a.strip())
        try:
            prebuild.build(HERE / "cuda", root / "autosage_cli" / "_cubins", archs, log=self.announce_cubins)
        except Exception as exc:   # never fail an install over them: kernels then compile on first use
            self.announce_cubins(f"autosage: install-time cubins not built ({type(exc).__name__}: {exc})")

    def announce_cubins(self, message):
        # stderr, flushed line by line: pip shows the build's output with -v, and turns its spinner
        # on each line without it
        print(message, file=sys.stderr, flush=True)


setup(cmdclass={"build_py": BuildPyWithCubins})
