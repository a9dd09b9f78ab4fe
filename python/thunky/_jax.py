"""A thunky.jit function called from JAX, as the user guide calls it: inside
jax.jit, inside shard_map, or eagerly, with jax arrays for what it reads
and jax.new_ref Refs for what it writes.

The body is traced when JAX traces the caller, so its mistakes (a written
argument passed as a plain array, a bad view) are raised there, at the
user's line. The schedule runs on thunky's cpu backend from a JAX host
callback when JAX runs the caller. Inside shard_map each device's callback
brings its shard; the last of them to arrive runs the whole mesh at once
with thunky-exec and hands every device its own results."""

import sys
import threading

import numpy as np

from . import _source
from ._refs import AxisIndexValue, new_ref

import os

# How long the first device's callback waits for the last (seconds);
# THUNKY_RENDEZVOUS_TIMEOUT sets it.
RENDEZVOUS_TIMEOUT_S = float(os.environ.get("THUNKY_RENDEZVOUS_TIMEOUT", 600))


def is_jax_value(a):
    """Whether `a` is a jax array, a jax Ref or a tracer of either."""
    return "jax" in sys.modules and type(a).__module__.split(".")[0] in ("jax", "jaxlib")


def call(jf, args):
    """`jf(*args)` where some args are jax values: the written jax Refs
    receive the schedule's results."""
    import jax
    from jax.ref import AbstractRef

    avals = [jax.typeof(a) for a in args]
    is_ref = [isinstance(v, AbstractRef) for v in avals]
    mesh = jax.sharding.get_abstract_mesh()
    manual = tuple(n for n, kind in zip(mesh.axis_names, mesh.axis_types) if getattr(kind, "name", str(kind)) == "Manual")
    if mesh.axis_names and not manual:
        raise ValueError(_source.here(f"{jf.__name__} runs per device, in manual mode: call it inside shard_map, not under an automatic mesh "
                                      f"{dict(zip(mesh.axis_names, mesh.axis_sizes))}"))
    axes = {n: s for n, s in zip(mesh.axis_names, mesh.axis_sizes) if n in manual}

    # Trace now, on shapes alone: the user's mistakes surface at JAX's trace time.
    probes = [new_ref(np.zeros(v.shape, v.dtype)) if r else np.zeros(v.shape, v.dtype) for v, r in zip(avals, is_ref)]
    program = jf._cached_trace(probes, mesh=axes)
    names = list(program.buffers)[: len(args)]
    written = [program.buffers[n].written for n in names]
    out_shapes = tuple(jax.ShapeDtypeStruct(v.shape, v.dtype) for v, w in zip(avals, written) if w)

    _refuse_what_the_cpu_backend_cannot_run(program)

    values = [a[...] if r else a for a, r in zip(args, is_ref)]
    if not out_shapes:
        return None  # nothing written: nothing to run for the caller
    if not axes and not any(isinstance(v, jax.core.Tracer) for v in values):
        outs = _run_one(jf, is_ref, values)  # eager: run now, and errors are the tool's own
    elif axes:
        rank = sum(jax.lax.axis_index(n) * int(np.prod([axes[m] for m in list(axes)[i + 1:]], dtype=np.int64))
                   for i, n in enumerate(axes))
        meet = _Rendezvous(int(np.prod(list(axes.values()))), lambda per_rank: _run_mesh(jf, axes, is_ref, written, per_rank))
        result_avals = tuple(jax.typeof(v) for v, w in zip(values, written) if w)
        outs = _host_call().bind(jax.numpy.int32(rank), *values, fn=meet, result_avals=result_avals)
    else:
        outs = jax.pure_callback(lambda *vs: _run_one(jf, is_ref, vs), out_shapes, *values)
    outs = iter(outs)
    for a, w in zip(args, written):
        if w:
            a[...] = next(outs)
    return None


_NESTED_CALL = None


def nested_call(jf, args):
    """`jf(*args)` inside a function that call_jax traces (its Refs are
    JAX's): an equation of a primitive of thunky's own, which call_jax
    lowers as a call of jf's schedule function on the Refs it has for them."""
    global _NESTED_CALL
    if _NESTED_CALL is None:
        from jax.extend.core import Primitive

        prim = Primitive("thunky_call")
        prim.multiple_results = True
        prim.def_abstract_eval(lambda *avals, jf: [])
        _NESTED_CALL = prim
    _NESTED_CALL.bind(*args, jf=jf)
    return None


_HOST_CALL = None


def _host_call():
    """A primitive that calls fn(*arrays) on the host with each device's
    operands as the NumPy arrays XLA hands its callback, and returns fn's
    arrays as its results.

    jax.pure_callback first puts its operands on the CPU device as
    jax.Arrays, and turning those into NumPy waits on the CPU client's
    threads; inside shard_map every device's callback holds one of them
    while it waits for the others, so past a small size (about 128 KB a
    shard, on a 2-core host with 4 devices) nothing is left to do the
    transfer and the mesh hangs. This primitive lowers as pure_callback
    does (the same custom call, the same sharding) but skips that step."""
    global _HOST_CALL
    if _HOST_CALL is None:
        from jax.extend.core import Primitive
        from jax.interpreters import mlir
        from jax._src.callback import _callback_op_sharding  # the sharding pure_callback gives its custom call

        prim = Primitive("thunky_host_call")
        prim.multiple_results = True
        prim.def_abstract_eval(lambda *avals, fn, result_avals: list(result_avals))

        def lowering(ctx, *args, fn, result_avals):
            def call(*arrays):
                return tuple(np.ascontiguousarray(r, dtype=a.dtype) for r, a in zip(fn(*arrays), result_avals))

            sharding = _callback_op_sharding(ctx.module_context.axis_context, None, ctx.avals_out)
            result, _, _ = mlir.emit_python_callback(ctx, call, None, list(args), ctx.avals_in, ctx.avals_out, has_side_effect=False,
                                                     returns_token=False, sharding=sharding)
            return result

        mlir.register_lowering(prim, lowering, cacheable=False)
        _HOST_CALL = prim
    return _HOST_CALL


def _refuse_what_the_cpu_backend_cannot_run(program):
    """A PTX kernel without its cpu map cannot run here: say so at trace
    time, at its line, rather than from inside JAX's callback."""

    def walk(node, pointer):
        if isinstance(node, dict):
            if node.get("op") == "ptx_kernel" and "cpu" not in node:
                file, line = program.sources.get(pointer, ("<unknown>", 0))
                raise ValueError(f"{file}:{line}: ptx_kernel '{node.get('kernel_name')}' cannot run on thunky's cpu backend: "
                                 "give thunky.ptx_kernel a cpu= map to run in its place, or simulate it (f.simulate)")
            for k, v in node.items():
                walk(v, f"{pointer}/{k}")
        elif isinstance(node, list):
            for k, v in enumerate(node):
                walk(v, f"{pointer}/{k}")

    walk(program.to_dict(), "")


def _host_args(is_ref, values):
    return [v if isinstance(v, AxisIndexValue) else new_ref(np.array(v)) if r else np.asarray(v) for v, r in zip(values, is_ref)]


def _run_one(jf, is_ref, values):
    return tuple(jf._run_eagerly(_host_args(is_ref, values)).outputs)


def _run_mesh(jf, axes, is_ref, written, per_rank):
    """Runs every rank's shard at once; returns each rank's written values."""
    n = len(per_rank)
    args, specs = [], []
    for k in range(len(is_ref)):
        shards = [np.asarray(per_rank[r][k]) for r in range(n)]
        if all(np.array_equal(shards[0], s, equal_nan=shards[0].dtype.kind in "fc") for s in shards[1:]):
            args.append(shards[0])
            specs.append(None)
        elif shards[0].ndim:
            args.append(np.concatenate(shards, axis=0))  # rank r's shard is block r of dimension 0
            specs.append((tuple(axes),) if len(axes) > 1 else (next(iter(axes)),))
        elif (axis := _axis_of(shards, axes)) is not None and not is_ref[k]:
            args.append(AxisIndexValue(axis, shards[0].dtype))  # jax.lax.axis_index(axis), as the guide passes dev_id
            specs.append(None)
        else:
            raise ValueError(f"{jf.__name__}: argument {k} is a scalar that differs between devices and is not their index "
                             "along a mesh axis; thunky splits arrays along a dimension: pass it with shape (1,)")
    result = jf.execute(*_host_args(is_ref, args), mesh=axes, in_specs=tuple(specs), ranks=True)
    return [tuple(out[r] for out in result.rank_outputs) for r in range(n)]


def _axis_of(shards, axes):
    """The mesh axis along which rank r's scalar is r's index, if one is."""
    sizes = list(axes.values())
    coords = [np.unravel_index(r, sizes) for r in range(len(shards))]
    for d, name in enumerate(axes):
        if all(float(s) == float(c[d]) for s, c in zip(shards, coords)):
            return name
    return None


class _Rendezvous:
    """Meets one callback from each device of a shard_map, runs them
    together, and gives each its results; it serves one run of the mesh
    after another."""

    def __init__(self, n, run):
        self.n, self.run = n, run
        self.cv = threading.Condition()
        self.generation = 0
        self.arrived = {}
        self.results = {}  # generation -> [rank results] or the exception

    def __call__(self, rank, *values):
        rank = int(rank)
        # This device's data becomes NumPy here, in its own callback: JAX may
        # hand a callback a view of the device's buffer that only this thread
        # may read, so the run never reads another device's argument.
        values = tuple(v if isinstance(v, AxisIndexValue) else np.array(v, copy=True) for v in values)
        with self.cv:
            gen = self.generation
            self.arrived[rank] = values
            if len(self.arrived) == self.n:
                per_rank = [self.arrived[r] for r in range(self.n)]
                self.arrived = {}
                try:
                    self.results[gen] = [list(x) for x in self.run(per_rank)]
                except Exception as e:  # every device reports it
                    self.results[gen] = e
                self.generation += 1
                self.cv.notify_all()
            elif not self.cv.wait_for(lambda: self.generation != gen, RENDEZVOUS_TIMEOUT_S):
                arrived = sorted(self.arrived)
                missing = sorted(set(range(self.n)) - set(self.arrived))
                del self.arrived[rank]  # a later run of the mesh starts afresh
                raise RuntimeError(f"thunky: only devices {arrived} of {self.n} reached this call within {RENDEZVOUS_TIMEOUT_S:g} s; "
                                   f"devices {missing} never did (THUNKY_RENDEZVOUS_TIMEOUT sets the wait)")
            got = self.results[gen]
            if isinstance(got, Exception):
                raise got
            mine = tuple(got[rank])
            got[rank] = None
            if all(x is None for x in got):
                del self.results[gen]
            return mine
