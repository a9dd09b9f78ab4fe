"""The user guide's two streams joined back, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

def compute_exp(x_ref, out_ref):
  out_ref[...] = jnp.exp(x_ref[...])

def compute_cos(y_ref, out_ref):
  out_ref[...] = jnp.cos(y_ref[...])

@thunky.jit
def concurrent_branches(a_ref, b_ref, out_a_ref, out_b_ref):
  # Fork work onto computation stream 0 and computation stream 1
  tok_a = thunky.async_start(
      lambda: thunky.call_jax(compute_exp, a_ref, out_a_ref),
      stream_id=0,
  )
  tok_b = thunky.async_start(
      lambda: thunky.call_jax(compute_cos, b_ref, out_b_ref),
      stream_id=1,
  )

  # Join both streams back to the main stream
  thunky.async_done(tok_a)
  thunky.async_done(tok_b)
