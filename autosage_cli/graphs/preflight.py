"""What a graph file can hold, learnt without reading its data: the bytes of text it decompresses
to, and the arrays a SciPy .npz declares. The readers compare these with the memory budget and with
the counts a header declares before they allocate anything in proportion to a header's numbers.
"""
from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

# Deflate cannot compress better than about 1032:1, so a .gz file of s bytes holds at most this
# many times s bytes of text, whatever its trailer says.
MAX_DEFLATE_RATIO = 1032


def is_gzip(path: Path) -> bool:
    return path.name.lower().endswith(".gz")


def max_text_bytes(path: Path) -> int:
    """An upper bound on the bytes of text the file holds (after decompression)."""
    size = path.stat().st_size
    return size * MAX_DEFLATE_RATIO + 64 if is_gzip(path) else size


def likely_text_bytes(path: Path) -> int:
    """The bytes of text the file most likely holds: its size, or for gzip the length its trailer
    records (ISIZE, kept modulo 2**32, unwrapped when it is shorter than the compressed file)."""
    size = path.stat().st_size
    if not is_gzip(path) or size < 18:
        return size
    with open(path, "rb") as fh:
        fh.seek(-4, 2)
        isize = struct.unpack("<I", fh.read(4))[0]
    # Deflate expands incompressible data by a few bytes per 64 KiB block and gzip adds a header
    # and trailer, so text much shorter than the compressed file means ISIZE wrapped past 2**32.
    while isize < size - size // 1000 - 64:
        isize += 1 << 32
    return isize


def npz_arrays(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{member name: (shape, dtype)} from each .npy header of an .npz, reading no array data.
    Raises the parse errors of zipfile / numpy on a damaged file."""
    found = {}
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if not name.endswith(".npy"):
                continue
            with archive.open(name) as member:
                version = np.lib.format.read_magic(member)
                if version == (1, 0):
                    shape, _fortran, dtype = np.lib.format.read_array_header_1_0(member)
                elif version == (2, 0):
                    shape, _fortran, dtype = np.lib.format.read_array_header_2_0(member)
                else:
                    raise ValueError(f"member {name} has .npy format version {version}")
            found[name[:-4]] = (tuple(int(s) for s in shape), dtype)
    return found


def array_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    count = 1
    for s in shape:
        count *= max(0, s)
    return count * max(1, dtype.itemsize)
