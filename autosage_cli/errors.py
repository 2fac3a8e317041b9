"""User-facing errors.

Every problem with the user's input (a file, an option, a dataset name) is raised as `AutosageError`
with a one-line message naming the problem. The CLI turns it into `Error: <message>` and exit code 2;
the library lets it propagate so callers can catch it.
"""


class AutosageError(Exception):
    """Bad input or an unusable environment, explained in one line."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line


class NoGPUError(AutosageError):
    """The operation needs a CUDA device and none is visible."""
