"""What a graph file hashes to, remembered, so a cache-hit `tune` need not read the graph again.

A decision-cache lookup needs only the graph's fingerprint, and computing it means parsing the
whole file (and importing the parsers): most of a cache hit's wall time. `GraphMemo` keeps, beside
the decision cache, one small JSON document mapping a graph's origin to its summary (fingerprint,
shape, nonzeros, source). An entry is trusted only while everything that could change the loaded
graph is unchanged:
  - a file (a GRAPH path, or a shipped dataset's file): its resolved path, size, modification time
    (ns) and inode;
  - a synthetic preset: its name (the generators are deterministic at seed 0);
  - for both, the hash of the graph readers' and generators' own source (this package's graphs/),
    so a reader that canonicalises differently invalidates every entry.
An entry may also keep the graph's features (what the tuner's cost model reads), tagged with the
version of the code that computed them: a tune of another width or op on the same graph then
skips computing them (0.2-0.4 s on a 100M-edge graph).
Other origins (downloads such as OGB or Reddit) are not remembered. A missing, unreadable or
foreign memo file is simply empty: the memo is an accelerator, never a source of truth; the
decision cache still checks the fingerprint's entry like any other.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import AutosageError

MEMO_NAME = "graphs.json"
SCHEMA = "autosage-graph-memo"
MAX_ENTRIES = 512           # oldest entries dropped beyond this: the file stays a few hundred KiB


@dataclass(frozen=True)
class GraphSummary:
    """What a decision-cache key needs from a graph, without its arrays."""
    fingerprint: str
    n_rows: int
    n_cols: int
    nnz: int
    source: dict


@functools.lru_cache(maxsize=1)   # the readers do not change within a process; recall and remember share it
def _readers_hash() -> str:
    h = hashlib.blake2b(digest_size=12)
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def origin(path: str | None, dataset: str | None) -> tuple[str, dict] | None:
    """(memo key, what must still hold) for a graph given as a file or a dataset name; None for
    origins that are not remembered (downloads) or that cannot be resolved."""
    from . import datasets

    try:
        if path is not None:
            file = Path(path).expanduser().resolve()
            name = None
        else:
            entry = datasets.lookup(str(dataset))
            if entry.loader == "synthetic":
                return f"synthetic:{entry.name}", {"readers": _readers_hash()}
            if entry.loader not in ("mtx", "npz", "edgelist"):
                return None
            file, name = datasets.shipped_path(entry).resolve(), entry.name
        st = file.stat()
    except (OSError, AutosageError):
        return None
    key = f"file:{file}" if name is None else f"dataset:{name}:{file}"
    return key, {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
                 "readers": _readers_hash()}


class GraphMemo:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def beside(cls, cache_path: str | os.PathLike) -> "GraphMemo":
        """The memo that lives in the decision cache's directory."""
        return cls(Path(cache_path).expanduser().parent / MEMO_NAME)

    def _entries(self) -> dict:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return {}
        entries = doc.get("entries") if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None
        return entries if isinstance(entries, dict) else {}

    def recall(self, path: str | None, dataset: str | None) -> GraphSummary | None:
        """The remembered summary of this graph, or None when it is unknown or anything it depends
        on changed."""
        found = origin(path, dataset)
        if found is None:
            return None
        key, state = found
        entry = self._entries().get(key)
        if not isinstance(entry, dict) or entry.get("state") != state:
            return None
        try:
            return GraphSummary(**entry["summary"])
        except (KeyError, TypeError):
            return None

    def features(self, path: str | None, dataset: str | None, fingerprint: str, version: str) -> dict | None:
        """The features remembered for this graph (its fingerprint) by code of `version`, or None."""
        found = origin(path, dataset)
        if found is None:
            return None
        key, state = found
        entry = self._entries().get(key)
        if (not isinstance(entry, dict) or entry.get("state") != state
                or (entry.get("summary") or {}).get("fingerprint") != fingerprint):
            return None
        kept = entry.get("features")
        if not isinstance(kept, dict) or kept.get("version") != version:
            return None
        return kept.get("values") if isinstance(kept.get("values"), dict) else None

    def remember(self, path: str | None, dataset: str | None, graph,
                 features: tuple[str, dict] | None = None) -> None:
        """Record `graph` (just loaded from this origin) and, when given, its features as
        (code version, values); features already remembered for the same graph are kept. Never
        fails the caller: a memo that cannot be written is only a slower next hit."""
        found = origin(path, dataset)
        if found is None:
            return
        key, state = found
        summary = GraphSummary(graph.fingerprint, graph.n_rows, graph.n_cols, graph.nnz,
                               dict(graph.source))
        entries = self._entries()
        entry = {"state": state, "summary": asdict(summary)}
        old = entries.get(key)
        if features is not None:
            entry["features"] = {"version": features[0], "values": features[1]}
        elif isinstance(old, dict) and {k: old.get(k) for k in entry} == entry and "features" in old:
            entry["features"] = old["features"]
        if old == entry:
            return                    # already remembered: a re-tune of a known graph writes nothing
        entries.pop(key, None)
        entries[key] = entry
        entries = dict(list(entries.items())[-MAX_ENTRIES:])
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"schema": SCHEMA, "entries": entries}, f)
            os.replace(tmp, self.path)   # atomic: a concurrent reader sees the old or the new file
            tmp = None
        except OSError:
            pass
        finally:   # also on Ctrl-C mid-write: no temporary file is left beside the cache
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
