"""Shared pieces of the property-based (hypothesis) tests of the file readers and the cache.

A mutation is applied to a valid file's bytes: cut it short, flip a byte, replace a token with a huge,
negative, fractional, non-finite or non-numeric one, delete, duplicate or insert a line. Every
outcome of the real `autosage` entry point must be a correct graph or exit code 2 with one `Error:`
line: never a traceback, never "internal error", never a NumPy repr in a message, and never more
memory than the test's budget.
"""
from __future__ import annotations

import json
import re
import tracemalloc

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from cli_helpers import message_lines

EXAMPLES = 2000            # per file format; a format fuzzed by two tests gives each half
# The budget the fuzzed commands run under (AUTOSAGE_MEMORY_LIMIT) and the peak of traced Python and
# NumPy allocations each example may reach.
MEMORY_LIMIT = "256M"
PEAK_LIMIT_BYTES = 320 << 20


@pytest.fixture(autouse=True)
def memory_budget(monkeypatch):
    """Every fuzzed command runs under MEMORY_LIMIT (autouse where a test module imports it)."""
    monkeypatch.setenv("AUTOSAGE_MEMORY_LIMIT", MEMORY_LIMIT)

FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                HealthCheck.data_too_large])

NASTY_TOKENS = ["0", "-1", "-0", "1.5", "1e309", "-1e309", "nan", "NaN", "inf", "-inf", "abc", "",
                "2147483647", "2147483648", "4294967296", "9223372036854775807", "9223372036854775808",
                "99999999999999999999", "1000000000", "100000000", "1e9", "0x10", "1,2", "%", "#",
                "\x00", "é", "real", "pattern", "symmetric", "array", "complex", "skew-symmetric"]

token = st.one_of(st.sampled_from(NASTY_TOKENS), st.integers(-2**70, 2**70).map(str),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr))
mutation = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
    st.tuples(st.just("token"), st.floats(0, 1), token),
    st.tuples(st.just("delete_line"), st.floats(0, 1)),
    st.tuples(st.just("duplicate_line"), st.floats(0, 1)),
    st.tuples(st.just("insert_line"), st.floats(0, 1), st.lists(token, min_size=0, max_size=4)),
)
mutations = st.lists(mutation, min_size=1, max_size=4)


def _at(frac: float, n: int) -> int:
    return min(int(frac * n), max(n - 1, 0))


def mutate(data: bytes, steps) -> bytes:
    for step in steps:
        kind = step[0]
        if kind == "truncate":
            data = data[:_at(step[1], len(data) + 1)]
        elif kind == "flip":
            if data:
                i = _at(step[1], len(data))
                data = data[:i] + bytes([data[i] ^ step[2]]) + data[i + 1:]
        elif kind == "token":
            parts = re.split(rb"(\s+)", data)
            words = [i for i, p in enumerate(parts) if p and not p.isspace()]
            if words:
                parts[words[_at(step[1], len(words))]] = step[2].encode("utf-8", "surrogatepass")
                data = b"".join(parts)
        else:
            lines = data.split(b"\n")
            i = _at(step[1], len(lines))
            if kind == "delete_line":
                del lines[i]
            elif kind == "duplicate_line":
                lines.insert(i, lines[i])
            else:
                lines.insert(i, " ".join(step[2]).encode("utf-8", "surrogatepass"))
            data = b"\n".join(lines)
    return data


def assert_clean(result, allowed_codes=(0,)) -> None:
    """A success (exit code in allowed_codes) or exactly one `Error:` line with exit code 2."""
    assert "Traceback" not in result.stderr, result.stderr
    assert "internal error" not in result.stderr, result.stderr
    if result.exit_code in allowed_codes:
        return
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = message_lines(result.stderr)   # a busy machine may show a load's progress first
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert not re.search(r"np\.\w+\(", lines[0]), lines[0]


class PeakMemory:
    """tracemalloc's peak (Python objects and NumPy buffers) of each example, asserted under the
    limit. Started once per test; reset before every example."""

    def __enter__(self):
        tracemalloc.start()
        return self

    def __exit__(self, *exc):
        tracemalloc.stop()
        return False

    def check(self, run):
        tracemalloc.reset_peak()
        result = run()
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < PEAK_LIMIT_BYTES, f"peak {peak / 2**20:.0f} MiB"
        return result


def inspected(result) -> dict | None:
    return json.loads(result.stdout) if result.exit_code == 0 else None


HALF_SETTINGS = settings(FUZZ_SETTINGS, max_examples=EXAMPLES // 2)
