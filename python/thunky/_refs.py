"""Refs and their views: a buffer name, and the NumPy-style indices on its
leading dimensions that thunky's ref syntax writes (`a[1][0:4]`)."""

import math
import numbers

import numpy as np

from . import _source

_DTYPES = {
    "float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2",
    "int64": "s64", "int32": "s32", "int16": "s16", "int8": "s8",
    "uint32": "u32", "uint8": "u8", "bool": "bool",
}


def dtype_name(dtype):
    """thunky's name of a NumPy (or ml_dtypes) dtype; TypeError for others."""
    name = np.dtype(dtype).name
    if name not in _DTYPES:
        raise TypeError(f"thunky has no dtype for {name}: use one of {', '.join(sorted(_DTYPES))}")
    return _DTYPES[name]


class Index:
    """An integer that may depend on the rank: `axis_index("x") * 8 + 2`.
    It renders as the ref syntax's integer expression."""

    def __init__(self, text, atomic=False):
        self.text = text
        self.atomic = atomic  # a name: needs no parentheses inside another expression

    @staticmethod
    def _text(v):
        if isinstance(v, Index):
            return v.text if v.atomic else "(" + v.text + ")"
        if isinstance(v, numbers.Integral):
            return str(int(v))
        raise TypeError(f"an index is an integer or an axis_index expression, not {type(v).__name__}")

    def _op(self, other, op, swap=False):
        a, b = (Index._text(other), Index._text(self)) if swap else (Index._text(self), Index._text(other))
        return Index(f"{a} {op} {b}")

    def __add__(self, o): return self._op(o, "+")
    def __radd__(self, o): return self._op(o, "+", True)
    def __sub__(self, o): return self._op(o, "-")
    def __rsub__(self, o): return self._op(o, "-", True)
    def __mul__(self, o): return self._op(o, "*")
    def __rmul__(self, o): return self._op(o, "*", True)
    def __floordiv__(self, o): return self._op(o, "//")
    def __rfloordiv__(self, o): return self._op(o, "//", True)
    def __mod__(self, o): return self._op(o, "%")
    def __rmod__(self, o): return self._op(o, "%", True)

    def __repr__(self):
        return f"Index({self.text!r})"


def axis_index(axis_name):
    """This rank's index along mesh axis `axis_name`, as jax.lax.axis_index:
    usable in views (`ref.at[thunky.ds(thunky.axis_index("x") * 8, 8)]`)."""
    if not isinstance(axis_name, str) or not axis_name.isidentifier():
        raise ValueError(f"an axis name is an identifier, not {axis_name!r}")
    from . import _trace
    _trace.check_axis(axis_name)
    return Index(axis_name, atomic=True)


class AxisIndexValue:
    """An argument that holds this rank's index along a mesh axis (a scalar
    of `dtype`): its buffer is initialised as `axis_index`, and call_jax
    reads it as the axis' name, so views computed from it are views that
    move with the rank."""

    def __init__(self, axis, dtype):
        self.axis, self.shape, self.dtype = axis, (), np.dtype(dtype)


class ds:
    """A dynamic slice of `size` elements from `start`, as jax.ds."""

    def __init__(self, start, size):
        if not isinstance(size, numbers.Integral) or size < 0:
            raise ValueError(f"ds size must be a non-negative integer, not {size!r}")
        self.start, self.size = start, int(size)


class _At:
    def __init__(self, ref):
        self._ref = ref

    def __getitem__(self, idx):
        return self._ref._view(idx)


class Ref:
    """A mutable buffer, or a view of one (`ref.at[...]`): what a
    thunky.jit function's parameters are. `thunky.new_ref(array)` makes one
    outside a trace; after `execute` it holds the result (`ref[...]`)."""

    def __init__(self, buffer, shape, groups=(), offset=0, dtype=None):
        self._buffer = buffer
        self.shape = tuple(shape)
        self._groups = tuple(groups)  # each a string "[...]", ".reshape(...)" or ".bitcast(...)"
        self._offset = offset  # the view's first element (of its dtype) in its buffer; None where it depends on the rank
        self._dtype = None if dtype is None else np.dtype(dtype)  # None: the buffer's

    @property
    def dtype(self):
        return self._buffer.dtype if self._dtype is None else self._dtype

    def _buffer_span(self):
        """The view's first element and element count in its buffer's
        elements; None where its place depends on the rank or it covers part
        of an element (a bf16 half of an f32)."""
        count = math.prod(self.shape)
        if self._dtype is None or self._offset is None:
            return self._offset, count
        size, whole = self._dtype.itemsize, np.dtype(self._buffer.dtype).itemsize
        first, nbytes = self._offset * size, count * size
        if first % whole or nbytes % whole:
            return None, count
        return first // whole, nbytes // whole

    @property
    def at(self):
        return _At(self)

    @property
    def text(self):
        """The ref as thunky's schedule writes it (`a[1][0:4]`)."""
        return self._buffer.name + "".join(self._groups)

    def __repr__(self):
        return f"Ref({self.text}, shape={self.shape}, dtype={self.dtype})"

    def _view(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        shape = list(self.shape)
        parts = []
        dim = 0  # the dimension of `shape` the next item indexes
        sliced = False
        offset = self._offset

        def step(d, k):  # the offset of index k along dimension d of `shape`
            nonlocal offset
            if offset is not None:
                offset = None if k is None else offset + k * math.prod(shape[d + 1:])
        for item in idx:
            if item is Ellipsis:
                break
            if dim >= len(shape):
                raise ValueError(_source.here(f"too many indices for a view of shape {self.shape}"))
            n = shape[dim]
            if isinstance(item, slice):
                if item.step not in (None, 1):
                    raise ValueError(_source.here(f"a view must be contiguous: step {item.step} is not 1"))
                if sliced and (item.start, item.stop) != (None, None):
                    raise ValueError(_source.here("a view must be contiguous: only the leading dimension not yet fixed may be sliced"))
                start = 0 if item.start is None else item.start
                stop = n if item.stop is None else item.stop
                if isinstance(start, numbers.Integral) and isinstance(stop, numbers.Integral):
                    start = start + n if start < 0 else start
                    stop = stop + n if stop < 0 else stop
                    if not (0 <= start <= stop <= n):
                        raise ValueError(_source.here(f"view [{item.start}:{item.stop}] is out of bounds for a dimension of {n}"))
                    step(dim, start)
                    if (start, stop) != (0, n):
                        parts.append(f"{start}:{stop}")
                    elif not sliced:
                        parts.append(":")
                    shape[dim] = stop - start
                else:
                    raise ValueError(_source.here("a slice whose bounds depend on the rank is written thunky.ds(start, size)"))
                sliced = True
                dim += 1
            elif isinstance(item, ds):
                if sliced:
                    raise ValueError(_source.here("a view must be contiguous: only the leading dimension not yet fixed may be sliced"))
                if item.size > n:
                    raise ValueError(_source.here(f"ds of size {item.size} is out of bounds for a dimension of {n}"))
                start = item.start.text if isinstance(item.start, Index) else Index._text(item.start)
                parts.append(f"ds({start}, {item.size})")
                step(dim, item.start if isinstance(item.start, numbers.Integral) else None)
                shape[dim] = item.size
                sliced = True
                dim += 1
            elif isinstance(item, (numbers.Integral, Index)) and not isinstance(item, bool):
                if sliced:
                    raise ValueError(_source.here("a view must be contiguous: an index after a slice selects a strided set"))
                if isinstance(item, numbers.Integral):
                    k = int(item) + n if item < 0 else int(item)
                    if not 0 <= k < n:
                        raise ValueError(_source.here(f"index {item} is out of bounds for a dimension of {n}"))
                    parts.append(str(k))
                    step(dim, k)
                else:
                    parts.append(item.text)
                    step(dim, None)
                del shape[dim]
            else:
                raise TypeError(_source.here(f"a view is indexed by integers, slices and thunky.ds, not {type(item).__name__}"))
        # Trailing full slices add nothing to the ref's text.
        while parts and parts[-1] == ":":
            parts.pop()
        groups = self._groups + ((("[" + ", ".join(parts) + "]"),) if parts else ())
        return Ref(self._buffer, shape, groups, offset, self._dtype)

    def reshape(self, *shape):
        """The same elements under another shape, as jax's ref.reshape: a
        view is contiguous, so this moves no data (`m.reshape(2, 1)`, one
        size may be -1)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= -1 for d in shape) \
                or sum(d == -1 for d in shape) > 1:
            raise ValueError(_source.here(f"reshape sizes are integers, one of them may be -1: {shape}"))
        n, known = math.prod(self.shape), math.prod(d for d in shape if d != -1)
        if -1 in shape:
            if known == 0 or n % known:
                raise ValueError(_source.here(f"cannot reshape {self.shape} ({n} elements) to {shape}"))
            shape = tuple(n // known if d == -1 else int(d) for d in shape)
        elif known != n:
            raise ValueError(_source.here(f"cannot reshape {self.shape} ({n} elements) to {shape}"))
        shape = tuple(int(d) for d in shape)
        if shape == self.shape:
            return self
        group = ".reshape(" + ", ".join(str(d) for d in shape) + ")"
        groups = self._groups[:-1] if self._groups and self._groups[-1].startswith(".reshape(") else self._groups
        return Ref(self._buffer, shape, groups + (group,), self._offset, self._dtype)  # reshapes in a row: the last one says

    def bitcast(self, dtype):
        """The view's bytes read as elements of `dtype`, as jax's
        ref.bitcast; no data moves. A type of the same size keeps the shape;
        another scales the last axis by the ratio of the sizes, as NumPy's
        `view(dtype)` does on a contiguous array (`x.bitcast(jnp.uint32)`,
        `w.bitcast(jnp.bfloat16)`)."""
        to = np.dtype(dtype)
        name = dtype_name(to)
        here, size = np.dtype(self.dtype).itemsize, to.itemsize
        shape, offset = list(self.shape), self._offset
        if here != size:
            if not shape:
                raise ValueError(_source.here(f"bitcast of a scalar view to {name} changes its element size: reshape it to (1,) first"))
            if size < here:
                shape[-1] *= here // size
                offset = None if offset is None else offset * (here // size)
            else:
                ratio = size // here
                if shape[-1] % ratio:
                    raise ValueError(_source.here(f"bitcast to {name}: the last axis of {tuple(self.shape)} ({self.dtype}) is not a whole number of {size}-byte elements"))
                if offset is not None and offset % ratio:
                    raise ValueError(_source.here(f"bitcast to {name}: the view starts {offset * here} bytes into its buffer, not on a whole {size}-byte element"))
                shape[-1] //= ratio
                offset = None if offset is None else offset // ratio
        if to == np.dtype(self.dtype) and self._dtype is None:
            return self
        return Ref(self._buffer, shape, self._groups + (f".bitcast({name})",), offset, to)

    # ref[...] reads; dst[...] = src[...] copies (inside a trace).
    def __getitem__(self, idx):
        from . import _trace
        if _trace.active() is None:
            if self._buffer.data is None:
                raise ValueError(f"{self.text} holds no values (it was never run)")
            return np.asarray(self._buffer.data)[idx] if self._groups == () else self._host_view()[idx]
        return _Read(self._view(idx))

    def __setitem__(self, idx, value):
        from . import _trace
        if _trace.active() is None:
            raise TypeError("assigning to a Ref outside a thunky.jit function: use thunky.new_ref(array)")
        if not isinstance(value, _Read):
            raise TypeError(_source.here("inside thunky.jit a Ref is assigned another Ref's view: dst[...] = src[...]"))
        from . import ops
        ops.copy(value.ref, self._view(idx))

    def _host_view(self):
        raise ValueError(f"{self.text} is a view: read the whole Ref")


class _Read:
    """`src[...]` inside a trace: the view, to be copied by an assignment.
    Array math on it belongs in thunky.call_jax: it says so, as upstream
    does, at the user's line."""

    __array_ufunc__ = None  # numpy defers to the refusal below (c + x_ref[...])

    def __init__(self, ref):
        self.ref = ref

    def _math(self, name):
        def refuse(*args, **kwargs):
            raise ValueError(_source.here(f"Unsupported primitive '{name}' inside @thunky.jit. Wrap JAX array operations in "
                                          "thunky.call_jax."))
        return refuse


_MATH = {"add": ("__add__", "__radd__"), "sub": ("__sub__", "__rsub__"), "mul": ("__mul__", "__rmul__"),
         "div": ("__truediv__", "__rtruediv__"), "floor_divide": ("__floordiv__", "__rfloordiv__"), "rem": ("__mod__", "__rmod__"),
         "pow": ("__pow__", "__rpow__"), "dot_general": ("__matmul__", "__rmatmul__"), "neg": ("__neg__",), "abs": ("__abs__",),
         "lt": ("__lt__",), "le": ("__le__",), "gt": ("__gt__",), "ge": ("__ge__",)}
for _prim, _methods in _MATH.items():
    for _m in _methods:
        setattr(_Read, _m, property(lambda self, _p=_prim: self._math(_p)))


class HostBuffer:
    """A buffer made by new_ref, outside a trace: its values, updated in
    place by execute."""

    def __init__(self, data):
        self.name = None
        self.data = data
        self.dtype = data.dtype


def new_ref(array):
    """A mutable Ref holding a copy of `array`, as jax.new_ref: pass it to a
    thunky.jit function for arguments it writes; read it back with ref[...]."""
    data = np.array(array)
    dtype_name(data.dtype)
    return Ref(HostBuffer(data), data.shape)
