"""Tracing a thunky.jit function into a schedule (thunky.sched/1): the
commands its body issues, the buffers they touch (with the roles their
first accesses give), its streams' tokens, and each command's source line."""

import inspect
import json
import math

import numpy as np

from . import _source
from ._refs import dtype_name

_active = []  # the tracers of the traces under way, innermost last

# The dtypes NumPy lacks (ml_dtypes has them): their .npy files hold the raw
# bits, as this unsigned type, and the schedule's init names the dtype.
RAW_BITS = {"bf16": np.uint16, "f8e4m3": np.uint8, "f8e5m2": np.uint8}


def active():
    return _active[-1] if _active else None


def check_axis(name):
    t = active()
    if t is not None and name not in t.mesh:
        raise ValueError(_source.here(f"unknown axis name '{name}': the mesh has {list(t.mesh) or 'no axes'}"))


class Buffer:
    """A buffer of the schedule: an argument, a scratch buffer or a function
    parameter (`param`: its accesses are the caller's)."""

    def __init__(self, name, shape, dtype, kind, data=None, host=None, spec=None):
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.kind = kind  # "arg", "scratch" or "param"
        self.data = data  # the argument's values (global when sharded)
        self.host = host  # the HostBuffer that execute updates
        self.spec = spec  # PartitionSpec entries, when sharded
        self.global_shape = None
        self.first = None  # "read", or "write" once all of it was written before any read
        self.written = False
        self.covered = []  # [start, end) element ranges written for sure, merged
        self.axis_index = None  # an argument holding this rank's index along this axis
        self.read_as_axis = False  # call_jax read it as the axis' name: it may not be written

    def cover(self, start, count):
        """Notes a write of elements [start, start + count); whether every element is now written."""
        spans = sorted(self.covered + [[start, start + count]])
        merged = []
        for s, e in spans:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.covered = merged
        total = math.prod(self.shape)
        return merged[0][0] <= 0 and merged[0][1] >= total


class Token:
    def __init__(self, name, region, where):
        self.name, self.region, self.where = name, region, where
        self.done = False


class Program:
    """A traced schedule: `to_dict()`, `to_json()`, and the data and source
    lines that execute and error messages need."""

    def __init__(self, doc, buffers, sources, fn_name):
        self._doc = doc
        self.buffers = buffers
        self.sources = sources  # JSON pointer -> (file, line)
        self.name = fn_name

    def to_dict(self):
        return json.loads(json.dumps(self._doc))

    def to_json(self, indent=None):
        return json.dumps(self._doc, indent=indent)

    def simulate(self, machine="h100-8gpu", timeout=None, interference=True):
        """thunky-sim's prediction of this schedule on `machine`: a Report."""
        from ._tools import simulate
        return simulate(self, machine, timeout, interference)

    def check(self, timeout=None):
        """thunky-check's verdict (raises ToolError on a race or bad input)."""
        from ._tools import check
        return check(self, timeout)

    def save(self, directory):
        """Writes sched.json and, beside it, the .npy file of every
        argument's values that its init names (exact, bit for bit: bf16
        and the f8s as their raw bits); returns the schedule's path."""
        import os
        os.makedirs(directory, exist_ok=True)
        for name, b in self.buffers.items():
            init = self._doc["buffers"].get(name, {}).get("init", {})
            if init.get("kind") == "npy" and b.data is not None:
                data = np.ascontiguousarray(b.data)
                shape = b.global_shape if b.global_shape is not None else b.shape
                if data.shape != tuple(shape) and data.size == math.prod(shape):  # a (1,) array for a scalar buffer
                    data = data.reshape(shape)
                bits = RAW_BITS.get(init.get("dtype"))
                np.save(os.path.join(directory, init["path"]), data.view(bits) if bits is not None else data)
        path = os.path.join(directory, "sched.json")
        with open(path, "w") as f:
            json.dump(self._doc, f)
        return path

    def source_of(self, pointer):
        """The user's (file, line) of the command at `pointer`, or of the
        command that contains it."""
        best = None
        for p, where in self.sources.items():
            if (pointer == p or pointer.startswith(p + "/")) and (best is None or len(p) > len(best[0])):
                best = (p, where)
        return best[1] if best else None


class Tracer:
    def __init__(self, name, mesh):
        self.name = name
        self.mesh = mesh  # axis name -> size
        self.buffers = {}
        self.functions = {}
        self.program = []
        self.sources = {}
        self.blocks = [(self.program, "/program", 0)]  # (list, pointer, region)
        self.regions = 0
        self.tokens = []
        self.param_access = None  # while tracing a function body: its params' first accesses
        self.conditional = 0  # how many branches and loop bodies enclose the command being traced
        self.opaque = []  # call_jax's kernels: (pointer, primitive, why, (file, line)); execute refuses them
        # Buffers whose values come from an argument given by its shape alone
        # (name -> that argument), and the control flow that decides on them
        # without a sim hint: (op, (file, line), argument).
        self.unknown = {}
        self.value_dependent = []

    # ---- buffers that call_jax makes
    def new_scratch(self, hint, shape, dtype):
        """A scratch buffer of the function being traced (or of the program)."""
        from ._refs import Ref
        fname = next((base.split("/")[2] for _, base, _ in reversed(self.blocks) if base.startswith("/functions/")), None)
        if fname is None:
            b = Buffer(_unique(hint, self.buffers), shape, dtype, "scratch")
            self.buffers[b.name] = b
            return Ref(b, b.shape)
        f = self.functions[fname]
        scratch = f.setdefault("scratch", {})
        name = _unique(hint, set(scratch) | set(f["params"]) | set(self.buffers))
        scratch[name] = {"shape": list(shape), "dtype": dtype_name(dtype)}
        return Ref(Buffer(name, shape, dtype, "scratch"), tuple(shape))

    def drop_scratch(self, ref):
        """Forgets a scratch buffer that new_scratch made and nothing uses."""
        b = ref._buffer
        if self.buffers.get(b.name) is b:
            del self.buffers[b.name]
            return
        for f in self.functions.values():
            f.get("scratch", {}).pop(b.name, None)

    def new_constant(self, hint, values):
        """An input buffer of the program that holds `values` (functions see it too)."""
        from ._refs import Ref
        b = Buffer(_unique(hint, self.buffers), values.shape, values.dtype, "arg", data=values)
        self.buffers[b.name] = b
        return Ref(b, b.shape)

    def check_axis(self, name, where):
        if name not in self.mesh:
            raise ValueError(f"{where[0]}:{where[1]}: unknown axis name '{name}': the mesh has {list(self.mesh) or 'no axes'}")

    # ---- commands
    def emit(self, cmd, reads=(), writes=()):
        block, base, _ = self.blocks[-1]
        pointer = f"{base}/{len(block)}"
        self.sources[pointer] = _source.caller()
        for r in reads:
            self.access(r, "read")
        for r in writes:
            self.access(r, "write")
        self._follow_unknown(cmd, reads, writes, self.sources[pointer])
        block.append(cmd)
        return pointer

    def _follow_unknown(self, cmd, reads, writes, where):
        """What a command computes from values not given is not known
        either; a decision on it (without a sim hint) is noted."""
        source = next((self.unknown[r._buffer.name] for r in reads if r._buffer.name in self.unknown), None)
        if source is None:
            return
        for w in writes:
            self.unknown.setdefault(w._buffer.name, source)
        if cmd.get("op") in ("cond", "switch", "while") and "sim" not in cmd:
            self.value_dependent.append((cmd["op"], where, source))

    def region(self, pointer_suffix, body_fn, new_region=True, conditional=None):
        """Traces body_fn() into a new command list at `pointer_suffix` of the
        command about to be emitted; returns the list. A new region (a
        branch, a loop) is conditional unless told otherwise: its writes
        may not happen, so they do not make an argument an output."""
        conditional = new_region if conditional is None else conditional
        block, base, region = self.blocks[-1]
        commands = []
        if new_region:
            self.regions += 1
            region = self.regions
        self.blocks.append((commands, f"{base}/{len(block)}/{pointer_suffix}", region))
        self.conditional += conditional
        try:
            body_fn()
        finally:
            self.blocks.pop()
            self.conditional -= conditional
        return commands

    def access(self, ref, kind):
        """Notes a read or a write of `ref`. A buffer is an output when its
        writes cover all of it before any read; a write that a branch or
        loop may skip, or at an offset that depends on the rank, is an
        "update", which covers nothing: the values it leaves are the caller's."""
        b = ref._buffer
        if not isinstance(b, Buffer):
            raise TypeError(_source.here(f"{ref.text} is not a Ref of this trace"))
        if kind != "read" and b.read_as_axis:
            raise ValueError(_source.here(f"{b.name} holds the index along axis '{b.axis_index}', which call_jax read as such: it may not be written"))
        offset, count = ref._buffer_span()
        if kind == "write" and (self.conditional or offset is None):
            kind = "update"
        if kind == "read" and b.first is None:
            b.first = "read"
        if kind == "write":
            if b.first is None and b.cover(offset, count):
                b.first = "write"
            if offset != 0 or count != math.prod(b.shape):
                kind = "update"  # what a function's caller learns: part of the parameter
        if kind != "read":
            if b.kind == "arg" and b.host is None and b.data is not None:
                raise TypeError(_source.here(f"argument '{b.name}' is written but was passed as a plain array: it must be passed as a Ref "
                                              "(thunky.new_ref(...), or jax.new_ref(...) under JAX)"))
            b.written = True
        if b.kind == "param" and self.param_access is not None:
            self.param_access.setdefault(b.name, []).append(kind)

    def new_token(self):
        _, _, region = self.blocks[-1]
        t = Token(f"t{len(self.tokens)}", region, _source.caller())
        self.tokens.append(t)
        return t

    def region_id(self):
        return self.blocks[-1][2]


def _scratch_list(scratch_shapes):
    """(positional, keyword) scratch shapes: a single shape, a list or tuple
    (trailing arguments) or a dict (keyword arguments)."""
    if hasattr(scratch_shapes, "shape") and hasattr(scratch_shapes, "dtype"):
        return [scratch_shapes], {}
    if isinstance(scratch_shapes, dict):
        return [], dict(scratch_shapes)
    if isinstance(scratch_shapes, (list, tuple)):
        for s in scratch_shapes:
            # An entry may itself be a list of shapes: its argument is then a list of Refs.
            for x in (s if isinstance(s, (list, tuple)) else (s,)):
                if not (hasattr(x, "shape") and hasattr(x, "dtype")):
                    raise TypeError(f"scratch_shapes entries need .shape and .dtype (a ShapeDtypeStruct), or are lists of such, "
                                    f"not {type(x).__name__}")
        return list(scratch_shapes), {}
    raise TypeError(f"scratch_shapes is a ShapeDtypeStruct, a list, a tuple or a dict, not {type(scratch_shapes).__name__}")


def scratch_refs(base, shape, make):
    """The argument of one scratch_shapes entry: make(name, shape) for a
    shape, or a list of them (named base0, base1, ...) for a list."""
    if isinstance(shape, (list, tuple)):
        return [make(f"{base}{i}", x) for i, x in enumerate(shape)]
    return make(base, shape)


def _param_names(fn, count):
    try:
        params = [p for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        params = []
    names = []
    for k in range(count):
        if k < len(params) and params[k].kind in (params[k].POSITIONAL_ONLY, params[k].POSITIONAL_OR_KEYWORD):
            names.append(params[k].name)
        elif params and params[-1].kind == params[-1].VAR_POSITIONAL or k >= len(params):
            base = params[-1].name if params and params[-1].kind == params[-1].VAR_POSITIONAL else "arg"
            names.append(f"{base}{k}")
        else:
            names.append(f"arg{k}")
    return names


def _unique(name, taken):
    if not name.isidentifier():
        name = "b_" + "".join(c if c.isalnum() else "_" for c in name)
    out, k = name, 1
    while out in taken or out in ("ds", "min", "max"):
        out = f"{name}_{k}"
        k += 1
    return out
