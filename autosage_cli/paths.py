"""Where output goes: checked before any work, so a bad path fails in one line at once."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import AutosageError


def check_creatable(directory: Path, what: str) -> None:
    """AutosageError unless `directory` exists or can be made, and can be written: its nearest
    existing ancestor must be a directory this process may write into."""
    ancestor = Path(directory)
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise AutosageError(f"cannot create {what} {directory}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise AutosageError(f"cannot write to {what} {directory}: {ancestor} is not writable")
    problem = write_problem(ancestor)
    if problem:
        raise AutosageError(f"cannot write to {what} {directory}: {ancestor} refuses new files ({problem})")


def write_problem(directory: Path) -> str | None:
    """Why nothing can be created in the existing `directory` (None when something can): a
    directory is made there and removed. os.access alone says yes to root everywhere, also where
    the file system refuses every new file (/proc, /sys, a read-only mount)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".autosage-write-check-", dir=directory))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
