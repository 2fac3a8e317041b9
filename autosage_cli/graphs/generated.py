"""Generated graphs kept on disk, so that a large synthetic graph is built once per machine.

Generating products-like (2.45M vertices, 124M nonzeros) took ~20 s on the H200's host, every
time a command or the benchmark named it (`autosage reorder --dataset products-like-shuffled
--method auto` spent that before deciding anything). A generator is deterministic (same kind,
parameters and seed: the same graph bit for bit), so its result can be stored and read back
(~1 s: an uncompressed .npz, then the canonical-CSR validation every graph passes).

Key: the kind, the full resolved parameters, the seed, and a hash of the generating code's own
source (the modules named in GENERATOR_MODULES), so editing a generator misses every old entry.
Files: `<cache dir>/graphs/<kind>-<key>.npz` with the arrays and the key's JSON, which must match
on reading (a file of another key, a damaged or truncated one is ignored and replaced). Written
atomically (a temporary file renamed into place). Only graphs of at least CACHE_MIN_NNZ expected
nonzeros are stored: smaller ones generate faster than a file is read. The cache is an
accelerator, never a source of truth: a directory that cannot be written only means generating.
`AUTOSAGE_GRAPH_CACHE=0` turns it off; `AUTOSAGE_GRAPH_CACHE_DIR` moves it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ..errors import AutosageError
from .csr import CSRGraph, from_arrays

CACHE_MIN_NNZ = 2_000_000       # products-like at 1/16 scale (7.7M) generates in ~1.5 s; 1M in ~0.2 s
GENERATOR_MODULES = ("synthetic.py", "generators.py", "degrees.py", "edges.py", "csr.py", "generated.py")
SCHEMA = "autosage-generated-graph-v1"


@functools.cache   # the generators do not change within a process
def code_hash() -> str:
    h = hashlib.blake2b(digest_size=12)
    here = Path(__file__).resolve().parent
    for name in GENERATOR_MODULES:
        h.update(name.encode())
        h.update((here / name).read_bytes())
    return h.hexdigest()


def cache_dir() -> Path | None:
    """Where generated graphs are kept, or None when the cache is turned off."""
    if os.environ.get("AUTOSAGE_GRAPH_CACHE", "1").strip() == "0":
        return None
    explicit = os.environ.get("AUTOSAGE_GRAPH_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autosage" / "graphs"


def key_of(kind: str, params: dict, seed: int) -> dict:
    return {"schema": SCHEMA, "kind": kind, "params": params, "seed": int(seed), "code": code_hash()}


def path_of(directory: Path, key: dict) -> Path:
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=12).hexdigest()
    return directory / f"{key['kind']}-{digest}.npz"


def load(key: dict, source: dict) -> CSRGraph | None:
    """The stored graph of `key` with `source`, or None (not stored, another key's, unreadable)."""
    directory = cache_dir()
    if directory is None:
        return None
    path = path_of(directory, key)
    try:
        with np.load(path, allow_pickle=False) as stored:
            if json.loads(str(stored["key"])) != key:
                return None
            n_rows, n_cols = (int(s) for s in stored["shape"])
            return from_arrays(stored["indptr"], stored["indices"], stored["values"], (n_rows, n_cols),
                               source)
    except (OSError, ValueError, KeyError, AutosageError, EOFError, zipfile.BadZipFile):
        return None


def store(key: dict, graph: CSRGraph) -> None:
    """Keep `graph` under `key`; never fails the caller (a cache not written is a slower next run)."""
    directory = cache_dir()
    if directory is None:
        return
    tmp = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".graph-", suffix=".npz.tmp")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, indptr=graph.indptr, indices=graph.indices, values=graph.values,
                     shape=np.asarray(graph.shape, dtype=np.int64), key=np.asarray(json.dumps(key)))
        os.replace(tmp, path_of(directory, key))
        tmp = None
    except OSError:
        pass
    finally:   # also on Ctrl-C mid-write: no temporary file is left behind
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
