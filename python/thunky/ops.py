"""The commands a thunky.jit function issues, as the user guide names them."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from . import _source, _trace
from ._refs import Ref, dtype_name


def _tracer(what):
    t = _trace.active()
    if t is None:
        raise RuntimeError(_source.here(f"thunky.{what} is called inside a thunky.jit function"))
    return t


def _ref(r, what):
    if not isinstance(r, Ref):
        raise TypeError(_source.here(f"{what} is a Ref, not {type(r).__name__}"))
    return r


def _size(r):
    return math.prod(r.shape) * r.dtype.itemsize


def memzero(dst: Ref, *, name: Optional[str] = None) -> None:
    """Zeroes `dst` (cudaMemsetAsync)."""
    t = _tracer("memzero")
    _ref(dst, "memzero's dst")
    t.emit({"op": "memzero", "dst": dst.text, **_name(name)}, writes=[dst])


def memset(dst: Ref, value: Any, *, name: Optional[str] = None) -> None:
    """Fills `dst` with the 32-bit pattern of `value` (cuMemsetD32Async), as
    upstream: `value` is a 32-bit scalar (np.float32, np.int32, np.uint32,
    or a Python float or int, taken as float32 and int32), and `dst` has a
    4-byte dtype, whose elements all take that pattern."""
    t = _tracer("memset")
    _ref(dst, "memset's dst")
    if isinstance(value, bool) or not isinstance(value, (numbers.Number, np.generic)):
        raise TypeError(_source.here(f"memset's value is a 32-bit scalar, not {type(value).__name__}"))
    v = np.asarray(value)
    if v.dtype.itemsize != 4:
        v = v.astype(np.float32) if v.dtype.kind == "f" else v.astype(np.int32)
    if dst.dtype.itemsize != 4:
        raise ValueError(_source.here(f"memset writes a 32-bit pattern: dst is {dtype_name(dst.dtype)} ({dst.dtype.itemsize} bytes an element)"))
    as_dst = v.reshape(1).view(dst.dtype)[0]
    if np.asarray(as_dst).dtype.kind == "f" and not np.isfinite(as_dst):
        # NaN (with its payload) and infinities go as the pattern itself.
        bits = int(v.reshape(1).view(np.uint32)[0])
        t.emit({"op": "memset", "dst": dst.text, "bits": f"0x{bits:08x}", **_name(name)}, writes=[dst])
        return
    t.emit({"op": "memset", "dst": dst.text, "value": as_dst.item(), **_name(name)}, writes=[dst])


def copy(src: Ref, dst: Ref, *, name: Optional[str] = None) -> None:
    """Copies `src` into `dst` (cudaMemcpyAsync); their byte sizes match."""
    t = _tracer("copy")
    _ref(src, "copy's src")
    _ref(dst, "copy's dst")
    if _size(src) != _size(dst):
        raise ValueError(_source.here(f"copy of {_size(src)} bytes ({src.text}) into {_size(dst)} ({dst.text}): the sizes differ"))
    t.emit({"op": "copy", "src": src.text, "dst": dst.text, **_name(name)}, reads=[src], writes=[dst])


class Token:
    """What async_start returns: async_done(token) joins its stream."""

    def __init__(self, inner, stream):
        self._inner, self.stream = inner, stream


def async_start(fn: Callable[[], Any], *, stream_id: int = 0, stream_kind: str = "computation", is_communication: Optional[bool] = None,
                name: Optional[str] = None) -> "Token":
    """Runs fn() on stream (stream_kind, stream_id), after what this stream
    issued so far; returns the token that async_done awaits."""
    t = _tracer("async_start")
    if is_communication is not None:
        stream_kind = "communication" if is_communication else "computation"
    if stream_kind not in ("computation", "communication"):
        raise ValueError(_source.here(f"stream_kind is 'computation' or 'communication', not {stream_kind!r}"))
    if not isinstance(stream_id, numbers.Integral) or stream_id < 0:
        raise ValueError(_source.here(f"stream_id is a non-negative integer, not {stream_id!r}"))
    tok = t.new_token()
    body = t.region("body", fn, new_region=False)
    t.emit({"op": "async_start", "token": tok.name, "stream": {"kind": stream_kind, "id": int(stream_id)}, "body": body, **_name(name)})
    return Token(tok, (stream_kind, int(stream_id)))


def async_done(token: "Token") -> None:
    """Makes this stream wait for `token`'s body."""
    t = _tracer("async_done")
    if not isinstance(token, Token):
        raise TypeError(_source.here(f"async_done takes the token async_start returned, not {type(token).__name__}"))
    if token._inner.done:
        raise ValueError(_source.here("this token was awaited already"))
    if token._inner.region != t.region_id():
        raise ValueError(_source.here("async_done of a token started in another cond, switch or while body (or outside it)"))
    token._inner.done = True
    t.emit({"op": "async_done", "token": token._inner.name})


def _scalar(r, dtypes, what):
    _ref(r, what)
    if r.shape not in ((), (1,)) or dtype_name(r.dtype) not in dtypes:
        raise TypeError(_source.here(f"{what} is a scalar {' or '.join(dtypes)} Ref, not {dtype_name(r.dtype)}{list(r.shape)}"))


def _hint(key, value, what):
    """A sim hint: how thunky-sim decides this command without values."""
    if value is None:
        return {}
    if key == "taken":
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(_source.here(f"{what}'s taken= is True or False, not {value!r}"))
        return {"sim": {"taken": bool(value)}}
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(_source.here(f"{what}'s {key}= is a non-negative integer, not {value!r}"))
    return {"sim": {key: int(value)}}


def _name(name):
    if name is None:
        return {}
    if not isinstance(name, str) or not name:
        raise TypeError(_source.here(f"name= is a non-empty string, not {name!r}"))
    return {"name": name}


def cond(pred: Ref, true_fn: Callable[[], Any], false_fn: Optional[Callable[[], Any]] = None, *, taken: Optional[bool] = None,
         name: Optional[str] = None) -> None:
    """true_fn() where the bool scalar `pred` holds on the device, else
    false_fn(). `taken` tells thunky-sim the branch without values."""
    t = _tracer("cond")
    _scalar(pred, ("bool",), "cond's predicate")
    hint = _hint("taken", taken, "cond")
    then = t.region("then", true_fn)
    other = t.region("else", false_fn) if false_fn is not None else []
    t.emit({"op": "cond", "pred": pred.text, "then": then, "else": other, **hint, **_name(name)}, reads=[pred])


def switch(index: Ref, branches: Sequence[Callable[[], Any]], *, branch: Optional[int] = None, name: Optional[str] = None) -> None:
    """branches[index]() for the s32 scalar `index` (clamped, as
    lax.switch). `branch` tells thunky-sim the branch without values."""
    t = _tracer("switch")
    _scalar(index, ("s32",), "switch's index")
    if not branches:
        raise ValueError(_source.here("switch needs at least one branch"))
    hint = _hint("branch", branch, "switch")
    blocks = [t.region(f"branches/{k}", fn) for k, fn in enumerate(branches)]
    t.emit({"op": "switch", "index": index.text, "branches": blocks, **hint, **_name(name)}, reads=[index])


def while_loop(cond_buf: Ref, cond_fn: Callable[[], Any], body_fn: Callable[[], Any], *, trip_count: Optional[int] = None,
               name: Optional[str] = None) -> None:
    """cond_fn(), then body_fn() while the bool scalar `cond_buf` holds,
    then cond_fn() again. `trip_count` tells thunky-sim how many times
    the body runs, without values."""
    t = _tracer("while_loop")
    _scalar(cond_buf, ("bool",), "while_loop's cond_buf")
    hint = _hint("trip_count", trip_count, "while_loop")
    c = t.region("cond", cond_fn, conditional=False)  # runs at least once
    b = t.region("body", body_fn)
    t.emit({"op": "while", "cond_buf": cond_buf.text, "cond": c, "body": b, **hint, **_name(name)}, reads=[cond_buf])


def _collective(op, src, dst, axis_name, extra, what, name=None):
    t = _tracer(op)
    _ref(src, f"{what}'s src")
    _ref(dst, f"{what}'s dst")
    names = [axis_name] if isinstance(axis_name, str) else list(axis_name)
    for n in names:
        _trace.check_axis(n)
    cmd = {"op": op, "src": src.text, "dst": dst.text, "axis": axis_name if isinstance(axis_name, str) else names}
    cmd.update(extra)
    cmd.update(_name(name))
    return t.emit(cmd, reads=[src], writes=[dst])


def _groups(axis_index_groups):
    return {} if axis_index_groups is None else {"groups": [list(map(int, g)) for g in axis_index_groups]}


def _reduction(reduction):
    if reduction not in ("sum", "prod", "min", "max", "mean"):
        raise ValueError(_source.here(f"reduction is 'sum', 'prod', 'min', 'max' or 'mean', not {reduction!r}"))
    return {"reduction": reduction}


def all_reduce(src_ref: Ref, dst_ref: Ref, axis_name: Union[str, Sequence[str]], *, reduction: str = "sum",
               axis_index_groups: Optional[Sequence[Sequence[int]]] = None, name: Optional[str] = None) -> None:
    _collective("all_reduce", src_ref, dst_ref, axis_name, {**_reduction(reduction), **_groups(axis_index_groups)}, "all_reduce", name)


def all_gather(src_ref: Ref, dst_ref: Ref, axis_name: Union[str, Sequence[str]], *, axis_index_groups: Optional[Sequence[Sequence[int]]] = None,
               name: Optional[str] = None) -> None:
    _collective("all_gather", src_ref, dst_ref, axis_name, _groups(axis_index_groups), "all_gather", name)


def reduce_scatter(src_ref: Ref, dst_ref: Ref, axis_name: Union[str, Sequence[str]], *, reduction: str = "sum",
                   axis_index_groups: Optional[Sequence[Sequence[int]]] = None, name: Optional[str] = None) -> None:
    _collective("reduce_scatter", src_ref, dst_ref, axis_name, {**_reduction(reduction), **_groups(axis_index_groups)}, "reduce_scatter", name)


def all_to_all(src_ref: Ref, dst_ref: Ref, axis_name: Union[str, Sequence[str]], *, axis_index_groups: Optional[Sequence[Sequence[int]]] = None,
               has_split_dimension: bool = True, name: Optional[str] = None) -> None:
    if not has_split_dimension:
        return _all_to_all_of_sequences(src_ref, dst_ref, axis_name, axis_index_groups, name)
    if isinstance(src_ref, (list, tuple)) or isinstance(dst_ref, (list, tuple)):
        raise ValueError(_source.here("all_to_all of sequences of Refs (one per peer) takes has_split_dimension=False"))
    _collective("all_to_all", src_ref, dst_ref, axis_name, _groups(axis_index_groups), "all_to_all", name)


def _all_to_all_of_sequences(srcs, dsts, axis_name, axis_index_groups, name):
    """all_to_all with a Ref per peer, as upstream's has_split_dimension=False:
    dst[i] of rank j receives src[j] of rank i. The Refs are packed into one
    scratch buffer a side (a copy each), exchanged by one all_to_all along
    its leading dimension, and unpacked: thunky's all_to_all splits one
    buffer, and the copies are the price of the sequences."""
    t = _tracer("all_to_all")
    if not isinstance(srcs, (list, tuple)) or not isinstance(dsts, (list, tuple)):
        raise ValueError(_source.here("all_to_all with has_split_dimension=False takes sequences of Refs, one per peer: "
                                      "a single Ref has a split dimension (has_split_dimension=True)"))
    refs = [_ref(r, "all_to_all's src") for r in srcs] + [_ref(r, "all_to_all's dst") for r in dsts]
    names = [axis_name] if isinstance(axis_name, str) else list(axis_name)
    for n in names:
        _trace.check_axis(n)
    peers = math.prod(t.mesh[n] for n in names) if axis_index_groups is None else len(list(axis_index_groups)[0])
    first = refs[0]
    if len(srcs) != peers or len(dsts) != peers or any(r.shape != first.shape or r.dtype != first.dtype for r in refs):
        raise ValueError(_source.here(f"all_to_all of sequences takes one Ref per peer ({peers}) on each side, all of one shape and "
                                      f"dtype: got {len(srcs)} and {len(dsts)} of shapes {sorted({r.shape for r in refs})}"))
    packed_src = t.new_scratch("a2a_src", (peers,) + first.shape, first.dtype)
    packed_dst = t.new_scratch("a2a_dst", (peers,) + first.shape, first.dtype)
    for k, r in enumerate(srcs):
        copy(r, packed_src.at[k])
    _collective("all_to_all", packed_src, packed_dst, axis_name, _groups(axis_index_groups), "all_to_all", name)
    for k, r in enumerate(dsts):
        copy(packed_dst.at[k], r)


def collective_permute(src_ref: Ref, dst_ref: Ref, axis_name: Union[str, Sequence[str]],
                       source_target_pairs: Sequence[Tuple[int, int]] = ((0, 1), (1, 0)), *,
                       axis_index_groups: Optional[Sequence[Sequence[int]]] = None, name: Optional[str] = None) -> None:
    pairs = [[int(a), int(b)] for a, b in source_target_pairs]
    _collective("collective_permute", src_ref, dst_ref, axis_name, {"pairs": pairs, **_groups(axis_index_groups)}, "collective_permute", name)


def collective_group(fn: Callable[[], Any], *, name: Optional[str] = None) -> None:
    """The collectives fn() issues, as one NCCL group (ncclGroupStart/End)."""
    t = _tracer("collective_group")
    body = t.region("body", fn, new_region=False)
    for k, c in enumerate(body):
        if not c["op"] in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"):
            file, line = t.sources.get(f"{t.blocks[-1][1]}/{len(t.blocks[-1][0])}/body/{k}", ("<unknown>", 0))
            raise ValueError(f"{file}:{line}: collective_group can only contain collective operations, not {c['op']}")
    t.emit({"op": "collective_group", "body": body, **_name(name)})


def ptx_kernel(*args, written, kernel_name, ptx, grid_dim, block_dim, shmem_bytes=0, cpu=None):
    """A raw PTX kernel launch over the Refs `args`; written[k] says whether
    args[k] is written. `cpu` (a map: {"out": ref, "expr": text, "in":
    {name: ref}}) is what the cpu backend runs instead."""
    t = _tracer("ptx_kernel")
    if len(written) != len(args):
        raise ValueError(_source.here(f"written has {len(written)} entries for {len(args)} args"))
    refs = [_ref(a, f"ptx_kernel's argument {k}") for k, a in enumerate(args)]
    cmd = {"op": "ptx_kernel", "args": [r.text for r in refs], "written": [bool(w) for w in written], "kernel_name": kernel_name,
           "ptx": ptx, "grid": list(grid_dim), "block": list(block_dim), "shmem_bytes": int(shmem_bytes)}
    if cpu is not None:
        # The map the cpu backend runs: {"out": ref, "expr": text, "in": {name: ref}}.
        text = lambda v: v.text if isinstance(v, Ref) else v
        cmd["cpu"] = {"out": text(cpu["out"]), "expr": cpu["expr"], "in": {k: text(v) for k, v in cpu.get("in", {}).items()}}
    t.emit(cmd, reads=[r for r, w in zip(refs, written) if not w], writes=[r for r, w in zip(refs, written) if w])


def custom_call(target, *, operands, results, backend_config=None, name=None):
    """An XLA FFI handler: thunky runs cholesky ("cusolver_potrf_ffi")."""
    t = _tracer("custom_call")
    ops = [_ref(r, "a custom_call operand") for r in operands]
    res = [_ref(r, "a custom_call result") for r in results]
    cmd = {"op": "custom_call", "target": target, "operands": [r.text for r in ops], "results": [r.text for r in res]}
    if backend_config is not None:
        cmd["backend_config"] = dict(backend_config)
    cmd.update(_name(name))
    t.emit(cmd, reads=ops, writes=res)
