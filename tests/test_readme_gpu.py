"""The README's GPU examples, verbatim, each in a shell, in README order where one reads what
another wrote (the decision cache under the test's home, results/run), in one working directory
beside the repository's datasets/ (tests/readme_examples.py lists them). Minutes of GPU time: the
attention suite and a compile of every kernel are the long ones."""
from __future__ import annotations

import json

import pytest

from readme_examples import ON_THE_GPU, run_verbatim, workspace

pytestmark = pytest.mark.gpu
TIMEOUT_S = 1800


def test_the_readme_gpu_examples_run_verbatim(tmp_path):
    env = workspace(tmp_path)
    failures = []
    for command, _why in ON_THE_GPU:
        done = run_verbatim(command, tmp_path, env, TIMEOUT_S)
        if done.returncode != 0:
            failures.append(f"{command}: exit {done.returncode}: {done.stderr.strip()[-400:]}")
        elif "--json" in command:
            json.loads(done.stdout)        # one JSON object on stdout
    assert not failures, "\n".join(failures)
    assert (tmp_path / ".cache" / "autosage" / "decisions.json").is_file()
    assert (tmp_path / "results" / "run" / "results.csv").is_file()
    assert (tmp_path / "reddit-like.npz").stat().st_size > 0
