"""The Python entry points a new user meets first: `python -m autosage_cli` is the `autosage`
command, `AutosageError` comes from the package itself, and the README's CuPy example on a machine
without a GPU ends in that error, in one line, instead of a CuPy traceback (CPU)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import autosage_cli
from autosage_cli import capability
from autosage_cli.errors import AutosageError

ROOT = Path(__file__).resolve().parents[1]


def python(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_error_is_exported_by_the_package():
    assert autosage_cli.AutosageError is AutosageError and "AutosageError" in autosage_cli.__all__


def test_python_dash_m_runs_the_command_and_its_errors(tmp_path):
    proc = python("-m", "autosage_cli", "inspect", "--dataset", "no-such-graph", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("Error: unknown dataset 'no-such-graph'")


def test_a_dry_run_warns_of_nothing_deprecated(tmp_path):
    """Deprecation warnings as errors (Click 9 drops click.get_text_stream, which the dry-run table
    used): the dry run still succeeds."""
    proc = python("-W", "error::DeprecationWarning", "-m", "autosage_cli", "tune", "datasets/cora.mtx.gz",
                  "--width", "64", "--dry-run", "--cache", str(tmp_path / "decisions.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dry run" in proc.stdout and "internal error" not in proc.stderr


def _readme_cupy_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Python API"):]
    body = section[section.index("```python\n") + len("```python\n"):]
    return body[:body.index("\n```")]


@pytest.mark.skipif(capability.gpu_available(), reason="a GPU is visible: tests/test_readme_gpu.py runs it")
def test_the_readme_cupy_example_without_a_gpu_is_one_autosage_error():
    code = _readme_cupy_example()
    assert "ag.spmm(A, B)" in code
    wrapper = ("import autosage_cli\n"
               "try:\n"
               f"    exec(compile({code!r}, 'README', 'exec'))\n"
               "except autosage_cli.AutosageError as exc:\n"
               "    print(f'AutosageError: {exc}')\n")
    proc = python("-c", wrapper)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [line] = proc.stdout.splitlines()
    assert line.startswith("AutosageError: autosage_cli needs a CUDA GPU: ")


def test_the_torch_package_without_torch_says_what_to_install(tmp_path):
    """torch is hidden from the import system (this runs where it is installed too): the error is
    the ModuleNotFoundError for torch that `except ImportError` and importorskip expect, with a
    message that says what to install."""
    code = ("import sys\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "import autosage_cli\n"
            "try:\n"
            "    import autosage_cli.torch\n"
            "except ModuleNotFoundError as exc:\n"
            "    print(exc.name, '|', exc)\n")
    proc = python("-W", "error", "-c", code, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    name, message = proc.stdout.strip().split(" | ")
    assert name == "torch" and "pip install torch" in message
