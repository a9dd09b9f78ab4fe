"""The user guide's call_jax on values, returning a new Ref, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

@thunky.jit
def matmul_and_bias(a_ref, b_ref, out_ref):
  # a_ref[:] and b_ref[:] are passed to the lambda as standard jax.Arrays;
  # the returned jax.Array is wrapped in a newly allocated Ref `c_ref`.
  c_ref = thunky.call_jax(lambda a, b: a @ b, a_ref[:], b_ref[:])

  # Mix value input (c_ref[:]) and in-place Ref output (out_ref):
  def add_bias(c_val, out_r):
    out_r[...] = c_val + 5.0

  thunky.call_jax(add_bias, c_ref[:], out_ref)
