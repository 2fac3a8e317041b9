"""The CLI starts without the heavy libraries: `import autosage_cli.cli` and `autosage --help`
import neither pandas, scipy, torch nor nvmath (each costs about a second or more on a cold
machine, and a cache-hit tune or the help needs none of them). Checked in a fresh process, where
nothing imported by another test can hide an import."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "scipy", "torch", "nvmath", "matplotlib")

PROBE = """
import json, sys
{body}
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def heavy_modules_after(body: str) -> list[str]:
    code = PROBE.format(body=body, heavy=HEAVY)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_cli_imports_no_heavy_library():
    assert heavy_modules_after("import autosage_cli.cli") == []


@pytest.mark.parametrize("args", [["--help"], ["tune", "--help"], ["gen", "--help"], ["bench", "--help"]])
def test_help_imports_no_heavy_library(args):
    body = ("import contextlib, io\nfrom autosage_cli.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    try:\n"
            f"        main({args!r})\n"
            "    except SystemExit as exc:\n"
            "        assert exc.code in (0, None), exc.code\n"
            "assert 'Usage' in out.getvalue()")
    assert heavy_modules_after(body) == []


def test_the_gen_help_still_lists_the_presets_and_kinds():
    from click.testing import CliRunner

    from autosage_cli.cli import cli
    from autosage_cli.graphs.synthetic import KINDS, PRESETS

    # words joined again where the help wrapped them at a hyphen ("power-\nlaw")
    text = " ".join(CliRunner().invoke(cli, ["gen", "--help"]).output.split()).replace("- ", "-")
    assert all(name in text for name in PRESETS) and all(name in text for name in KINDS)


def test_a_tune_of_a_generated_graph_imports_no_heavy_library_up_to_the_gpu(tmp_path):
    """Reading and validating a dataset preset and planning its tune (the CLI stops at the GPU
    check here, or runs --dry-run) needs neither pandas nor scipy: only the text and .npz readers
    and the exact symmetry check import them."""
    body = ("import contextlib, io\nfrom autosage_cli.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n"
            f"        main(['tune', '--dataset', 'er-200k', '--width', '8', '--dry-run', '--cache', "
            f"{str(tmp_path / 'd.json')!r}])\n"
            "    except SystemExit as exc:\n"
            "        assert exc.code in (0, None), exc.code")
    assert heavy_modules_after(body) == []
