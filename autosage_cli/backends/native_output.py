"""What a native library prints while it refuses a call, kept with the refusal instead of on the
user's terminal.

cuSPARSE prints "** On entry to cusparseSDDMM_bufferSize() ..." through the C runtime when it
refuses a value type, before returning the status the caller records anyway. `captured()` points
file descriptors 1 and 2 at a temporary file for the length of one such call (C stdio flushed on
both sides, so buffered text lands inside the window) and hands back what was written; the caller
decides whether it belongs in a message or back on the terminal (`release`). `query_or_refuse` is
the whole pattern of cuSPARSE's workspace queries in a value type it may refuse."""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile

MAX_CAPTURED = 4096   # bytes kept; a refusal's text is one or two lines


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)   # every C stdio stream


class Captured:
    """The text native code wrote to fds 1 and 2 inside the block (set when the block ends)."""

    def __init__(self) -> None:
        self.text = ""

    def release(self) -> None:
        """Write the captured text to stderr after all: it was not a refusal's."""
        if self.text:
            sys.stderr.write(self.text)
            sys.stderr.flush()


@contextlib.contextmanager
def captured(fds: tuple[int, ...] = (1, 2)):
    box = Captured()
    _flush_all()
    saved = {fd: os.dup(fd) for fd in fds}
    with tempfile.TemporaryFile() as sink:
        for fd in fds:
            os.dup2(sink.fileno(), fd)
        try:
            yield box
        finally:
            _flush_all()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            box.text = sink.read(MAX_CAPTURED).decode("utf-8", "replace")


def first_line(text: str) -> str:
    """The first non-blank line of captured text, stripped ("" when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def call_quietly(call, catch: type[BaseException] | tuple = Exception):
    """call() with native output captured: (result, None, printed) when it returns, anything printed
    written back to stderr; (None, the exception, printed) when it raises one of `catch`, the text
    left to the caller (a refusal's message, or `printed.release()`)."""
    with captured() as printed:
        try:
            result, error = call(), None
        except catch as exc:
            result, error = None, exc
    if error is None:
        printed.release()
    return result, error, printed


def refusal_suffix(printed: Captured) -> str:
    """' (the library printed: <its first line>)', or '' when it printed nothing."""
    said = first_line(printed.text)
    return f" (the library printed: {said})" if said else ""


class DtypeRefused(RuntimeError):
    """cuSPARSE returned a status refusing a call in this value type."""


def query_or_refuse(call, dtype: str, what: str, close, catch: type[BaseException] | tuple = Exception):
    """call() (a cuSPARSE workspace query) with what the library prints captured. A failure in
    float32 is raised as it is, its printed text back on stderr; in another type it is the type's
    refusal: close() frees the caller's descriptors, then DtypeRefused names `what`, the type, the
    status and the first line the library printed."""
    result, refusal, printed = call_quietly(call, catch)
    if refusal is None:
        return result
    if dtype == "float32":
        printed.release()
        raise refusal
    close()
    raise DtypeRefused(f"{what} refuses {dtype} (float32 compute): {refusal}"
                       + refusal_suffix(printed)) from None
