"""The console scripts a wheel installs (thunky-sim, thunky-exec, ...): each
replaces itself with the tool of the same name shipped in the package
(thunky/bin), so the tools are on the environment's PATH after `pip install`."""

import os
import sys

from ._tools import bundled_tool


def _run(name):
    path = bundled_tool(name)
    if path is None:
        sys.stderr.write(f"{name}: this thunky package has no tools of its own (it was installed from python/, not built as a "
                         "wheel): pip install the repository root, or set THUNKY_BIN to a build folder\n")
        sys.exit(2)
    os.execv(path, [name] + sys.argv[1:])


def sim():
    _run("thunky-sim")


def exec_():
    _run("thunky-exec")


def check():
    _run("thunky-check")


def gen():
    _run("thunky-gen")


def compare():
    _run("thunky-compare")


def calibrate():
    _run("thunky-calibrate")
