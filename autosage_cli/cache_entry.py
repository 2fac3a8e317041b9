"""What a usable decision-cache entry looks like. A file edited by hand, written by another version
or damaged can hold an entry with a field of the wrong type; `entry_problem` names the first such
field so the cache can skip that entry (saying which) while every other entry keeps working."""
from __future__ import annotations

NON_FINITE = ("inf", "-inf", "nan")   # how the cache stores non-finite floats (cache.jsonable)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _record_problem(field: str, records) -> str | None:
    """Candidates and vendor records: objects with a name; a usable ("ok") one has a time."""
    if not isinstance(records, list):
        return f"'{field}' is not a list"
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str):
            return f"'{field}'[{i}] is not an object with a name"
        ms = rec.get("ms")
        if rec.get("status") == "ok" and not _is_number(ms):
            return f"'{field}'[{i}] is ok but its ms is {ms!r}"
        for name in ("ms", "estimate_ms", "rel_error"):
            value = rec.get(name)
            if value is not None and not _is_number(value) and value not in NON_FINITE:
                return f"'{field}'[{i}].{name} is {value!r}, not a number"
        for name in ("status", "reason", "backend"):
            if not isinstance(rec.get(name, ""), str):
                return f"'{field}'[{i}].{name} is not a string"
    return None


# field -> (check, what it must be), for the fields an entry may carry
_ENTRY_FIELDS = {
    "graph": (lambda v: isinstance(v, dict) and isinstance(v.get("source", {}), dict)
              and isinstance(v.get("fingerprint", ""), str), "an object"),
    "op": (lambda v: isinstance(v, str), "a string"),
    "k": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "heads": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "dtype": (lambda v: isinstance(v, str), "a string"),
    "software": (lambda v: isinstance(v, dict), "an object"),
    "key": (lambda v: isinstance(v, dict), "an object"),
    "probe": (lambda v: isinstance(v, dict), "an object"),
    "timings": (lambda v: isinstance(v, dict), "an object"),
    "created": (lambda v: isinstance(v, str), "a string"),
}


def entry_problem(entry) -> str | None:
    """Why a stored entry cannot be used (a wrong type, a missing decision), or None."""
    if not isinstance(entry, dict):
        return f"it is a {type(entry).__name__}, not an object"
    decision = entry.get("decision")
    if not isinstance(decision, dict):
        return "'decision' is missing or not an object"
    for field in ("backend", "schedule"):
        if not isinstance(decision.get(field), str):
            return f"decision.{field} is {decision.get(field)!r}, not a string"
    if not isinstance(decision.get("params") or {}, dict):
        return "decision.params is not an object"
    for field, (ok, what) in _ENTRY_FIELDS.items():
        if field in entry and not ok(entry[field]):
            return f"'{field}' is not {what}"
    for field in ("candidates", "vendor"):
        if field in entry:
            problem = _record_problem(field, entry[field])
            if problem:
                return problem
    return None
