"""A progress bar on stderr for long commands: rich's bar on a terminal; elsewhere (logs, pipes)
no bar, and the command prints plain lines instead (`bar is None`)."""
from __future__ import annotations


class StderrBar:
    """`with StderrBar(total, description) as p:` starts and stops the bar; `p.bar` is None when
    stderr is not a terminal."""

    def __init__(self, total: int, description: str):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
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
