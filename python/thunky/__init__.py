"""thunky from Python: write a runtime command schedule as the thunky user
guide does (`import thunky` in place of `from jax.experimental import
thunky`), then trace it into a schedule (`f.trace(...)`), predict it
(`f.simulate(...)`, thunky-sim) or run it (`f.execute(...)`, thunky-exec)."""

from . import gen
from ._call_jax import call_jax
from ._jit import JitFunction, Mesh, P, jit
from ._refs import Index, Ref, axis_index, ds, new_ref
from ._tools import Report, Result, ToolError, compare, find_tool
from ._trace import Program
from .ops import (Token, all_gather, all_reduce, all_to_all, async_done, async_start, collective_group, collective_permute, cond,
                  copy, custom_call, memset, memzero, ptx_kernel, reduce_scatter, switch, while_loop)


class ShapeDtypeStruct:
    """A shape and a dtype, as jax.ShapeDtypeStruct: for scratch_shapes."""

    def __init__(self, shape, dtype):
        import numpy as np
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def __repr__(self):
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype})"


__all__ = ["jit", "JitFunction", "Mesh", "P", "Ref", "Index", "axis_index", "ds", "new_ref", "Report", "Result", "ToolError", "compare",
           "find_tool", "Program", "Token", "ShapeDtypeStruct", "memzero", "memset", "copy", "async_start", "async_done", "cond", "switch",
           "while_loop", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "collective_group",
           "ptx_kernel", "custom_call", "call_jax", "gen"]
