"""Progress on stderr for slow steps (commands/progress.py): off a terminal, a step that runs past
SLOW_STEP_S says so in a line and says when it is done; a quick one (every bad input) prints
nothing, so an error stays one line. Lines are never wrapped (CPU)."""
from __future__ import annotations

import io
import time

from rich.console import Console

from autosage_cli.commands import progress
from cli_helpers import run_cli


def log_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, soft_wrap=True), out


def test_a_slow_step_says_so_and_when_it_is_done(monkeypatch):
    monkeypatch.setattr(progress, "SLOW_STEP_S", 0.05)
    console, out = log_console()
    with progress.step(console, "generating reddit-like"):
        time.sleep(0.4)
    lines = out.getvalue().splitlines()
    assert lines[0] == "generating reddit-like…" and lines[1].startswith("generating reddit-like: done in ")


def test_a_quick_step_prints_nothing(monkeypatch):
    monkeypatch.setattr(progress, "SLOW_STEP_S", 5.0)
    console, out = log_console()
    with progress.step(console, "loading cora"):
        pass
    time.sleep(0.05)
    assert out.getvalue() == ""


def test_gen_and_tune_report_their_slow_steps(tmp_path, monkeypatch):
    """The steps the README's reddit-like examples spend 15-30 s in (every step counts as slow here)."""
    monkeypatch.setattr(progress, "SLOW_STEP_S", 0)
    r = run_cli("gen", "er-200k", "--out", str(tmp_path / "g.npz"))
    assert r.exit_code == 0, r.stderr
    assert "generating er-200k…" in r.stderr.splitlines() and f"writing {tmp_path / 'g.npz'}…" in r.stderr
    r = run_cli("tune", "--dataset", "er-200k", "--width", "16", "--dry-run",
                "--cache", str(tmp_path / "decisions.json"))
    assert r.exit_code == 0, r.stderr
    assert "loading er-200k…" in r.stderr.splitlines()


def test_stderr_lines_are_not_wrapped(capsys):
    long = "replay " + "x" * 200
    progress.stderr_console().print(long)
    assert capsys.readouterr().err == long + "\n"


def test_a_step_that_fails_or_is_interrupted_is_not_done(monkeypatch):
    monkeypatch.setattr(progress, "SLOW_STEP_S", 0.05)
    for exc in (KeyboardInterrupt(), ValueError("bad")):
        console, out = log_console()
        try:
            with progress.step(console, "generating reddit-like"):
                time.sleep(0.3)
                raise exc
        except (KeyboardInterrupt, ValueError):
            pass
        assert out.getvalue().splitlines() == ["generating reddit-like…"]


def test_ctrl_c_during_a_long_step_is_one_line_and_leaves_no_file(tmp_path):
    """The real command in its own process, interrupted (SIGINT) while it generates rmat-20 (7-9 s):
    exit code 130, one `Error: interrupted` line, no traceback, nothing written."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "autosage_cli", "gen", "rmat-20", "--out", str(tmp_path / "g.npz")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(repo)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stderr.readline()          # printed once the step has run SLOW_STEP_S
    assert first == "generating rmat-20…\n", first
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    lines = [line for line in rest.splitlines() if line.strip()]
    assert proc.returncode == 130, rest
    assert lines == ["Error: interrupted"], rest
    assert list(tmp_path.iterdir()) == []
