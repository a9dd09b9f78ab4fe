"""The user guide's device cond, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

def negate_in_place(x_ref):
  x_ref[...] = -x_ref[...]

@thunky.jit
def maybe_negate(pred_ref, data_ref):
  thunky.cond(
      pred_ref,
      lambda: thunky.call_jax(negate_in_place, data_ref),
      lambda: None,  # No-op false branch
  )

@jax.jit
def run_cond(pred, x):
  data_ref = jax.new_ref(x)
  maybe_negate(pred, data_ref)
  return data_ref[...]
