"""Persistent tuning decisions: one schema-versioned JSON document.

Key: device (name, compute capability, SMs, memory), software (driver, CUDA runtime,
CuPy, cuSPARSE, hash of the cuda/ sources), the graph's full fingerprint, op, K, dtype, heads.
Entries are stored under the hash of everything *but* the software part, which is kept inside the
entry: a lookup whose software no longer matches (a kernel source changed, a driver update) finds the
old entry, reports it as stale and re-tunes instead of silently missing or, worse, trusting it.

Writes hold a `filelock.FileLock` on `<path>.lock` around read-modify-write and replace the file
atomically (temp file in the same directory, then os.replace, as Triton's cache does), so readers
never see half a file and concurrent writers never lose an entry. A corrupt or truncated file is
moved aside to `<path>.corrupt-<timestamp>` (never deleted) with a warning; an unknown schema version
is an error naming it (Kernel Tuner refuses a cache whose header does not match). Probe records are
appended as JSON lines to `<stem>.probes.jsonl` beside the cache, under the same lock.
"""
from __future__ import annotations

import datetime as _dt
import glob
import hashlib
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import filelock

from . import cuda_sources, environment
from .environment import now_iso  # scheduler.tune stamps entries with cache.now_iso
from .cache_entry import entry_problem
from .errors import AutosageError
from .paths import check_creatable

SCHEMA = "autosage-decisions"
SCHEMA_VERSION = 1
LOCK_TIMEOUT_S = 120
DEVICE_FIELDS = ("name", "compute_capability", "sms", "memory_bytes")
SOFTWARE_FIELDS = ("driver", "cuda_runtime", "cupy", "cusparse", "cuda_sources")
TEMP_SUFFIX = ".tmp"

# The last document each cache file held, with the file's (inode, size, mtime) when it was read or
# written: a process that tunes many cases (the benchmark: a fresh DecisionCache per tune) parses a
# file again only when another writer replaced it. A 250-entry cache is 4 MB; parsing it took 0.09 s
# per tune, part of every cold and warm tune's time.
_PARSED: dict[str, tuple[tuple[int, int, int], dict]] = {}


def default_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autosage" / "decisions.json"


def check_cache_path(path: str | os.PathLike) -> Path:
    """Fail now, before any tuning, if `path` cannot be a cache file: it is a directory, its
    directory cannot be created or written, or it holds another program's JSON."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise AutosageError(f"cache {path} is a directory, not a file")
    check_creatable(path.parent, "the cache's directory")
    if path.is_file():
        try:
            DecisionCache(path)._parse(path.read_bytes())
        except ValueError:
            pass   # corrupt: the first write moves it aside and says so
        except OSError as exc:
            raise AutosageError(f"cannot read cache {path}: {exc.strerror or exc}") from None
    return path


def jsonable(obj):
    """A copy that strict JSON can hold: non-finite floats become strings ("inf", "nan")."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):   # numpy scalars
        return jsonable(obj.item())
    return obj


def _digest(obj) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=16).hexdigest()


# ------------------------------------------------------------------ keys

@dataclass(frozen=True)
class CacheKey:
    device: dict
    software: dict
    graph: str          # full fingerprint (graphs.csr.CSRGraph.fingerprint)
    op: str
    k: int
    dtype: str
    heads: int
    # The settings a decision was made under (tune.decision_settings): checked like the software,
    # not looked up; None (a lookup that takes any decision, e.g. the API with tuning off) skips it.
    settings: dict | None = None

    def lookup_fields(self) -> dict:
        """Everything that selects an entry: the software part is checked, not looked up."""
        return {"device": self.device, "graph": self.graph, "op": self.op, "k": self.k,
                "dtype": self.dtype, "heads": self.heads}

    @property
    def id(self) -> str:
        return _digest(self.lookup_fields())

    def to_dict(self) -> dict:
        return {**self.lookup_fields(), "software": self.software, "settings": self.settings}

    @classmethod
    def from_dict(cls, d: dict) -> "CacheKey":
        settings = d.get("settings")
        return cls(dict(d["device"]), dict(d["software"]), d["graph"], d["op"], int(d["k"]),
                   d["dtype"], int(d["heads"]), dict(settings) if isinstance(settings, dict) else None)


def device_key(info: dict) -> dict:
    return {f: info.get(f) for f in DEVICE_FIELDS}


def software_key(info: dict, sources_hash: str | None = None) -> dict:
    key = {f: info.get(f) for f in SOFTWARE_FIELDS}
    if sources_hash is not None:
        key["cuda_sources"] = sources_hash
    return key


def make_key(graph, op: str, k: int, dtype: str = "float32", heads: int = 1, *,
             device: dict | None = None, software: dict | None = None,
             settings: dict | None = None) -> CacheKey:
    """The key of one tuning question. `device`/`software` default to this machine's
    (environment.device_info / software_info and the hash of the cuda/ sources); `settings` are
    the tuning settings the decision must have been made under (None: any)."""
    if device is None:
        device = environment.device_info()
        if device is None:
            raise AutosageError("no CUDA device visible: a cache key names the device")
    if software is None:
        software = software_key(environment.software_info(), cuda_sources.sources_hash())
    return CacheKey(device_key(device), software_key(software), graph.fingerprint, op, int(k),
                    str(dtype), int(heads), None if settings is None else dict(settings))


def settings_change(old: dict | None, new: dict) -> str:
    """'top_k 6 -> 12' for the settings that differ; a decision that predates recorded settings
    says so."""
    return software_change(old, new) if isinstance(old, dict) else "no settings recorded"


def software_change(old: dict, new: dict) -> str:
    """'cuda_sources 1a2b -> 3c4d, cupy 14.1 -> 14.2' for the fields that differ (of any two
    records: the settings use it too)."""
    fields = sorted(set(old) | set(new))
    return ", ".join(f"{f} {old.get(f)} -> {new.get(f)}" for f in fields if old.get(f) != new.get(f))


@dataclass(frozen=True)
class Lookup:
    entry: dict | None
    stale: str | None = None      # why an entry for this input was not used


# ------------------------------------------------------------------ the file

def _empty() -> dict:
    return {"schema": SCHEMA, "version": SCHEMA_VERSION, "entries": {}}


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class DecisionCache:
    def __init__(self, path: str | os.PathLike | None = None, *, read_only: bool = False, warn=None):
        self.path = Path(path) if path is not None else default_path()
        self.read_only = read_only
        self.warn = warn or _warn
        self.malformed: list[tuple[str, str]] = []   # (id, problem) of entries() skipped

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @property
    def probes_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".probes.jsonl")

    def _lock(self) -> filelock.FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S)

    # -------------------------------------------------------------- reading

    def _parse(self, raw: bytes) -> dict:
        """The document, or ValueError when it is corrupt. Schema problems are AutosageErrors."""
        doc = json.loads(raw.decode("utf-8"))   # JSONDecodeError / UnicodeDecodeError: ValueError
        if not isinstance(doc, dict):
            raise ValueError("top level is not a JSON object")
        if doc.get("schema") != SCHEMA:
            raise AutosageError(f"{self.path} is not an autosage decision cache "
                                f"(schema {doc.get('schema')!r}, expected {SCHEMA!r})")
        if doc.get("version") != SCHEMA_VERSION:
            raise AutosageError(f"{self.path} has cache schema version {doc.get('version')!r}; this "
                                f"autosage reads version {SCHEMA_VERSION} (pass another --cache or "
                                f"move the file aside)")
        if not isinstance(doc.get("entries"), dict):
            raise ValueError("'entries' is not an object")
        return doc

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _read(self, locked: bool) -> dict:
        """The document (the parsed one this process last saw when the file is unchanged: callers
        must not modify it; store() copies it first)."""
        signature = self._signature()
        memo = _PARSED.get(str(self.path))
        if memo is not None and signature is not None and memo[0] == signature:
            return memo[1]
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _empty()
        except OSError as exc:
            raise AutosageError(f"cannot read cache {self.path}: {exc.strerror or exc}") from None
        try:
            doc = self._parse(raw)
        except ValueError as exc:
            reason = "empty file" if not raw else " ".join(str(exc).split())
            if self.read_only:
                raise AutosageError(f"cache {self.path} is corrupt ({reason})") from None
            if not locked:
                with self._lock():
                    return self._read(locked=True)   # re-read: a writer may have just fixed it
            aside = self.path.with_name(
                f"{self.path.name}.corrupt-{_dt.datetime.now().strftime('%Y%m%dT%H%M%S%f')}")
            os.replace(self.path, aside)
            self.warn(f"cache {self.path} is corrupt ({reason}); moved aside to {aside}, "
                      f"starting an empty cache")
            return _empty()
        if signature is not None and signature == self._signature():
            _PARSED[str(self.path)] = (signature, doc)
        return doc

    def find(self, key: CacheKey) -> Lookup:
        entry = self._read(locked=False)["entries"].get(key.id)
        if entry is None:
            return Lookup(None)
        problem = entry_problem(entry)
        if problem:
            return Lookup(None, f"cache entry {key.id} is malformed ({problem}); re-tuning")
        recorded_dtype = entry.get("dtype") or "float32"   # entries from before dtypes were recorded
        if recorded_dtype != key.dtype:
            return Lookup(None, f"cached decision made for dtype {recorded_dtype}, not {key.dtype}; re-tuning")
        if entry.get("software") != key.software:
            change = software_change(entry.get("software") or {}, key.software)
            return Lookup(None, f"cached decision made with other software ({change}); re-tuning")
        if key.settings is not None and entry.get("settings") != jsonable(key.settings):
            change = settings_change(entry.get("settings"), key.settings)
            return Lookup(None, f"cached decision made with other settings ({change}); re-tuning")
        return Lookup(entry)

    def lookup(self, key: CacheKey) -> dict | None:
        return self.find(key).entry

    def entries(self) -> list[dict]:
        """Every well-formed entry (each with its "id"), oldest first. A malformed one is warned
        about with its key, skipped, and listed in `self.malformed` as (id, problem)."""
        doc = self._read(locked=False)
        items, self.malformed = [], []
        for entry_id, entry in doc["entries"].items():
            problem = entry_problem(entry)
            if problem:
                self.malformed.append((entry_id, problem))
                self.warn(f"cache {self.path}: entry {entry_id} is malformed ({problem}); skipped")
            else:
                items.append(dict(entry, id=entry_id))
        return sorted(items, key=lambda e: (str(e.get("created", "")), e["id"]))

    # -------------------------------------------------------------- writing

    @property
    def _temp_prefix(self) -> str:
        return f".{self.path.name}."

    def _remove_stale_temp_files(self) -> None:
        """Temporary files of writers that died mid-write (killed, out of disk). Every writer holds
        the lock while its temporary file exists, so under the lock any such file is stale."""
        for stale in self.path.parent.glob(f"{glob.escape(self._temp_prefix)}*{TEMP_SUFFIX}"):
            try:
                stale.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.warn(f"cannot remove the stale temporary file {stale}: {exc.strerror or exc}")

    def _write(self, doc: dict) -> None:
        self._remove_stale_temp_files()
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self._temp_prefix, suffix=TEMP_SUFFIX)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                # Compact: indented, a 250-entry cache took 5x longer to write (0.33 s, every tune);
                # `autosage inspect` is the readable view.
                json.dump(doc, fh, separators=(",", ":"), sort_keys=True, allow_nan=False)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            signature = self._signature()
            if signature is not None:
                _PARSED[str(self.path)] = (signature, doc)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def store(self, key: CacheKey, entry: dict, probe_records: list[dict] | None = None) -> dict:
        """Insert or replace the entry of `key` (and append `probe_records` to the JSONL log),
        under the lock. Returns the stored entry."""
        if self.read_only:
            raise AutosageError(f"cache {self.path} was opened read-only")
        try:
            with self._lock():
                read = self._read(locked=True)   # shared with the parse memo: not modified
                doc = {**read, "entries": dict(read["entries"])}
                old = doc["entries"].get(key.id) or {}
                stamp = now_iso()
                stored = jsonable({**entry, "key": key.to_dict(), "software": key.software,
                                   "created": old.get("created", stamp), "updated": stamp})
                doc["entries"][key.id] = stored
                self._write(doc)
                if probe_records:
                    self._append_probes(key, probe_records, stamp)
        except filelock.Timeout:
            raise AutosageError(f"cache {self.path} stayed locked for {LOCK_TIMEOUT_S} s "
                                f"(lock file {self.lock_path})") from None
        return dict(stored, id=key.id)

    def annotate(self, entry_id: str, fields: dict) -> None:
        """Add `fields` to the stored entry `entry_id` (scheduler.decisions.kinds records an entry's kind
        this way), under the lock; a missing entry is left missing."""
        if self.read_only:
            raise AutosageError(f"cache {self.path} was opened read-only")
        try:
            with self._lock():
                read = self._read(locked=True)
                if entry_id not in read["entries"]:
                    return
                doc = {**read, "entries": dict(read["entries"])}
                doc["entries"][entry_id] = jsonable({**doc["entries"][entry_id], **fields})
                self._write(doc)
        except filelock.Timeout:
            raise AutosageError(f"cache {self.path} stayed locked for {LOCK_TIMEOUT_S} s "
                                f"(lock file {self.lock_path})") from None

    def _append_probes(self, key: CacheKey, records: list[dict], stamp: str) -> None:
        with open(self.probes_path, "a", encoding="utf-8") as fh:
            for rec in records:
                # Each record names its case's op, width and dtype, so the log reads on its own.
                case = {"op": key.op, "k": key.k, "heads": key.heads, "dtype": key.dtype}
                fh.write(json.dumps(jsonable({"key": key.id, "time": stamp, **case, **rec}),
                                    sort_keys=True, allow_nan=False) + "\n")
