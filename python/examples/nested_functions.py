"""The user guide's nested thunky.jit functions, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

def double_from_scratch(tmp_ref, x_ref):
  x_ref[...] = tmp_ref[...] * 2.0

@thunky.jit(scratch_shapes=[jax.ShapeDtypeStruct((4,), jnp.float32)])
def helper_step(x_ref, tmp_ref):
  thunky.copy(x_ref, tmp_ref)
  thunky.call_jax(double_from_scratch, tmp_ref, x_ref)

@thunky.jit
def outer_fn(x_ref):
  helper_step(x_ref.at[:4])
  helper_step(x_ref.at[4:])
