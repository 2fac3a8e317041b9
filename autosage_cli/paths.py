"""Where output goes: checked before any work, so a bad path fails in one line at once."""
from __future__ import annotations

import os
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
