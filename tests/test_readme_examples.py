"""The README's command examples on a machine without a GPU (tests/readme_examples.py classifies
them): those that need none run, those that name the user's own file stop in one line naming it,
and the GPU ones stop in one line for want of a GPU after every option and input was checked (so a
typo in an example fails here). tests/test_readme_gpu.py runs the GPU ones verbatim."""
from __future__ import annotations

import json
import os
import shlex

import pytest

from cli_helpers import run_cli
from readme_examples import NOT_RUN, ON_THE_GPU, RUN_HERE, USER_INPUT, readme_commands, workspace

NO_GPU = "needs a CUDA GPU: no CUDA device visible"


def test_every_readme_example_is_exercised():
    on_the_gpu = [c for c, _ in ON_THE_GPU]
    assert set(RUN_HERE) | set(USER_INPUT) | set(on_the_gpu) | set(NOT_RUN) == set(readme_commands())
    # run here, run on the GPU, or run by no test: one of the three
    assert len(RUN_HERE) + len(on_the_gpu) + len(NOT_RUN) == len(set(RUN_HERE) | set(on_the_gpu) | set(NOT_RUN))


@pytest.fixture
def here(tmp_path, monkeypatch):
    """The README's working directory: datasets/ beside, a home of its own."""
    env = workspace(tmp_path)
    monkeypatch.setenv("HOME", env["HOME"])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(command: str):
    """`command` as a shell would pass it (words split, ~ expanded), through autosage's entry point."""
    words = [os.path.expanduser(w) for w in shlex.split(command)]
    assert words[0] == "autosage"
    return run_cli(*words[1:])


@pytest.mark.parametrize("command", RUN_HERE)
def test_examples_that_need_no_gpu_run(here, command):
    result = run(command)
    assert result.exit_code == 0, result.stderr
    if "--json" in command:
        assert isinstance(json.loads(result.stdout), dict)
    if "--out" in command:
        assert (here / command.split("--out ")[1].split()[0]).stat().st_size > 0


@pytest.mark.parametrize("command", sorted(USER_INPUT))
def test_examples_that_name_the_users_files_say_what_is_missing(here, command):
    result = run(command)
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: ") and USER_INPUT[command] in line


def _missing_training_libraries() -> str | None:
    """Why `bench --suite training|minibatch` stops before its GPU check here: they check torch and
    PyG first."""
    import importlib.util

    missing = [m for m in ("torch", "torch_geometric") if importlib.util.find_spec(m) is None]
    return f"{' and '.join(missing)} not installed: the training suite refuses first" if missing else None


def _gpu_here(command: str):
    """A GPU example as a test case; one that needs an optional library skips without it, saying so."""
    why = _missing_training_libraries() if ("--suite training" in command or "--suite minibatch" in command) else None
    return pytest.param(command, marks=pytest.mark.skip(reason=why)) if why else command


GPU_HERE = [_gpu_here(c) for c in sorted([c for c, why in ON_THE_GPU if why == "cheap"] + list(NOT_RUN))]


@pytest.mark.parametrize("command", GPU_HERE)
def test_gpu_examples_stop_only_for_want_of_a_gpu(here, command):
    result = run(command)
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: autosage ") and NO_GPU in line
