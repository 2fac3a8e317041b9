"""Run the real `autosage` entry point (main(), with its error handling) in-process."""
from __future__ import annotations

import io
import re
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


# The two lines commands/progress.step prints off a terminal for a step that runs past 2 s: on a
# slow or busy machine even a small file's load can, before the `Error:` line that ends it.
PROGRESS_LINE = re.compile(r".*(…|: done in \d+\.\d s)$")


def message_lines(stderr: str) -> list[str]:
    """stderr's non-blank lines other than progress lines."""
    return [line for line in stderr.splitlines() if line.strip() and not PROGRESS_LINE.fullmatch(line)]


def assert_one_line_error(result: Result, words, exit_code: int = 2) -> None:
    """The CLI's refusal contract: exit code 2, exactly one stderr line `Error: …` (besides the
    progress of a step that ran long) holding every one of `words`, no traceback or warning,
    nothing on stdout."""
    assert result.exit_code == exit_code, (result.exit_code, result.stderr)
    lines = message_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert result.stdout == ""
