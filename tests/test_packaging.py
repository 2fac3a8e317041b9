"""A built (non-editable) install works away from the source tree: the wheel carries the kernel
sources and their module listing inside the package (setup.py -> autosage_cli/_cuda), and the
installed package reads them there, with the same sources hash as the tree; it carries the shipped
graphs and their registry too (autosage_cli/_datasets), so `autosage inspect --dataset cora` runs
from anywhere; an sdist carries cuda/ and datasets/ (MANIFEST.in) for the wheel built from it. The
builds use the setuptools installed (the test extra's), without a download, and pip warns of no
deprecated metadata (CPU)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
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
SHIPPED = [p.name for p in sorted((ROOT / "datasets").glob("*.mtx.gz"))] + ["registry.json", "README.md"]


def setuptools_floor() -> tuple[int, ...]:
    """The setuptools version build-system.requires asks for (pyproject.toml)."""
    found = re.search(r'requires = \["setuptools>=([\d.]+)"\]', (ROOT / "pyproject.toml").read_text())
    assert found, "pyproject.toml: build-system.requires names no setuptools floor"
    return tuple(int(x) for x in found.group(1).split("."))


def require_build_tools() -> None:
    """Skip, saying why, where the installed setuptools cannot build this project (the test extra
    installs one that can: `pip install -e '.[test]'`)."""
    try:
        have = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("setuptools is not installed (the test extra brings it)")
    if tuple(int(x) for x in re.findall(r"\d+", have)[:2]) < setuptools_floor()[:2]:
        pytest.skip(f"setuptools {have} is older than the build needs "
                    f"(>={'.'.join(map(str, setuptools_floor()))}; the test extra brings it)")


def clean_copy(src: Path) -> Path:
    """What the build reads, without the tree's own build/ folder (it could hand a stale package to
    setuptools), cubins, packaged copies or downloaded datasets."""
    for name in SOURCE_FILES:
        shutil.copyfile(ROOT / name, src / name)
    shutil.copytree(ROOT / "cuda", src / "cuda")
    (src / "datasets").mkdir()
    for name in SHIPPED:
        shutil.copyfile(ROOT / "datasets" / name, src / "datasets" / name)
    shutil.copytree(ROOT / "autosage_cli", src / "autosage_cli",
                    ignore=shutil.ignore_patterns("__pycache__", "_cubins", "_cuda", "_datasets"))
    return src


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """A wheel built from a clean copy, without cubins (the sources are the point here), and what
    pip said while building it."""
    require_build_tools()
    src = clean_copy(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheel")
    env = dict(os.environ, AUTOSAGE_BUILD_CUBINS="0")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(src)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (found,) = out.glob("autosage-*.whl")
    return found, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed into a folder of its own (its dependencies are this environment's)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    return target


def run_installed(target: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`args` run by the installed package, away from the source tree, with no override of where
    its kernels or datasets are."""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOSAGE_CUDA_DIR", "AUTOSAGE_DATASETS_DIR")}
    env["PYTHONPATH"] = str(target)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_the_build_warns_of_no_deprecated_metadata(built):
    _, said = built
    assert not re.search(r"deprecat", said, re.IGNORECASE), said[-3000:]


def test_the_wheel_carries_every_kernel_source_and_the_listing(wheel):
    tree = {p.name: p.read_bytes() for p in cuda_sources.SOURCE_TREE_CUDA.iterdir()
            if p.suffix in (".cu", ".cuh") or p.name == prebuild.LISTING}
    with zipfile.ZipFile(wheel) as z:
        packed = {Path(n).name: z.read(n) for n in z.namelist() if n.startswith("autosage_cli/_cuda/")}
    assert set(packed) == set(tree) and prebuild.LISTING in packed
    assert all(packed[name] == tree[name] for name in tree)


def test_the_wheel_carries_the_shipped_datasets(wheel):
    with zipfile.ZipFile(wheel) as z:
        packed = {Path(n).name: z.read(n) for n in z.namelist() if n.startswith("autosage_cli/_datasets/")}
    assert sorted(packed) == sorted(SHIPPED)
    assert all(packed[name] == (ROOT / "datasets" / name).read_bytes() for name in SHIPPED)


def test_the_installed_package_reads_its_own_sources(installed, tmp_path):
    target = installed
    probe = ("import json; from autosage_cli import cuda_sources as c; "
             "print(json.dumps([str(c.CUDA_DIR), c.sources_hash(), len(c.kernel_source('spmm_split.cu'))]))")
    proc = run_installed(target, ["-c", probe], tmp_path)   # away from the source tree
    assert proc.returncode == 0, proc.stderr[-2000:]
    cuda_dir, hash_, size = json.loads(proc.stdout)
    assert Path(cuda_dir) == target / "autosage_cli" / "_cuda"
    assert hash_ == prebuild.sources_hash(cuda_sources.SOURCE_TREE_CUDA)
    assert size == len((cuda_sources.SOURCE_TREE_CUDA / "spmm_split.cu").read_text())


def test_the_installed_command_finds_the_shipped_datasets(installed, tmp_path):
    """The README's first command without a GPU, run from a wheel outside the tree: cora is the
    package's copy, and the registry's other names (OGB, reddit) are known too."""
    proc = run_installed(installed, ["-m", "autosage_cli", "inspect", "--dataset", "cora", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert (doc["n_rows"], doc["nnz"]) == (2708, 13264)
    proc = run_installed(installed, ["-m", "autosage_cli", "inspect", "--dataset", "ogbn-products",
                                     "--root", str(tmp_path)], tmp_path)
    assert proc.returncode == 2 and "edge.csv.gz not found" in proc.stderr, proc.stderr


def test_the_sdist_carries_the_kernel_sources(tmp_path):
    """An sdist is what a wheel may later be built from: without cuda/ in it, that build fails
    (prebuild.copy_sources) instead of installing a package with no kernels."""
    require_build_tools()
    src = tmp_path / "src"
    src.mkdir()
    clean_copy(src)
    (src / "datasets" / "ogbn_products").mkdir()   # a download under the default --root stays out
    (src / "datasets" / "ogbn_products" / "edge.csv.gz").write_bytes(b"")
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")],
                          cwd=src, capture_output=True, text=True, env=dict(os.environ, AUTOSAGE_BUILD_CUBINS="0"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (sdist,) = (tmp_path / "dist").glob("autosage-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in tar.getnames() if len(Path(n).parts) > 1}
    wanted = {f"cuda/{p.name}" for p in (ROOT / "cuda").iterdir()
              if p.suffix in (".cu", ".cuh") or p.name == prebuild.LISTING}
    wanted |= {f"datasets/{name}" for name in SHIPPED}
    assert wanted <= names, sorted(wanted - names)
    assert not any(n.startswith("datasets/ogbn_") for n in names)


def test_copying_from_a_tree_without_kernels_fails(tmp_path):
    with pytest.raises(FileNotFoundError, match="no kernel sources"):
        prebuild.copy_sources(tmp_path, tmp_path / "_cuda")
    assert not (tmp_path / "_cuda").exists()
    with pytest.raises(FileNotFoundError, match="no dataset registry"):
        prebuild.copy_datasets(tmp_path, tmp_path / "_datasets")
    assert not (tmp_path / "_datasets").exists()
