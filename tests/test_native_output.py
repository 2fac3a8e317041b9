"""Capturing what native code prints around one library call (backends/native_output.py): text
written to file descriptors 1 and 2, by the OS or by C stdio, is kept; the descriptors are restored
afterwards, also when the call raises; text that was not a refusal's can be written back."""
from __future__ import annotations

import ctypes
import os

import pytest

from autosage_cli.backends import native_output


def test_writes_to_both_descriptors_and_c_stdio_are_captured_and_the_terminal_is_restored(capfd):
    libc = ctypes.CDLL(None)
    with native_output.captured() as printed:
        os.write(2, b"** On entry to cusparseSDDMM_bufferSize() parameter number 10 had an illegal value\n")
        os.write(1, b"from stdout\n")
        libc.printf(b"from C stdio\n")    # buffered by the C runtime: flushed inside the window
    assert "On entry to cusparseSDDMM_bufferSize()" in printed.text
    assert "from stdout" in printed.text and "from C stdio" in printed.text
    assert native_output.first_line(printed.text).startswith("** On entry to cusparseSDDMM")
    os.write(2, b"after\n")
    out, err = capfd.readouterr()
    assert err == "after\n" and "On entry" not in out + err


def test_descriptors_are_restored_when_the_call_raises(capfd):
    with pytest.raises(RuntimeError, match="refused"):
        with native_output.captured() as printed:
            os.write(2, b"noise\n")
            raise RuntimeError("refused")
    assert printed.text == "noise\n"
    os.write(2, b"still here\n")
    assert capfd.readouterr().err == "still here\n"


def test_release_writes_the_text_back_to_stderr(capfd):
    with native_output.captured() as printed:
        os.write(2, b"a warning that was not a refusal\n")
    assert capfd.readouterr().err == ""
    printed.release()
    assert capfd.readouterr().err == "a warning that was not a refusal\n"
    assert native_output.first_line("\n  \n") == ""


def test_call_quietly_keeps_a_refusals_text_and_releases_a_successs(capfd):
    def refuse():
        os.write(2, b"** On entry to cusparseSpMM_bufferSize()\n")
        raise ValueError("CUSPARSE_STATUS_NOT_SUPPORTED")

    result, error, printed = native_output.call_quietly(refuse, ValueError)
    assert result is None and "NOT_SUPPORTED" in str(error)
    assert native_output.refusal_suffix(printed) == (" (the library printed: ** On entry to "
                                                     "cusparseSpMM_bufferSize())")
    assert capfd.readouterr().err == ""

    def succeed():
        os.write(2, b"a note\n")
        return 42

    result, error, printed = native_output.call_quietly(succeed)
    assert (result, error) == (42, None)
    assert capfd.readouterr().err == "a note\n"
    with pytest.raises(KeyError):       # what `catch` does not name propagates
        native_output.call_quietly(lambda: {}["x"], ValueError)
