"""The kernel source tree: where the `cuda/` folder is, a file's text, and the hash of every source
(part of the decision cache's software key and of `autosage info`). A leaf: reading the sources
needs neither CuPy nor the compiler, so `environment` reports the hash without importing `kernels`."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import AutosageError
from . import prebuild   # standard library only (setup.py loads it at install time)

# A built (non-editable) install carries a copy of cuda/ inside the package (setup.py writes it
# to _cuda/ at build time); a source tree or an editable install reads the top-level cuda/ itself.
PACKAGED_CUDA = Path(__file__).resolve().parent / "_cuda"
SOURCE_TREE_CUDA = Path(__file__).resolve().parents[1] / "cuda"
CUDA_DIR = Path(os.environ.get("AUTOSAGE_CUDA_DIR")
                or (PACKAGED_CUDA if PACKAGED_CUDA.is_dir() else SOURCE_TREE_CUDA))


def kernel_source(filename: str) -> str:
    path = CUDA_DIR / filename
    if not path.is_file():
        raise AutosageError(f"kernel source {path} not found (set AUTOSAGE_CUDA_DIR to the cuda/ folder)")
    return path.read_text()


def sources_hash() -> str:
    """Hash of every file under cuda/: part of the cache's software key (a changed kernel re-tunes)."""
    return prebuild.sources_hash(CUDA_DIR)
