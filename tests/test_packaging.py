"""A built (non-editable) install works away from the source tree: the wheel carries the kernel
sources and their module listing inside the package (setup.py -> autosage_cli/_cuda), and the
installed package reads them there, with the same sources hash as the tree; an sdist carries cuda/
(MANIFEST.in) for the wheel built from it (CPU)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from autosage_cli import cuda_sources, prebuild

ROOT = Path(__file__).resolve().parents[1]
SOURCE_FILES = ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a clean copy of what the build reads (the tree's own build/ folder could
    hand a stale package to setuptools), without cubins: the sources are the point here."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in SOURCE_FILES:
        shutil.copyfile(ROOT / name, src / name)
    shutil.copytree(ROOT / "cuda", src / "cuda")
    shutil.copytree(ROOT / "autosage_cli", src / "autosage_cli",
                    ignore=shutil.ignore_patterns("__pycache__", "_cubins", "_cuda"))
    env = dict(os.environ, AUTOSAGE_BUILD_CUBINS="0")
    # Build with the setuptools at hand where there is one (no download); else pip's isolated build.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation,
                           "-q", "-w", str(out), str(src)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (found,) = out.glob("autosage-*.whl")
    return found


def test_the_wheel_carries_every_kernel_source_and_the_listing(wheel):
    tree = {p.name: p.read_bytes() for p in cuda_sources.SOURCE_TREE_CUDA.iterdir()
            if p.suffix in (".cu", ".cuh") or p.name == prebuild.LISTING}
    with zipfile.ZipFile(wheel) as z:
        packed = {Path(n).name: z.read(n) for n in z.namelist() if n.startswith("autosage_cli/_cuda/")}
    assert set(packed) == set(tree) and prebuild.LISTING in packed
    assert all(packed[name] == tree[name] for name in tree)


def test_the_installed_package_reads_its_own_sources(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    probe = ("import json; from autosage_cli import cuda_sources as c; "
             "print(json.dumps([str(c.CUDA_DIR), c.sources_hash(), len(c.kernel_source('spmm_split.cu'))]))")
    env = {k: v for k, v in os.environ.items() if k != "AUTOSAGE_CUDA_DIR"}
    env["PYTHONPATH"] = str(target)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                          cwd=tmp_path)   # away from the source tree
    assert proc.returncode == 0, proc.stderr[-2000:]
    cuda_dir, hash_, size = json.loads(proc.stdout)
    assert Path(cuda_dir) == target / "autosage_cli" / "_cuda"
    assert hash_ == prebuild.sources_hash(cuda_sources.SOURCE_TREE_CUDA)
    assert size == len((cuda_sources.SOURCE_TREE_CUDA / "spmm_split.cu").read_text())


def test_the_sdist_carries_the_kernel_sources(tmp_path):
    """An sdist is what a wheel may later be built from: without cuda/ in it, that build fails
    (prebuild.copy_sources) instead of installing a package with no kernels."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCE_FILES:
        shutil.copyfile(ROOT / name, src / name)
    shutil.copytree(ROOT / "cuda", src / "cuda")
    shutil.copytree(ROOT / "autosage_cli", src / "autosage_cli",
                    ignore=shutil.ignore_patterns("__pycache__", "_cubins", "_cuda"))
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")],
                          cwd=src, capture_output=True, text=True, env=dict(os.environ, AUTOSAGE_BUILD_CUBINS="0"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (sdist,) = (tmp_path / "dist").glob("autosage-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in tar.getnames() if len(Path(n).parts) > 1}
    wanted = {f"cuda/{p.name}" for p in (ROOT / "cuda").iterdir()
              if p.suffix in (".cu", ".cuh") or p.name == prebuild.LISTING}
    assert wanted <= names, sorted(wanted - names)


def test_copying_from_a_tree_without_kernels_fails(tmp_path):
    with pytest.raises(FileNotFoundError, match="no kernel sources"):
        prebuild.copy_sources(tmp_path, tmp_path / "_cuda")
    assert not (tmp_path / "_cuda").exists()
