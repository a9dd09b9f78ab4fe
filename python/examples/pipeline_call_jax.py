"""The user guide's call_jax with Refs written in place, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

def scale_and_add(x_ref, y_ref, out_ref):
  out_ref[...] = jnp.sin(x_ref[...]) * 2.0 + y_ref[...]

@thunky.jit
def pipeline(x_ref, y_ref, out_ref):
  thunky.memzero(out_ref)
  thunky.call_jax(scale_and_add, x_ref, y_ref, out_ref)
