"""The user guide's slice assignment, with `import thunky`: `dst[:4] =
src[4:8]` inside thunky.jit is a copy between two views."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

@thunky.jit
def copy_slices(src_ref, dst_ref):
  dst_ref[:4] = src_ref[4:8]  # Lowers to a zero-copy slice + thunky.copy
