"""Matrix Market (.mtx, .mtx.gz) as its specification (NIST, "The Matrix Market Exchange Formats")
defines it, for graphs:

- only the `coordinate` layout: a dense `array` file is refused (a graph is its list of edges);
- `symmetric`, `skew-symmetric` and `hermitian` files store the lower triangle only: an entry above
  the diagonal (or on it, for skew-symmetric) is an error naming its line; the other half is
  mirrored, with the sign flipped for skew-symmetric;
- `pattern` entries are 1.0; repeated entries are summed; `complex` values are refused.

Before anything is allocated in proportion to the header, the declared entries are checked against
the bytes the file can hold, and the graph's size against the memory budget.

The header is read here and the entries by pandas' C parser, not by scipy.io.mmread: SciPy 1.17's
Matrix Market parser reads past the end of its buffer on some damaged files (a last line with a
stray token and no newline, among others) and crashes the process, which no error handling can
turn into a message.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import budget
from ..errors import AutosageError, exception_text
from .preflight import is_gzip, max_text_bytes

MIRRORED = ("symmetric", "skew-symmetric", "hermitian")
LAYOUTS = ("coordinate", "array")
FIELDS = ("real", "integer", "pattern", "complex", "double")
SYMMETRIES = ("general",) + MIRRORED
# The shortest entry line: one digit per field and one separator or newline after each.
FIELDS_PER_ENTRY = {"pattern": 2, "real": 3, "integer": 3, "double": 3}
PARSE_BYTES_PER_ENTRY = 48   # pandas' columns and buffers while it parses one entry line
MAX_HEADER_LINES = 100_000   # comment lines before the size line; more is not a header


@dataclass(frozen=True)
class Header:
    rows: int
    cols: int
    entries: int
    layout: str
    field: str
    symmetry: str
    lines: int          # physical lines up to and including the size line


def _open_binary(path: Path):
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def _invalid(path: Path, what: str) -> AutosageError:
    return AutosageError(f"{path}: not a valid Matrix Market file: {what}")


def _parse_header(path: Path) -> Header:
    with _open_binary(path) as fh:
        banner = fh.readline(1024).decode("ascii", "replace")
        words = banner.lower().split()
        if len(words) != 5 or words[0] != "%%matrixmarket" or words[1] != "matrix":
            raise _invalid(path, f"the banner {banner.strip()[:80]!r} is not "
                                 "'%%MatrixMarket matrix <layout> <field> <symmetry>'")
        layout, field, symmetry = words[2:]
        for value, known, what in ((layout, LAYOUTS, "layout"), (field, FIELDS, "field"),
                                   (symmetry, SYMMETRIES, "symmetry")):
            if value not in known:
                raise _invalid(path, f"unknown {what} {value!r} in the banner (known: {', '.join(known)})")
        for number in range(2, MAX_HEADER_LINES):
            line = fh.readline(1024)
            if not line:
                raise _invalid(path, "no size line after the banner")
            text = line.decode("ascii", "replace").strip()
            if text and not text.startswith("%"):
                return Header(*_size_line(path, text, layout), layout, field, symmetry, number)
    raise _invalid(path, f"no size line in the first {MAX_HEADER_LINES} lines")


def _size_line(path: Path, text: str, layout: str) -> tuple[int, int, int]:
    want = 3 if layout == "coordinate" else 2
    words = text.split()
    try:
        numbers = [int(w) for w in words]
    except ValueError:
        raise _invalid(path, f"the size line {text[:80]!r} must hold {want} integers") from None
    if len(numbers) != want:
        raise _invalid(path, f"the size line {text[:80]!r} must hold {want} integers")
    if min(numbers) < 0:
        raise AutosageError(f"{path}: the size line {text[:80]!r} holds negative numbers")
    rows, cols = numbers[0], numbers[1]
    return rows, cols, numbers[2] if want == 3 else rows * cols


def read_header(path: Path, parse_errors: tuple) -> Header:
    """The header, checked against the spec, the file's size and the memory budget."""
    try:
        h = _parse_header(path)
    except parse_errors as exc:
        raise _invalid(path, exception_text(exc)) from None
    if h.layout == "array":
        raise AutosageError(f"{path}: dense 'array' Matrix Market files are not supported; store the "
                            f"graph in the 'coordinate' layout (one line per edge)")
    if h.field == "complex":
        raise AutosageError(f"{path}: complex Matrix Market values are not supported")
    if h.rows <= 0 or h.cols <= 0:
        raise AutosageError(f"{path}: graph dimensions must be positive, got {h.rows}x{h.cols}")
    if h.symmetry in MIRRORED and h.rows != h.cols:
        raise AutosageError(f"{path}: a {h.symmetry} matrix must be square, the header says {h.rows}x{h.cols}")
    per_entry = 2 * FIELDS_PER_ENTRY.get(h.field, 3)
    most = (max_text_bytes(path) + 1) // per_entry
    if h.entries > most:
        raise AutosageError(f"{path}: the header declares {h.entries} entries but the file can hold "
                            f"at most {most}: it is truncated or its header is wrong")
    stored = h.entries * (2 if h.symmetry in MIRRORED else 1)
    budget.require_host(budget.graph_host_bytes(h.rows, h.cols, stored) + PARSE_BYTES_PER_ENTRY * h.entries,
                        f"{path}: a {h.rows}x{h.cols} graph with up to {stored} nonzeros")
    return h


def read_entries(path: Path, h: Header) -> sp.coo_matrix:
    import pandas as pd  # its C parser is the fast path; importing it costs ~0.3 s a cache hit never needs
    import scipy.sparse as sp   # likewise: a graph read from another format never needs either
    """The entries exactly as stored (no mirroring), in file order, 0-based."""
    width = 2 if h.field == "pattern" else 3
    try:
        frame = pd.read_csv(path, sep=r"\s+", header=None, skiprows=h.lines, comment="%", engine="c")
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame(np.zeros((0, width)))
    if frame.shape[0] != h.entries:
        raise AutosageError(f"{path}: Truncated file: the header declares {h.entries} entries, the file "
                            f"holds {frame.shape[0]}" if frame.shape[0] < h.entries else
                            f"{path}: the file holds {frame.shape[0]} entries, more than the {h.entries} "
                            f"its header declares")
    if h.entries and frame.shape[1] != width:
        raise AutosageError(f"{path}: a {h.field} file has {width} numbers per entry line, found {frame.shape[1]}")
    rows = _indices(path, frame, 0, h.rows, "row")
    cols = _indices(path, frame, 1, h.cols, "column")
    if h.field == "pattern":
        return sp.coo_matrix((np.ones(h.entries), (rows, cols)), shape=(h.rows, h.cols))
    values = _numbers(path, frame[2], h.field)
    return sp.coo_matrix((values, (rows, cols)), shape=(h.rows, h.cols))


def _first_bad(path: Path, bad: np.ndarray) -> tuple[int, int]:
    index = int(np.flatnonzero(bad)[0])
    return index, entry_line(path, index)


def _numeric(path: Path, column: pd.Series, what: str) -> np.ndarray:
    import pandas as pd

    if not pd.api.types.is_numeric_dtype(column.dtype) or column.dtype == bool:
        numeric = pd.to_numeric(column, errors="coerce")
        if numeric.isna().any():
            index, line = _first_bad(path, numeric.isna().to_numpy())
            raise AutosageError(f"{path}: line {line}: Invalid {what} {str(column.iloc[index])[:40]!r}")
        column = numeric
    return column.to_numpy()


def _indices(path: Path, frame: pd.DataFrame, col: int, size: int, what: str) -> np.ndarray:
    if frame.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    values = _numeric(path, frame[col], f"integer {what} index")
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values) | (values != np.floor(values))
        if bad.any():
            index, line = _first_bad(path, bad)
            raise AutosageError(f"{path}: line {line}: Invalid integer {what} index {float(values[index]):g}")
    bad = (values < 1) | (values > size)
    if bad.any():
        index, line = _first_bad(path, bad)
        raise AutosageError(f"{path}: line {line}: {what} index {float(values[index]):.0f} is out of bounds "
                            f"(1 to {size})")
    return values.astype(np.int64) - 1


def _numbers(path: Path, column: pd.Series, field: str) -> np.ndarray:
    what = "integer value" if field == "integer" else "floating-point value"
    values = _numeric(path, column, what).astype(np.float64)
    if field == "integer":
        bad = ~np.isfinite(values) | (values != np.floor(values))
        if bad.any():
            index, line = _first_bad(path, bad)
            raise AutosageError(f"{path}: line {line}: Invalid integer value {values[index]:g}")
    return values


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
    import scipy.sparse as sp

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
