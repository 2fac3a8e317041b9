"""Matrix Market (.mtx, .mtx.gz) as its specification (NIST, "The Matrix Market Exchange Formats")
defines it, for graphs:

- only the `coordinate` layout: a dense `array` file is refused (a graph is its list of edges);
- `symmetric`, `skew-symmetric` and `hermitian` files store the lower triangle only: an entry above
  the diagonal (or on it, for skew-symmetric) is an error naming its line; the other half is
  mirrored, with the sign flipped for skew-symmetric;
- `pattern` entries are 1.0; repeated entries are summed; `complex` values are refused.

Before anything is allocated in proportion to the header, the declared entries are checked against
the bytes the file can hold, and the graph's size against the memory budget.
"""
from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from .. import budget
from ..errors import AutosageError
from .preflight import is_gzip, max_text_bytes

MIRRORED = ("symmetric", "skew-symmetric", "hermitian")
# The shortest entry line: one digit per field and one separator or newline after each.
FIELDS_PER_ENTRY = {"pattern": 2, "real": 3, "integer": 3, "double": 3}
COO_PARSE_BYTES = 24   # row, column and value of every entry as scipy.io.mmread holds them


def read_header(path: Path, parse_errors: tuple) -> tuple[int, int, int, str, str, str]:
    """(rows, cols, entries, layout, field, symmetry), checked against the spec and the file size."""
    try:
        rows, cols, entries, layout, field, symmetry = scipy.io.mminfo(str(path))
    except parse_errors as exc:
        raise AutosageError(f"{path}: not a valid Matrix Market file: {_problem(exc)}") from None
    if layout == "array":
        raise AutosageError(f"{path}: dense 'array' Matrix Market files are not supported; store the "
                            f"graph in the 'coordinate' layout (one line per edge)")
    if field == "complex":
        raise AutosageError(f"{path}: complex Matrix Market values are not supported")
    if rows <= 0 or cols <= 0:
        raise AutosageError(f"{path}: graph dimensions must be positive, got {rows}x{cols}")
    if entries < 0:
        raise AutosageError(f"{path}: the header declares a negative number of entries ({entries})")
    if symmetry in MIRRORED and rows != cols:
        raise AutosageError(f"{path}: a {symmetry} matrix must be square, the header says {rows}x{cols}")
    per_entry = 2 * FIELDS_PER_ENTRY.get(field, 3)
    most = (max_text_bytes(path) + 1) // per_entry
    if entries > most:
        raise AutosageError(f"{path}: the header declares {entries} entries but the file can hold "
                            f"at most {most}: it is truncated or its header is wrong")
    stored = entries * (2 if symmetry in MIRRORED else 1)
    budget.require_host(budget.graph_host_bytes(rows, cols, stored) + COO_PARSE_BYTES * entries,
                        f"{path}: a {rows}x{cols} graph with up to {stored} nonzeros")
    return rows, cols, entries, layout, field, symmetry


def _problem(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if text else type(exc).__name__


class _EntryStream(io.RawIOBase):
    """The file's bytes for scipy's reader, with two changes: the banner line can be replaced (a
    mirrored file read as `general`, so its stored entries come back as they are, in file order),
    and the text always ends with a newline. SciPy 1.17's Matrix Market parser reads past the end
    of its buffer, and crashes the process, when the last line has a stray token or trailing
    blanks and no newline."""

    def __init__(self, raw, banner: bytes):
        self._raw, self._head, self._done = raw, banner, False
        self._last = banner[-1:] or b"\n"

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._raw.read(len(buffer)) if not self._done else b""
        if not data:
            self._done = True
            if self._last == b"\n":
                return 0
            data, self._last = b"\n", b"\n"
        self._last = data[-1:]
        buffer[:len(data)] = data
        return len(data)


def _open_binary(path: Path):
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return False
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"


def read_stored_entries(path: Path, symmetry: str) -> sp.coo_matrix:
    """The entries exactly as stored (no mirroring), in file order."""
    if symmetry == "general" and not is_gzip(path) and _ends_with_newline(path):
        return scipy.io.mmread(str(path))      # SciPy reads a plain file itself, in parallel
    with _open_binary(path) as raw:
        banner = raw.readline()
        if symmetry != "general":
            words = banner.decode("ascii", "replace").split()
            banner = (" ".join(words[:4] + ["general"]) + "\n").encode()
        return scipy.io.mmread(io.BufferedReader(_EntryStream(raw, banner)))


def entry_line(path: Path, index: int) -> int:
    """The 1-based line number of the index-th (0-based) entry: after the banner, the comment and
    blank lines and the size line."""
    with (gzip.open(path, "rt", errors="replace") if is_gzip(path)
          else open(path, errors="replace")) as fh:
        seen_size_line = False
        entry = -1
        for number, line in enumerate(fh, start=1):
            text = line.strip()
            if number == 1 or not text or text.startswith("%"):
                continue
            if not seen_size_line:
                seen_size_line = True
                continue
            entry += 1
            if entry == index:
                return number
    return -1


def mirrored(matrix: sp.coo_matrix, symmetry: str, path: Path) -> sp.coo_matrix:
    """Check that a symmetric / skew-symmetric / hermitian file stores only its lower triangle, then
    add the upper triangle (negated for skew-symmetric; a real hermitian matrix is symmetric)."""
    rows, cols, data = matrix.row, matrix.col, matrix.data
    misplaced = rows <= cols if symmetry == "skew-symmetric" else rows < cols
    if misplaced.any():
        first = int(np.flatnonzero(misplaced)[0])
        where = ("on or above the diagonal" if symmetry == "skew-symmetric" else "above the diagonal")
        raise AutosageError(f"{path}: line {entry_line(path, first)}: entry ({int(rows[first]) + 1}, "
                            f"{int(cols[first]) + 1}) is {where}; a {symmetry} file stores only the "
                            f"lower triangle")
    off = rows != cols
    sign = -1.0 if symmetry == "skew-symmetric" else 1.0
    all_rows = np.concatenate([rows, cols[off]])
    all_cols = np.concatenate([cols, rows[off]])
    all_data = np.concatenate([data.astype(np.float64, copy=False), sign * data[off]])
    return sp.coo_matrix((all_data, (all_rows, all_cols)), shape=matrix.shape)
