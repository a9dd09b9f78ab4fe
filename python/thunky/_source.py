"""Where in the user's code a command or an error comes from: the first
frame outside this package."""

import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_inside = {}  # file name -> whether it is one of the package's


def _ours(filename):
    known = _inside.get(filename)
    if known is None:
        known = _inside[filename] = os.path.dirname(os.path.abspath(filename)) == _PACKAGE
    return known


def caller():
    """(file, line) of the innermost frame outside the thunky package."""
    f = sys._getframe(1)
    while f is not None and _ours(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def here(message):
    """`message` prefixed with the user's file and line."""
    file, line = caller()
    return f"{file}:{line}: {message}"
