"""What adding a compute op costs: the compiler names every place, and only those.

Copies the C++ tree, adds a compute op `dummy` (one line in THUNKY_OPS and its
description in core/ops/compute.h, as docs/code.md's "Adding an op" says),
and compiles every translation unit of the product's libraries and tools
(compile_commands.json; not the tests) that includes the op list, with
-fsyntax-only. The build must fail, and the files it fails in must be
exactly those docs/code.md lists under "The compiler stops at", no more and
no fewer.

Usage: new_op_test.py BUILD_DIR SOURCE_DIR
"""

import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# The product's code: its libraries and tools (their tests and benchmarks
# hold no per-op code), and the public headers they include.
CODE_DIRS = ["core", "sim", "exec", "traces", "tools", "api"]
HEADER_DIRS = ["include"]

DUMMY_LINE = "X(call, Call)"
DUMMY_DESCRIPTION = """
// A compute op added by tests/new_op_test.py.
struct Dummy : ComputeOp {
  static constexpr std::string_view json_name = "dummy";
  static constexpr bool flop_bound = false;
  static constexpr ComputeClass compute_class = ComputeClass::movement;
  Ref dst;
  static Dummy read(OpReader& r);
  void write(json& j) const;
  template <typename F> void uses(F&& f) const { f(RefUse{&dst, true}); }
};

}  // namespace thunky
"""


def listed_places(source):
    """The files docs/code.md says the compiler stops at for a new compute op."""
    text = open(os.path.join(source, "docs", "code.md"), encoding="utf-8").read()
    start = text.index("The compiler stops at")
    section = text[start:text.index("\n\n", text.index("\n   - ", start))]
    return sorted(set(re.findall(r"^\s+- `([\w/]+\.cc)`", section, re.M)))


def add_dummy_op(root):
    base = os.path.join(root, "core", "ops", "base.h")
    text = open(base, encoding="utf-8").read()
    assert DUMMY_LINE in text, "THUNKY_OPS no longer ends with " + DUMMY_LINE
    open(base, "w", encoding="utf-8").write(text.replace(DUMMY_LINE, DUMMY_LINE + " X(dummy, Dummy)"))
    compute = os.path.join(root, "core", "ops", "compute.h")
    text = open(compute, encoding="utf-8").read()
    end = text.rindex("}  // namespace thunky")
    open(compute, "w", encoding="utf-8").write(text[:end] + DUMMY_DESCRIPTION)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def reaches_op_list(source, path, seen):
    """Whether the file includes core/ops/base.h (THUNKY_OPS), through the
    project's own headers. A unit that does not cannot see a new op."""
    if path == "core/ops/base.h":
        return True
    if path in seen:
        return False
    seen.add(path)
    try:
        text = open(os.path.join(source, path), encoding="utf-8").read()
    except OSError:
        return False
    for name in INCLUDE.findall(text):
        for candidate in (name, os.path.join(os.path.dirname(path), name), os.path.join("include", name)):
            candidate = os.path.normpath(candidate)
            if os.path.exists(os.path.join(source, candidate)):
                if reaches_op_list(source, candidate, seen):
                    return True
                break
    return False


def failing_file(entry, source, copy):
    """The source path of the unit, relative to the tree, if it fails to compile."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a.replace(source, copy))
    out.append("-fsyntax-only")
    r = subprocess.run(out, cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode == 0:
        return None
    return os.path.relpath(entry["file"], source), r.stderr


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    listed = listed_places(source)
    assert listed, "docs/code.md lists no places under 'The compiler stops at'"
    entries, units = [], set()
    for e in json.load(open(os.path.join(build, "compile_commands.json"))):
        path = os.path.relpath(e["file"], source)
        if path.split(os.sep)[0] not in CODE_DIRS or path.endswith("_test.cc") or path in units:
            continue
        units.add(path)  # a unit built for two targets is compiled once
        if reaches_op_list(source, path, set()):
            entries.append(e)
    with tempfile.TemporaryDirectory(prefix="thunky_new_op_") as tmp:
        copy = os.path.join(tmp, "src")
        for d in CODE_DIRS + HEADER_DIRS:
            shutil.copytree(os.path.join(source, d), os.path.join(copy, d))
        add_dummy_op(copy)
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            results = [r for r in pool.map(lambda e: failing_file(e, source, copy), entries) if r]
    # A build without CUDA has no cuda units: their places are not checked.
    expected = [f for f in listed if f in units]
    failed = sorted({f for f, _ in results})
    print(f"{len(units)} units, {len(entries)} of them see THUNKY_OPS and were compiled; {len(failed)} fail with a dummy compute op: {', '.join(failed)}")
    if failed != expected:
        for f, err in results:
            if f not in expected:
                print(f"--- {f} fails but docs/code.md does not list it:\n{err[:3000]}")
        for f in expected:
            if f not in failed:
                print(f"--- docs/code.md lists {f}, but it compiles with the new op")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
