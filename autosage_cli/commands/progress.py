"""Progress on stderr for long commands: rich's bar or spinner on a terminal; elsewhere (logs,
pipes) plain lines, never wrapped (a log keeps one line per message, whatever its width)."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

# A step that has not finished after this long says so on a stream that is not a terminal. Shorter
# steps (and every bad input, which fails at once) print nothing, so an error stays one line.
SLOW_STEP_S = 2.0


def stderr_console():
    """rich's Console on stderr, whose lines are never wrapped at a width (80 columns when stderr
    is not a terminal)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


@contextmanager
def step(console, message: str):
    """`with step(err, "generating reddit-like"):` shows a spinner on a terminal; elsewhere it
    prints `message…` once the step has run SLOW_STEP_S, and `message: done in T s` when it
    finishes (not when it fails or is interrupted)."""
    if console.is_terminal:
        with console.status(f"{message}…", spinner="dots"):
            yield
        return
    started = time.perf_counter()
    said = threading.Event()

    def say():
        said.set()
        console.print(f"{message}…", highlight=False)

    timer = None
    if SLOW_STEP_S <= 0:
        say()
    else:
        timer = threading.Timer(SLOW_STEP_S, say)
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
    # Only a step that finished is done: after a failure or Ctrl-C the `Error:` line says what happened.
    if said.is_set():
        console.print(f"{message}: done in {time.perf_counter() - started:.1f} s", highlight=False)


class StderrBar:
    """`with StderrBar(total, description) as p:` starts and stops the bar; `p.bar` is None when
    stderr is not a terminal."""

    def __init__(self, total: int, description: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = stderr_console()
        self.bar = None
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=self.console)
            self.task = self.bar.add_task(description, total=total)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()
        return False
