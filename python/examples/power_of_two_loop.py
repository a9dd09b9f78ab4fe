"""The user guide's device while loop, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

def check_positive(i_ref, cond_out_ref):
  cond_out_ref[...] = i_ref[...] > 0

def decrement_and_double(i_ref, v_ref):
  i_ref[...] = i_ref[...] - 1
  v_ref[...] = v_ref[...] * 2.0

@thunky.jit(scratch_shapes=jax.ShapeDtypeStruct((), jnp.bool_))
def power_of_two_loop(iters_ref, val_ref, cond_buf):
  thunky.while_loop(
      cond_buf,
      lambda: thunky.call_jax(check_positive, iters_ref, cond_buf),
      lambda: thunky.call_jax(decrement_and_double, iters_ref, val_ref),
  )

@jax.jit
def run_loop(iters, val):
  iters_ref = jax.new_ref(iters)
  val_ref = jax.new_ref(val)
  power_of_two_loop(iters_ref, val_ref)
  return val_ref[...]
