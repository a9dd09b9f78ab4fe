"""Running thunky's tools on a traced Program: finding them, carrying their
errors back to the user's source line, and reading what they write."""

import json
import math
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))


class ToolError(RuntimeError):
    """A thunky tool refused or failed: its message (against the user's
    source line where the tool named a command), and its exit code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def bundled_tool(name):
    """Tool `name` as a wheel ships it, inside the package (thunky/bin), or
    None: THUNKY_BIN first, when set."""
    env = os.environ.get("THUNKY_BIN")
    if env:
        path = os.path.join(env, name)
        return path if os.access(path, os.X_OK) else None
    path = os.path.join(_HERE, "bin", name)
    return path if os.access(path, os.X_OK) else None


def find_tool(name):
    """The path of tool `name`: THUNKY_BIN, then the package's own (a
    wheel's thunky/bin), then PATH, then the repository's build/."""
    env = os.environ.get("THUNKY_BIN")
    found = bundled_tool(name)
    if found:
        return found
    if env:
        raise ToolError(f"THUNKY_BIN is {env}, which has no {name}", 2)
    found = shutil.which(name)
    if found:
        return found
    build = os.path.join(_HERE, "..", "..", "build", name)
    if os.access(build, os.X_OK):
        return os.path.abspath(build)
    raise ToolError(f"cannot find {name}: pip install thunky's repository root (it builds the tools into the package), or build "
                    "them (bash scripts/test.sh, or cmake -S . -B build && cmake --build build) and put build/ on PATH or set THUNKY_BIN", 2)


def _run(tool, args, program, timeout):
    try:
        r = subprocess.run([find_tool(tool)] + args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{tool} did not finish within {timeout} s", 124) from None
    if r.returncode != 0:
        raise ToolError(_explain(r.stderr, program) + f" ({tool} exit {r.returncode})", r.returncode)
    return r.stdout


_LOCATED = re.compile(r"^[^:\n]*sched\.json:(/[^:\s]*): (.*)$")


def _explain(stderr, program):
    """The tool's first error line, against the user's line when it names a command."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    if not lines:
        return "the tool failed without a message"
    first = lines[0]
    m = _LOCATED.match(first)
    if m and program is not None:
        where = program.source_of(m.group(1))
        if where:
            return f"{where[0]}:{where[1]}: {m.group(2)}"
        return f"{m.group(1)}: {m.group(2)}"
    return first


class Report:
    """A report of thunky-sim (predicted) or thunky-exec (measured)."""

    def __init__(self, doc, table="", svg_text="", trace_text="", program=None):
        self._doc = doc
        self._sources = program.sources if program is not None else None
        self.table = table
        self._svg = svg_text
        self._trace = trace_text

    @property
    def makespan_s(self):
        return self._doc["makespan_s"]

    @property
    def source(self):
        return self._doc["source"]

    @property
    def ranks(self):
        """Per rank: compute, communication and exposed seconds, and the
        overlap; communication split into waiting for the other members and
        transfer (comm_s = wait_s + transfer_s), and the exposed part alike."""
        keys = ("compute_s", "comm_s", "exposed_comm_s", "wait_s", "transfer_s", "exposed_wait_s", "exposed_transfer_s",
                "compute_interference_s", "comm_interference_s")
        out = []
        for r in self._doc["ranks"]:
            s = r.get("stats", {})
            # overlap_fraction as report.json names it; overlap, its older name here, stays for the scripts that read it.
            fraction = s.get("overlap_fraction", 0.0)
            out.append({"rank": r["rank"], **{k: s.get(k, 0.0) for k in keys}, "overlap_fraction": fraction, "overlap": fraction})
        return out

    # Columns of ops beyond the timing, from each command's record where it has them.
    _OP_FIELDS = ("bytes", "flops", "algorithm", "solo_s", "interference_s")

    @property
    def ops(self):
        """Every command of every rank: rank, id, op, name, stream, start_s,
        end_s, for a collective transfer_start_s (when its data began to
        move; before it, the rank waited for the others), bytes, flops,
        algorithm (a collective's, under the NCCL model), solo_s and
        interference_s (predicted: its time alone and the time it lost to
        collectives beside it), and the user's
        source line (file:line) where the program was traced from Python;
        None where a command has no such figure."""
        out = []
        for r in self._doc["ranks"]:
            for o in r.get("ops", []):
                row = {"rank": r["rank"], "id": o["id"], "op": o["op"], "name": o.get("name", ""), "stream": o["stream"],
                       "start_s": o["start_s"], "end_s": o["end_s"], "transfer_start_s": o.get("transfer_start_s")}
                row.update({k: o.get(k) for k in self._OP_FIELDS})
                if self._doc.get("source") == "sim" and row["interference_s"] is None:
                    row["interference_s"], row["solo_s"] = 0.0, o["end_s"] - o["start_s"]  # nothing lost: it ran as alone
                where = self._sources.get(o["id"].split("#")[0]) if self._sources else None
                row["source"] = f"{where[0]}:{where[1]}" if where else None
                out.append(row)
        return out

    _COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute")

    @property
    def collectives(self):
        """Rank 0's collectives, one entry a command (a loop's instances
        together): id, op, count, bytes, and the mean, least and most seconds
        of their transfers (the wait for the other members left out, as the
        tools' tables)."""
        rows = {}
        rank0 = self._doc["ranks"][0] if self._doc["ranks"] else {"ops": []}
        for o in rank0.get("ops", []):
            if o["op"] not in self._COLLECTIVES:
                continue
            key = o["id"].split("#")[0]
            rows.setdefault(key, {"id": key, "op": o["op"], "bytes": o.get("bytes", 0), "times": []})["times"].append(o["end_s"] - o.get("transfer_start_s", o["start_s"]))
        out = []
        for r in rows.values():
            t = r.pop("times")
            out.append({**r, "count": len(t), "mean_s": sum(t) / len(t), "min_s": min(t), "max_s": max(t)})
        return out

    def to_dict(self):
        return json.loads(json.dumps(self._doc))

    def to_pandas(self):
        import pandas  # optional: only this method needs it
        return pandas.DataFrame(self.ops)

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self._doc, f)
        return path

    def svg(self, path=None):
        """The timeline as SVG (one lane per stream, rank rows): its text, or
        written to `path`."""
        if path is None:
            return self._svg
        with open(path, "w") as f:
            f.write(self._svg)
        return path

    def trace(self, path):
        """Writes the Chrome trace (Perfetto UI, chrome://tracing) to `path`."""
        with open(path, "w") as f:
            f.write(self._trace)
        return path

    def _repr_svg_(self):  # a notebook shows the timeline
        return self._svg

    def __repr__(self):
        return f"<thunky.Report {self.source} makespan {self.makespan_s * 1e6:.3f} us>"


class Result:
    """What execute gives back: `outputs`, the written arguments in order
    (global arrays for sharded ones), and the measured `report`."""

    def __init__(self, outputs, report, rank_outputs=None):
        self.outputs = outputs
        self.report = report
        self.rank_outputs = rank_outputs  # per written argument, each rank's values (execute(..., ranks=True))


def execute(program, backend="cpu", iters=3, warmup=1, timeout=None, ranks=False):
    if iters < 1 or warmup < 0:
        raise ValueError(f"execute runs warmup >= 0 unmeasured and iters >= 1 measured iterations, not warmup={warmup}, iters={iters}")
    with tempfile.TemporaryDirectory(prefix="thunky_") as d:
        sched = program.save(d)
        out = os.path.join(d, "out")
        report = os.path.join(d, "report.json")
        table = _run("thunky-exec", [sched, "--backend", backend, "--iters", str(iters), "--warmup", str(warmup), "--dump", out,
                                     "--report", report, "--svg", os.path.join(d, "t.svg"), "--trace", os.path.join(d, "t.json")],
                     program, timeout)
        rep = _read_report(d, table, program)
        n_ranks = math.prod(program.to_dict().get("mesh", {}).get("shape", [1])) if ranks else 0
        outputs, rank_outputs = [], []
        for name, b in program.buffers.items():
            if b.kind != "arg" or not b.written:
                continue
            value = _load(os.path.join(out, name + (".npy" if b.global_shape is not None else ".rank0.npy")), b.dtype)
            outputs.append(value)
            if b.host is not None:
                b.host.data[...] = value
            if ranks:
                rank_outputs.append([_load(os.path.join(out, f"{name}.rank{r}.npy"), b.dtype) for r in range(n_ranks)])
    return Result(outputs, rep, rank_outputs if ranks else None)


def _load(path, dtype):
    value = np.load(path)
    # bf16 and f8 are dumped widened to f32, which holds each of their values exactly: narrowing gives the bits back.
    return value.astype(dtype) if value.dtype != dtype else value


def simulate(program, machine="h100-8gpu", timeout=None, interference=True):
    with tempfile.TemporaryDirectory(prefix="thunky_") as d:
        sched = program.save(d)
        report = os.path.join(d, "report.json")
        flags = [] if interference else ["--no-interference"]
        table = _run("thunky-sim", [sched, "--machine", machine, *flags, "--report", report, "--svg", os.path.join(d, "t.svg"), "--trace",
                                    os.path.join(d, "t.json")], program, timeout)
        return _read_report(d, table, program)


def check(program, timeout=None):
    with tempfile.TemporaryDirectory(prefix="thunky_") as d:
        return _run("thunky-check", [program.save(d)], program, timeout)


def _read_report(d, table, program=None):
    texts = []
    for name in ("report.json", "t.svg", "t.json"):
        with open(os.path.join(d, name)) as f:
            texts.append(f.read())
    return Report(json.loads(texts[0]), table, texts[1], texts[2], program)


def _as_report(x, what):
    if isinstance(x, Result):
        return x.report
    if isinstance(x, Report):
        return x
    raise TypeError(f"thunky.compare's {what} is a Report (simulate) or a Result (execute), not {type(x).__name__}")


def compare(predicted, measured):
    """thunky-compare's figures (makespan error, mean error per command,
    commands matched) and its table. Each side is a Report or the Result
    of execute. A measurement of one cold iteration warns: it counts
    start-up costs that a warm run does not pay."""
    predicted, measured = _as_report(predicted, "predicted"), _as_report(measured, "measured")
    with tempfile.TemporaryDirectory(prefix="thunky_") as d:
        table = _run("thunky-compare", [predicted.save(os.path.join(d, "p.json")), measured.save(os.path.join(d, "m.json"))], None, None)
    if measured.source == "exec" and len(measured._doc.get("iteration_makespans_s", [])) == 1 and not measured._doc.get("warmup_iterations"):
        import warnings
        warnings.warn("thunky.compare: the measurement is a single cold iteration (execute(..., warmup=0, iters=1)); it counts "
                      "first-run costs a warm run does not pay: measure with warmup=1, iters=3 (the default)", stacklevel=2)
    m = re.search(r"makespan error ([-+0-9.]+)%; (\d+) commands matched, mean \|error\| per command ([0-9.]+)%", table)
    figures = {"table": table}
    if m:
        figures.update(makespan_error=float(m.group(1)) / 100, commands_matched=int(m.group(2)), mean_command_error=float(m.group(3)) / 100)
    return figures
