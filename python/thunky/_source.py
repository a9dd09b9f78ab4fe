"""Where in the user's code a command or an error comes from: the first
frame outside this package."""

import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def caller():
    """(file, line) of the innermost frame outside the thunky package."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _PACKAGE:
        f = f.f_back
    if f is None:
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def here(message):
    """`message` prefixed with the user's file and line."""
    file, line = caller()
    return f"{file}:{line}: {message}"
