"""The user guide's scratch example, with `import thunky`: swap the halves
of a buffer through a scratch buffer that thunky.jit allocates."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

@thunky.jit(scratch_shapes=[jax.ShapeDtypeStruct((4,), jnp.float32)])
def swap_halves(buf_ref, scratch_ref):
  thunky.copy(buf_ref.at[:4], scratch_ref)
  thunky.copy(buf_ref.at[4:], buf_ref.at[:4])
  thunky.copy(scratch_ref, buf_ref.at[4:])
