"""The user guide's declarative psum inside call_jax, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

@jax.jit
def jax_collective_helper(a_ref, out_ref):
  out_ref[...] = jax.lax.psum(a_ref[...], "x") * 2.0

@thunky.jit
def splice_jax_collective(x_ref, out_ref):
  thunky.call_jax(jax_collective_helper, x_ref, out_ref)
