"""environment: device, software, commit and host, guarded so nothing raises without a GPU."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from autosage_cli import environment


def test_software_info_without_gpu(monkeypatch):
    monkeypatch.setattr(environment, "gpu_status", lambda: (False, "no CUDA device visible"))
    info = environment.software_info()
    assert set(info) == {"driver", "cuda_runtime", "cupy", "cusparse", "python", "numpy", "scipy",
                         "cuda_sources"}
    assert info["numpy"] == np.__version__ and info["python"].count(".") == 2
    assert info["driver"] is None and info["cuda_runtime"] is None and info["cusparse"] is None
    assert environment.device_info() is None


def test_nothing_raises_when_cupy_is_not_importable(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` now raises ImportError
    monkeypatch.setattr(environment, "gpu_status", lambda: (False, "CuPy is not importable"))
    env = environment.environment()
    assert env["device"] is None and env["software"]["cupy"] is None
    assert env["gpu_status"] == "CuPy is not importable"


def test_cuda_version_decoding():
    assert environment._cuda_version(13020) == "13.2"
    assert environment._cuda_version(12080) == "12.8"


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin:/usr/local/bin"})


def test_git_commit_clean_dirty_and_outside(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.txt").write_text("a")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-qm", "x")
    monkeypatch.setattr(environment, "REPO_DIR", repo)
    clean = environment.git_commit()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()
    assert clean == head
    (repo / "untracked.txt").write_text("u")  # untracked files do not make the tree dirty
    assert environment.git_commit() == head
    (repo / "f.txt").write_text("b")
    assert environment.git_commit() == f"{head}-dirty"
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.setattr(environment, "REPO_DIR", outside)
    assert environment.git_commit() == "unknown"


def test_environment_document():
    env = environment.environment()
    assert set(env) == {"device", "gpu_status", "software", "commit", "hostname", "timestamp"}
    assert env["timestamp"].endswith("+00:00") and env["hostname"]


@pytest.mark.gpu
def test_device_and_cuda_versions_on_a_gpu():
    device = environment.device_info()
    assert device is not None and device["sms"] > 0 and device["memory_bytes"] > 2**30
    assert device["l2_bytes"] > 0 and device["compute_capability"].count(".") == 1
    info = environment.software_info()
    assert info["driver"] and info["cuda_runtime"] and info["cupy"]
    assert info["cusparse"] is not None and int(info["cusparse"]) > 10000
