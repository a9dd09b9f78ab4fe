"""thunky.jit: a function that issues commands, traced into a schedule,
then predicted (simulate) or run (execute) by thunky's tools."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np

from . import _jax, _source, _tools, _trace
from ._refs import AxisIndexValue, HostBuffer, Ref, dtype_name


# What a mesh may be given as, and a shape-only argument's fill.
MeshLike = Union["Mesh", Dict[str, int], Any, None]
Fill = Union[str, Dict[str, Any], None]


class Mesh:
    """A mesh of named axes: Mesh({"x": 4, "y": 2}) (row-major, the last
    axis fastest, as thunky's ranks are numbered)."""

    def __init__(self, axes):
        axes = dict(axes)
        for name, size in axes.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"a mesh axis name is an identifier, not {name!r}")
            if not isinstance(size, (int, np.integer)) or size < 1:
                raise ValueError(f"mesh axis '{name}' needs a positive size, not {size!r}")
        self.axes = {k: int(v) for k, v in axes.items()}

    @property
    def size(self):
        return math.prod(self.axes.values())


class P(tuple):
    """A PartitionSpec: P("x"), P(None, "y"), P(("x", "y"), None)."""

    def __new__(cls, *entries):
        return super().__new__(cls, entries)


def _mesh_axes(mesh):
    if mesh is None:
        return {}
    if isinstance(mesh, Mesh):
        return dict(mesh.axes)
    if isinstance(mesh, dict):
        return Mesh(mesh).axes
    if hasattr(mesh, "axis_names") and hasattr(mesh, "devices"):  # jax.sharding.Mesh
        return Mesh(dict(zip(mesh.axis_names, np.shape(mesh.devices)))).axes
    raise TypeError(f"mesh is a dict of axis sizes, a thunky.Mesh or a jax.sharding.Mesh, not {type(mesh).__name__}")


def _spec_entries(spec, ndim, axes, what):
    if spec is None:
        return None
    entries = list(spec) + [None] * (ndim - len(spec))
    if len(entries) > ndim:
        raise ValueError(_source.here(f"{what}: the spec {tuple(spec)} has more entries than the array's {ndim} dimensions"))
    out = []
    for e in entries:
        names = [] if e is None else [e] if isinstance(e, str) else list(e)
        for n in names:
            if n not in axes:
                raise ValueError(_source.here(f"{what}: unknown axis name '{n}' in in_specs: the mesh has {list(axes) or 'no axes'}"))
        out.append(None if e is None else e if isinstance(e, str) else list(e))
    return out


def _local_shape(shape, entries, axes, what):
    local = list(shape)
    for d, e in enumerate(entries):
        if e is None:
            continue
        parts = math.prod(axes[n] for n in ([e] if isinstance(e, str) else e))
        if shape[d] % parts:
            raise ValueError(_source.here(f"{what}: dimension {d} of size {shape[d]} does not divide into {parts} shards"))
        local[d] = shape[d] // parts
    return local


class JitFunction:
    def __init__(self, fn, scratch_shapes):
        self.fn = fn
        self.scratch, self.scratch_kw = _trace._scratch_list(scratch_shapes)
        self.__name__ = getattr(fn, "__name__", "thunky_program")
        functools.update_wrapper(self, fn)

    # ---- tracing
    def trace(self, *args: Any, mesh: MeshLike = None, in_specs: Optional[Sequence[Any]] = None, fill: Fill = None) -> _trace.Program:
        """The schedule this function issues for `args` (arrays, Refs, or
        anything with .shape and .dtype) on `mesh` (axis sizes), each
        argument split as its `in_specs` entry says (None: replicated).
        An argument given by its shape alone starts as `fill` says:
        "zeros" (the default), "ones", "uniform" ([0, 1), seeded),
        "normal", or an init of the schedule format as a dict."""
        axes = _mesh_axes(mesh)
        fill_init = _fill_init(fill)
        if in_specs is not None and not isinstance(in_specs, (tuple, list)):
            in_specs = (in_specs,)
        if in_specs is not None and len(in_specs) != len(args):
            raise ValueError(_source.here(f"in_specs has {len(in_specs)} entries for {len(args)} arguments"))
        t = _trace.Tracer(self.__name__, axes)
        names = _trace._param_names(self.fn, len(args) + len(self.scratch))
        refs = []
        for k, a in enumerate(args):
            refs.append(self._argument(t, names[k], a, None if in_specs is None else in_specs[k], axes))
        for k, s in enumerate(self.scratch):
            refs.append(_trace.scratch_refs(names[len(args) + k], s, lambda n, x: self._scratch(t, n, x)))
        kwrefs = {name: self._scratch(t, name, s) for name, s in self.scratch_kw.items()}
        _trace._active.append(t)
        try:
            result = self.fn(*refs, **kwrefs)
        finally:
            _trace._active.pop()
        if result is not None:
            raise TypeError(_source.here(f"a thunky.jit function returns None (it writes its Refs), not {type(result).__name__}"))
        for tok in t.tokens:
            if not tok.done:
                raise ValueError(f"{tok.where[0]}:{tok.where[1]}: the token of this async_start is never awaited (thunky.async_done)")
        program = _trace.Program(self._document(t, fill_init), t.buffers, t.sources, self.__name__)
        program.opaque = t.opaque
        program.value_dependent = t.value_dependent
        return program

    def _argument(self, t, name, a, spec, axes):
        host = None
        if isinstance(a, AxisIndexValue):
            if a.axis not in axes:
                raise ValueError(_source.here(f"argument '{name}': unknown axis name '{a.axis}': the mesh has {list(axes) or 'no axes'}"))
            b = _trace.Buffer(_trace._unique(name, t.buffers), (), a.dtype, "arg", host=HostBuffer(np.zeros((), a.dtype)))
            b.axis_index = a.axis
            t.buffers[b.name] = b
            return Ref(b, ())
        if isinstance(a, Ref):
            if a._groups:
                raise ValueError(_source.here(f"argument '{name}': pass the whole Ref, not a view of it"))
            if isinstance(a._buffer, HostBuffer):
                host = a._buffer
                data = host.data
            else:
                raise TypeError(_source.here(f"argument '{name}' is a Ref of another trace"))
        elif isinstance(a, np.ndarray) or np.isscalar(a):
            data = np.asarray(a)
        elif hasattr(a, "shape") and hasattr(a, "dtype"):
            data = np.asarray(a) if _has_values(a) else None
        else:
            raise TypeError(_source.here(f"argument '{name}' is an array, a Ref or has .shape and .dtype, not {type(a).__name__}"))
        shape = tuple(data.shape) if data is not None else tuple(a.shape)
        dtype = data.dtype if data is not None else np.dtype(a.dtype)
        try:
            dtype_name(dtype)
        except TypeError as e:
            raise TypeError(_source.here(f"argument '{name}': {e}")) from None
        entries = _spec_entries(spec, len(shape), axes, f"argument '{name}'")
        local = _local_shape(shape, entries, axes, f"argument '{name}'") if entries else shape
        b = _trace.Buffer(_trace._unique(name, t.buffers), local, dtype, "arg", data=data, host=host, spec=entries)
        if data is None:  # a shape alone: it starts as `fill` says, and what it decides is not known
            t.unknown[b.name] = b.name
        if entries:
            b.global_shape = shape
        t.buffers[b.name] = b
        return Ref(b, local)

    def _scratch(self, t, name, s):
        b = _trace.Buffer(_trace._unique(name, t.buffers), tuple(s.shape), np.dtype(s.dtype), "scratch")
        t.buffers[b.name] = b
        return Ref(b, b.shape)

    def _document(self, t, fill_init):
        doc = {"format": "thunky.sched/1", "name": self.__name__}
        if t.mesh:
            doc["mesh"] = {"axis_names": list(t.mesh), "shape": list(t.mesh.values())}
        doc["buffers"] = {}
        for b in t.buffers.values():
            entry = {"shape": list(b.shape), "dtype": dtype_name(b.dtype)}
            if b.kind == "arg":
                entry["role"] = "input" if not b.written else ("output" if b.first == "write" else "inout")
                if b.axis_index is not None:
                    entry["init"] = {"kind": "axis_index", "axis": b.axis_index}
                elif entry["role"] != "output" and b.data is not None:
                    # The values go as a binary file beside the schedule (Program.save writes it), never as
                    # JSON: bf16 and the f8s, which NumPy lacks, as their raw bits with the dtype named.
                    entry["init"] = {"kind": "npy", "path": b.name + ".npy"}
                    if entry["dtype"] in _trace.RAW_BITS:
                        entry["init"]["dtype"] = entry["dtype"]
                elif entry["role"] != "output":
                    entry["init"] = dict(fill_init)
                if b.global_shape is not None:
                    entry["global"] = {"shape": list(b.global_shape), "spec": b.spec}
            doc["buffers"][b.name] = entry
        if t.functions:
            doc["functions"] = t.functions
        doc["program"] = t.program
        return doc

    # ---- nested calls
    def __call__(self, *args, **kwargs):
        t = _trace.active()
        if t is None and not kwargs and any(_jax.is_jax_value(a) for a in args):
            return _jax.call(self, args)  # from jax.jit, shard_map, or with jax arrays and Refs
        if t is None:
            # Called eagerly, as upstream runs it on a GPU: on the cpu backend.
            if kwargs:
                self.execute(*args, **kwargs)
            else:
                self._run_eagerly(args)
            return None
        if kwargs:
            raise TypeError(_source.here("a nested thunky.jit call takes its Refs positionally"))
        if any(_jax.is_jax_value(a) for a in args):
            return _jax.nested_call(self, args)  # inside a function given to call_jax: lowered as a call of this one
        return self._call(t, args)

    def _run_eagerly(self, args):
        """Runs the schedule for `args` on the cpu backend; returns the Result."""
        program = self._cached_trace(args)
        _refuse_opaque(program)
        return _tools.execute(program)

    def _cached_trace(self, args, mesh=None):
        """The trace of `args`, made once for each signature of arguments
        (kinds, shapes, dtypes, mesh), as upstream caches a trace: a second
        call with the same shapes runs the same schedule on its own values."""
        key = _signature(args)
        if key is not None and mesh:
            key += (tuple(mesh.items()),)
        cache = self.__dict__.setdefault("_eager_traces", {})
        program = cache.get(key) if key is not None else None
        if program is None:
            program = self.trace(*args, mesh=mesh or None)
            if key is not None and len(cache) < 16:
                cache[key] = program
            return program
        for a, name in zip(args, list(program.buffers)[: len(args)]):
            b = program.buffers[name]
            if isinstance(a, Ref):
                b.host, b.data = a._buffer, a._buffer.data
            elif not isinstance(a, AxisIndexValue) and b.data is not None:
                b.data = np.asarray(a)
        return program

    def _call(self, t, args):
        for k, a in enumerate(args):
            if not isinstance(a, Ref) or not isinstance(a._buffer, _trace.Buffer):
                raise TypeError(_source.here(f"argument {k} of a nested thunky.jit call is a Ref of the trace, not {type(a).__name__}"))
        key = (self.fn, tuple((a.shape, a.dtype.str) for a in args))
        cache = t.__dict__.setdefault("jit_cache", {})
        if key not in cache:
            cache[key] = self._trace_function(t, args)
        fname, params, accesses = cache[key]
        pointer = t.emit({"op": "call", "fn": fname, "args": {p: a.text for p, a in zip(params, args)}})
        for p, a in zip(params, args):
            for kind in accesses.get(p, ()):
                t.access(a, kind)
        return pointer

    def _trace_function(self, t, args):
        fname = _trace._unique(self.__name__, t.functions)
        taken = set(t.buffers)
        params = []
        for name in _trace._param_names(self.fn, len(args) + len(self.scratch))[: len(args)]:
            params.append(_trace._unique(name, taken | set(params)))
        refs = [Ref(_trace.Buffer(p, a.shape, a.dtype, "param"), a.shape) for p, a in zip(params, args)]
        scratch = {}
        def one(base, s):
            name = _trace._unique(base, taken | set(params) | set(scratch))
            scratch[name] = {"shape": list(s.shape), "dtype": dtype_name(s.dtype)}
            return Ref(_trace.Buffer(name, s.shape, s.dtype, "scratch"), tuple(s.shape))

        for k, s in enumerate(self.scratch):
            refs.append(_trace.scratch_refs(_trace._param_names(self.fn, len(args) + len(self.scratch))[len(args) + k], s, one))
        body = []
        t.functions[fname] = {"params": params, "program": body}
        if scratch:
            t.functions[fname]["scratch"] = scratch
        saved_access, t.param_access = t.param_access, {}
        t.blocks.append((body, f"/functions/{fname}/program", t.region_id()))
        try:
            self.fn(*refs)
        finally:
            t.blocks.pop()
            accesses, t.param_access = t.param_access, saved_access
        return fname, params, accesses

    # ---- running
    def execute(self, *args: Any, mesh: MeshLike = None, in_specs: Optional[Sequence[Any]] = None, backend: str = "cpu", iters: int = 3,
                warmup: int = 1, timeout: Optional[float] = None, ranks: bool = False, fill: Fill = None) -> _tools.Result:
        """Runs the schedule with thunky-exec (`warmup` runs, then `iters`
        measured; the report is the median one); returns a Result whose
        .outputs are the written arguments (global for sharded ones) and
        whose .report is the measured Report. Refs passed are updated.
        With ranks=True, .rank_outputs also holds each rank's values."""
        program = self.trace(*args, mesh=mesh, in_specs=in_specs, fill=fill)
        _refuse_opaque(program)
        return _tools.execute(program, backend=backend, iters=iters, warmup=warmup, timeout=timeout, ranks=ranks)

    def simulate(self, *args: Any, machine: str = "h100-8gpu", mesh: MeshLike = None, in_specs: Optional[Sequence[Any]] = None,
                 timeout: Optional[float] = None, fill: Fill = None, interference: bool = True) -> _tools.Report:
        """The predicted Report of thunky-sim on `machine`. Arguments may be
        shapes alone (thunky.ShapeDtypeStruct, jax.ShapeDtypeStruct):
        nothing is allocated for them. interference=False prices every
        command as if it ran alone (thunky-sim --no-interference)."""
        program = self.trace(*args, mesh=mesh, in_specs=in_specs, fill=fill)
        _refuse_unknown_decisions(program)
        return _tools.simulate(program, machine=machine, timeout=timeout, interference=interference)

    def check(self, *args: Any, mesh: MeshLike = None, in_specs: Optional[Sequence[Any]] = None, fill: Fill = None,
              timeout: Optional[float] = None) -> str:
        """thunky-check's verdict on the schedule (views, roles, races,
        collective order on every rank): its report as text; a ToolError
        naming the user's line where it refuses."""
        program = self.trace(*args, mesh=mesh, in_specs=in_specs, fill=fill)
        return _tools.check(program, timeout=timeout)


def _refuse_opaque(program):
    """No backend computes an opaque kernel: running one is refused at its line."""
    for _, primitive, why, (file, line) in program.opaque:
        raise ValueError(f"{file}:{line}: call_jax: {primitive} is not lowered ({why}): it is an opaque kernel, which "
                         "thunky-sim prices but no backend computes; simulate() predicts this program")


def _signature(args):
    """What a trace of `args` depends on (kind, shape and dtype of each),
    or None where it depends on more (a view of a Ref, a rank's index)."""
    out = []
    for a in args:
        if isinstance(a, Ref):
            if a._groups or not isinstance(a._buffer, HostBuffer):
                return None
            out.append(("ref", a.shape, a.dtype.str))
        elif isinstance(a, np.ndarray) or np.isscalar(a):
            v = np.asarray(a)
            out.append(("array", v.shape, v.dtype.str))
        else:
            return None
    return tuple(out)


def _has_values(a):
    """Whether `a` holds values (an array) rather than a shape alone
    (jax.ShapeDtypeStruct, thunky.ShapeDtypeStruct, jax's abstract values)."""
    if type(a).__name__ in ("ShapeDtypeStruct", "ShapedArray"):
        return False
    return hasattr(a, "__array__")


_FILLS = ("zeros", "ones", "uniform", "normal")


def _fill_init(fill):
    """The init of a shape-only argument: fill=None or "zeros", "ones",
    "uniform" (seeded, [0, 1)), "normal", or a schedule init as a dict."""
    if fill is None:
        return {"kind": "zeros"}
    if isinstance(fill, dict):
        if "kind" not in fill:
            raise ValueError(_source.here(f"fill as a dict is an init of the schedule format, with a 'kind': not {fill!r}"))
        return dict(fill)
    if fill not in _FILLS:
        raise ValueError(_source.here(f"fill is one of {', '.join(_FILLS)} or an init dict, not {fill!r}"))
    return {"kind": fill, **({"seed": 0} if fill in ("uniform", "normal") else {})}


def _refuse_unknown_decisions(program):
    """Control flow that depends on an argument given by its shape alone
    cannot be decided: say where, and how to decide it."""
    for what, (file, line), arg in program.value_dependent:
        hint = {"cond": "thunky.cond(..., taken=True)", "switch": "thunky.switch(..., branch=k)",
                "while": "thunky.while_loop(..., trip_count=N)"}[what]
        raise ValueError(f"{file}:{line}: this {what} decides on values computed from argument '{arg}', which was given by its "
                         f"shape alone: pass an array for '{arg}', or give the simulator a hint: {hint}")


def jit(fn: Optional[Callable[..., None]] = None, *, scratch_shapes: Any = ()) -> Any:
    """@thunky.jit or @thunky.jit(scratch_shapes=...): the function's
    parameters are Refs, then its scratch buffers (a list or tuple gives
    trailing arguments, a dict keyword arguments)."""
    if fn is None:
        return lambda f: JitFunction(f, scratch_shapes)
    return JitFunction(fn, scratch_shapes)
