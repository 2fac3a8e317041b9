"""Run the real `autosage` entry point (main(), with its error handling) in-process."""
from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

from autosage_cli.cli import main


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Result(code, out.getvalue(), err.getvalue())
