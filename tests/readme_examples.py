"""The README's command examples, read from its ```bash blocks, and how the tests exercise each:
run here (no GPU needed), stopped here in one line for want of the user's own file or of a GPU
(after every option was checked), or run verbatim on a GPU machine (tests/test_readme_gpu.py).
Every example must be in exactly one of the tables, so a new one cannot go unexercised."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run here: exit 0.
RUN_HERE = (
    "autosage info --json",
    "autosage inspect datasets/cora.mtx.gz --json",
    "autosage gen power-law --param n=100000 --param nnz=2000000 --param q50=8 --param q90=40 "
    "--param q99=300 --param max=5000 --seed 3 --out g.mtx",
    "autosage reorder datasets/cora.mtx.gz --out cora-rcm.npz --json",
    "autosage reorder --dataset cora --method hubsort --out cora-hub.mtx",
)
# They name a file of the user's (or a dataset to download): here, one line naming what is missing.
USER_INPUT = {
    "autosage inspect edges.txt.gz --symmetrize": "edges.txt.gz",
    "autosage inspect --dataset ogbn-products --root datasets/": "ogbn_products",
    "autosage replay ~/.cache/autosage/decisions.json": "decisions.json",
    "autosage replay ~/.cache/autosage/decisions.json --dry-run": "decisions.json",
    "autosage replay ~/.cache/autosage/decisions.json --dtype float32": "decisions.json",
    "autosage plot results/run/results.csv": "results.csv",
}
# On the GPU machine, in this order (later ones read what earlier ones wrote: the decision cache,
# results/run), each verbatim in one shell; and here, those marked cheap stop in one line for want
# of a GPU (their graphs are small or files, so the checks before it take a second).
ON_THE_GPU = (
    ("autosage tune datasets/cora.mtx.gz --width 64", "cheap"),
    ("autosage reorder datasets/cora.mtx.gz --out cora-rcm.npz --measure --width 64", "cheap"),
    ("autosage tune --dataset reddit-like --width 16 --op sddmm --json", "generates reddit-like first"),
    ("autosage tune --dataset hub-200k --op attention --width 64 --heads 8 --full", "cheap"),
    ("autosage tune datasets/cora.mtx.gz --width 64 --dtype bfloat16", "cheap"),
    ("autosage tune --dataset reddit-like --width 64 --op attention --heads 8 --dry-run",
     "generates reddit-like (no GPU needed, but 115M edges)"),
    ("autosage gen reddit-like --out reddit-like.npz", "115M edges"),
    ("autosage replay ~/.cache/autosage/decisions.json", "after the tunes"),
    ("autosage replay ~/.cache/autosage/decisions.json --dry-run", "after the tunes"),
    ("autosage replay ~/.cache/autosage/decisions.json --dtype float32", "after the tunes"),
    ("autosage compile --op spmm --op sddmm --json", "needs NVRTC"),
    ("autosage compile", "needs NVRTC"),
    ("autosage compile --arch sm_90", "needs NVRTC"),
    ("autosage bench", "cheap"),
    ("autosage bench --dataset cora --dtypes float32,bfloat16", "cheap"),
    ("autosage bench --suite attention --out results/run", "cheap"),
    ("autosage plot results/run/results.csv", "after the attention suite"),
)
# Not run by any test, with the reason; here they stop in one line for want of a GPU.
NOT_RUN = {
    "autosage bench --suite kernels --exhaustive": "hours of GPU time",
    "autosage bench --dataset ogbn-products --ops spmm --widths 16,64": "downloads ogbn-products",
    "autosage bench --dataset products-like-shuffled --ops spmm --widths 16,64 --reorder labelprop,rcm":
        "generates and reorders a 124M-edge graph (the reordering benchmark's own command)",
    "autosage bench --suite training --out results/train": "needs torch and PyG on the GPU; "
                                                           "tests/test_training_suite.py runs the suite",
    "autosage bench --suite training --dataset cora --ops train-gat --repeat 5": "as above",
    "autosage bench --suite training --dtypes float32,bfloat16": "as above",
    "autosage bench --suite training --dataset products-like-shuffled --ops train-gcn --reorder auto,labelprop":
        "as above; tests/test_bench_reorder.py runs --reorder auto on the CPU",
    "autosage bench --suite training --dataset products-like --modes eager": "as above; "
        "tests/test_bench_training_modes.py checks --modes",
    "autosage bench --suite minibatch --dataset products-like --out results/minibatch":
        "needs torch and PyG on the GPU; tests/test_minibatch_suite.py runs the suite",
    "autosage bench --suite minibatch --dataset reddit-like --ops sage,gcn --dtypes float32,bfloat16": "as above",
    "autosage bench --suite minibatch --dataset cora --steps 20 --batch-size 256 --fanouts 10,5": "as above",
}


def readme_commands() -> list[str]:
    """Every `autosage` line of the README's bash blocks, continuations joined, comments dropped
    (the `make` lines are what CI runs itself)."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            command = re.split(r"\s+#", line, maxsplit=1)[0].strip()
            if command.startswith("autosage"):
                commands.append(" ".join(command.split()))
    return commands


def workspace(tmp: Path) -> dict:
    """A working directory whose `datasets/` is the repository's, and an environment whose home is
    that directory (so `~/.cache/autosage` is the test's) and whose autosage is this checkout."""
    (tmp / "datasets").symlink_to(ROOT / "datasets")
    env = dict(os.environ, HOME=str(tmp), PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return env


def run_verbatim(command: str, cwd: Path, env: dict, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def python_example(heading: str) -> str:
    """The first ```python block of the README after `heading` (a section's first words)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading):]
    body = section[section.index("```python\n") + len("```python\n"):]
    return body[:body.index("\n```")]


def run_python(code: str, timeout: int) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter from the repository root, with the checkout importable."""
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
