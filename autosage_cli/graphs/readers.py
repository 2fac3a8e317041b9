"""Graph file formats: Matrix Market (.mtx, .mtx.gz), SciPy sparse .npz, and SNAP-style edge lists
(.txt/.edges/.tsv, optionally .gz). Each reader returns a canonical CSRGraph or raises AutosageError
naming the file and the problem — parsers raise ValueError, IndexError, EOFError (a truncated gzip),
OSError, zipfile errors…, and none of that may reach the user as a traceback.
"""
from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .. import budget
from ..errors import AutosageError, exception_text
from . import mtx, preflight
from .csr import CSRGraph, canonical_csr, from_arrays
from .edges import csr_from_keys, sorted_unique_keys

MTX_SUFFIXES = (".mtx", ".mtx.gz")
NPZ_SUFFIXES = (".npz",)
EDGE_LIST_SUFFIXES = (".txt", ".txt.gz", ".edges", ".edges.gz", ".tsv", ".tsv.gz")
ALL_SUFFIXES = MTX_SUFFIXES + NPZ_SUFFIXES + EDGE_LIST_SUFFIXES
MAX_NODES = 2**31 - 1  # edge keys row·n + col must fit in int64
# Parsing an edge list: pandas holds 2-3 int64/float64 columns plus its own buffers per line (about
# 50 bytes per line measured); the shortest line, "0 1\n", is 4 bytes, a typical one 8 or more.
MIN_EDGE_LINE_BYTES = 8
EDGE_PARSE_BYTES = 64

# Exceptions a parser may raise on a bad file (MemoryError and KeyboardInterrupt are not among them).
PARSE_ERRORS = (ValueError, IndexError, KeyError, TypeError, OverflowError, EOFError, OSError, zlib.error,
                UnicodeDecodeError, zipfile.BadZipFile)   # pandas' ParserError and EmptyDataError are ValueErrors
# zipfile also raises RuntimeError (an encrypted member) and NotImplementedError (a compression
# method it does not know) on a damaged archive.
NPZ_ERRORS = PARSE_ERRORS + (RuntimeError, NotImplementedError)


def file_format(path: Path) -> str:
    name = path.name.lower()
    for fmt, suffixes in (("mtx", MTX_SUFFIXES), ("npz", NPZ_SUFFIXES), ("edgelist", EDGE_LIST_SUFFIXES)):
        if name.endswith(suffixes):
            return fmt
    raise AutosageError(f"{path}: unknown graph file extension (expected one of {', '.join(ALL_SUFFIXES)})")


def read_matrix_market(path: Path, source: dict) -> CSRGraph:
    """Matrix Market per its specification (graphs.mtx): coordinate layout only, the lower triangle
    of symmetric / skew-symmetric / hermitian files mirrored, pattern → 1.0, duplicates summed,
    float32 values."""
    header = mtx.read_header(path, PARSE_ERRORS)
    try:
        matrix = mtx.read_entries(path, header)
    except PARSE_ERRORS as exc:
        raise AutosageError(f"{path}: cannot read Matrix Market data: {exception_text(exc)}") from None
    if header.symmetry in mtx.MIRRORED:
        matrix = mtx.mirrored(matrix, header.symmetry, path)
    return _canonical(path, matrix, source)


def read_npz(path: Path, source: dict) -> CSRGraph:
    """A SciPy sparse matrix saved with scipy.sparse.save_npz (any format: coo, csr, csc…)."""
    try:
        _check_npz_types(path, _check_npz_budget(path))
        import scipy.sparse as sp   # imported where an .npz is read: a tune of other files never needs it

        matrix = sp.load_npz(str(path))
        if hasattr(matrix, "check_format"):
            # SciPy's constructors check only lengths; the conversion to a canonical CSR runs C++
            # that trusts indptr to be non-decreasing and in bounds (an indptr that goes back
            # corrupts the heap and kills the process), so every index is checked here first.
            matrix.check_format(full_check=True)
    except NPZ_ERRORS as exc:
        raise AutosageError(f"{path}: not a SciPy sparse .npz file: {exception_text(exc)}") from None
    return _canonical(path, matrix, source)


# The members of a SciPy .npz that hold indices, in each of its formats.
NPZ_INDEX_MEMBERS = ("indptr", "indices", "row", "col", "offsets")


def _check_npz_types(path: Path, arrays: dict) -> None:
    """Refuse, from the .npy headers alone, members SciPy would convert wrongly: index arrays that
    are not integers (it casts 1.5 to 1 and NaN to some integer, with a RuntimeWarning) and values
    that are not real numbers (complex values would lose their imaginary part, text fails inside
    NumPy)."""
    for name in NPZ_INDEX_MEMBERS:
        if name in arrays and arrays[name][1].kind not in "iu":
            raise AutosageError(f"{path}: its {name} array holds {arrays[name][1].name} values; "
                                f"index arrays must be integers")
    if "data" in arrays and arrays["data"][1].kind not in "biuf":
        raise AutosageError(f"{path}: its data array holds {arrays['data'][1].name} values; "
                            f"only real numbers are supported")


def _check_npz_budget(path: Path) -> dict:
    """Refuse, from the .npy headers alone, an .npz whose arrays or whose CSR would not fit.
    Returns the headers ({member: (shape, dtype)})."""
    arrays = preflight.npz_arrays(path)
    stored = sum(preflight.array_bytes(shape, dtype) for shape, dtype in arrays.values())
    budget.require_host(stored, f"{path}: its arrays")
    if "shape" not in arrays or arrays["shape"][0] != (2,) or arrays["shape"][1].kind not in "iu":
        return arrays   # load_npz names what is wrong
    with np.load(str(path), allow_pickle=False) as members:
        shape = members["shape"]
    n_rows, n_cols = (int(s) for s in shape)
    values = arrays.get("data", ((0,), np.dtype(np.float32)))[0]
    nnz = values[0] if len(values) == 1 else 0
    budget.require_host(stored + budget.graph_host_bytes(max(n_rows, 0), max(n_cols, 0), nnz),
                        f"{path}: a {n_rows}x{n_cols} graph with {nnz} nonzeros")
    return arrays


def _canonical(path: Path, matrix, source: dict) -> CSRGraph:
    try:
        return canonical_csr(matrix, source)
    except AutosageError as exc:
        raise AutosageError(f"{path}: {exc}") from None


def _integer_ids(path: Path, column, what: str) -> np.ndarray:
    import pandas as pd

    """A column of node ids as int64, or an error naming the first bad entry (counted from 1 over
    the non-comment lines)."""
    if not pd.api.types.is_numeric_dtype(column.dtype):
        numeric = pd.to_numeric(column, errors="coerce")
        bad = np.flatnonzero(numeric.isna().to_numpy())
        if bad.size:
            raise AutosageError(f"{path}: non-numeric {what} {column.iloc[int(bad[0])]!r} "
                                f"in edge {int(bad[0]) + 1}")
        column = numeric
    values = column.to_numpy()
    if values.dtype.kind == "f":
        finite = np.isfinite(values)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            raise AutosageError(f"{path}: missing or non-finite {what} in edge {bad + 1}")
        if np.any(values != np.floor(values)):
            bad = int(np.flatnonzero(values != np.floor(values))[0])
            raise AutosageError(f"{path}: {what} {float(values[bad]):g} in edge {bad + 1} is not an integer")
    # Both bounds are checked before the cast to int64, which would wrap a huge float (-1e30 would
    # become -9223372036854775808, with NumPy's "invalid value encountered in cast" warning).
    if values.size and values.min() < 0:
        bad = int(np.flatnonzero(values < 0)[0])
        raise AutosageError(f"{path}: negative {what} {_id_text(values[bad])} in edge {bad + 1}")
    if values.size and values.dtype.kind in "fu" and values.max() > MAX_NODES - 1:
        bad = int(np.argmax(values))
        raise AutosageError(f"{path}: {what} {_id_text(values[bad])} in edge {bad + 1} is too large "
                            f"(ids must be below {MAX_NODES})")
    return values.astype(np.int64)


def _id_text(value) -> str:
    """An id as the file wrote it, near enough: -1e+30 for a float, -3 for an integer."""
    return f"{float(value):g}" if np.asarray(value).dtype.kind == "f" else str(int(value))


def _check_edge_list_budget(path: Path) -> None:
    lines = preflight.likely_text_bytes(path) // MIN_EDGE_LINE_BYTES
    budget.require_host(EDGE_PARSE_BYTES * lines, f"{path}: parsing about {lines} edge lines")


def read_edge_list(path: Path, source: dict) -> CSRGraph:
    """Whitespace-separated `source target [value]` lines, `#` comments, 0-based ids, n = max id + 1.
    Two columns: a pattern graph (value 1.0, repeated edges merged). Three: the third column is the
    value and repeated edges are summed, as in Matrix Market. pandas' C parser infers int64 columns;
    a column that comes back as text holds a non-numeric entry, which is then located and named."""
    import pandas as pd            # imported where an edge list is parsed
    import scipy.sparse as sp

    _check_edge_list_budget(path)
    try:
        frame = pd.read_csv(path, sep=r"\s+", comment="#", header=None, engine="c")
    except pd.errors.EmptyDataError:
        raise AutosageError(f"{path}: no edges in the file") from None
    except PARSE_ERRORS as exc:
        raise AutosageError(f"{path}: cannot parse the edge list: {_parse_problem(exc)}") from None
    if frame.shape[0] == 0:
        raise AutosageError(f"{path}: no edges in the file")
    if frame.shape[1] not in (2, 3):
        raise AutosageError(f"{path}: expected 2 or 3 columns (source target [value]), found {frame.shape[1]}"
                            + (" (columns are separated by spaces or tabs)" if frame.shape[1] == 1 else ""))
    src = _integer_ids(path, frame[0], "source id")
    dst = _integer_ids(path, frame[1], "target id")
    n = int(max(src.max(), dst.max())) + 1
    if n > MAX_NODES:
        raise AutosageError(f"{path}: node id {n - 1} is too large (ids must be below {MAX_NODES})")
    budget.require_host(budget.graph_host_bytes(n, n, src.shape[0]),
                        f"{path}: a graph of {n} nodes (largest id {n - 1}) and {src.shape[0]} edges")
    if frame.shape[1] == 2:
        keys = sorted_unique_keys([(src, dst)], n)
        indptr, indices = csr_from_keys(keys, n, n)
        return from_arrays(indptr, indices, np.ones(keys.shape[0], np.float32), (n, n), source)
    values = frame[2]
    if not pd.api.types.is_numeric_dtype(values.dtype):
        bad = int(np.flatnonzero(pd.to_numeric(values, errors="coerce").isna().to_numpy())[0])
        raise AutosageError(f"{path}: non-numeric value {values.iloc[bad]!r} in edge {bad + 1}")
    if values.isna().any():
        bad = int(np.flatnonzero(values.isna().to_numpy())[0])
        raise AutosageError(f"{path}: missing value in edge {bad + 1}")
    matrix = sp.coo_matrix((values.to_numpy(dtype=np.float64), (src, dst)), shape=(n, n))
    return _canonical(path, matrix, source)


# pandas' C parser on a line with more fields than the first: "Error tokenizing data. C error:
# Expected 2 fields in line 5, saw 3".
_RAGGED = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _parse_problem(exc: BaseException) -> str:
    """pandas' message, or for a ragged file which line differs and how (a comma-separated line
    reads as one field: only spaces and tabs separate columns)."""
    ragged = _RAGGED.search(str(exc))
    if ragged is None:
        return exception_text(exc)
    expected, line, saw = ragged.groups()
    return (f"line {line} has {saw} columns, the lines before it {expected} "
            f"(columns are separated by spaces or tabs, not commas)")


READERS = {"mtx": read_matrix_market, "npz": read_npz, "edgelist": read_edge_list}


def _check_existing_file(path: Path) -> str:
    if not path.exists():
        raise AutosageError(f"no such file: {path}")
    if path.is_dir():
        raise AutosageError(f"{path} is a directory, not a graph file")
    return file_format(path)


def read_graph_file(path: Path, source: dict) -> CSRGraph:
    """Dispatch on the extension; the file must exist and be a regular file."""
    return READERS[_check_existing_file(path)](path, source)


def check_graph_file(path: Path) -> None:
    """The checks a file gets before its data is read (existence, format, header, memory budget),
    without reading the data: a run validates every file this way before it starts."""
    fmt = _check_existing_file(path)
    if fmt == "mtx":
        mtx.read_header(path, PARSE_ERRORS)
    elif fmt == "npz":
        try:
            _check_npz_types(path, _check_npz_budget(path))
        except NPZ_ERRORS as exc:
            raise AutosageError(f"{path}: not a SciPy sparse .npz file: {exception_text(exc)}") from None
    else:
        _check_edge_list_budget(path)
