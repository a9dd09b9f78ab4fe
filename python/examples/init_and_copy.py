"""The user guide's hello world, with `import thunky` in place of
`from jax.experimental import thunky`: zero a buffer, copy four elements
into it and fill the rest with 1.0, called from jax.jit."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

@thunky.jit
def init_and_copy(src_ref, dst_ref):
  # Zero the entire destination buffer (cudaMemsetAsync)
  thunky.memzero(dst_ref)
  # Copy the first 4 elements from src_ref into dst_ref (cudaMemcpyAsync)
  thunky.copy(src_ref.at[:4], dst_ref.at[:4])
  # Fill the last 4 elements with float32 1.0
  thunky.memset(dst_ref.at[4:], np.float32(1.0))


@jax.jit
def run(x):
  # Allocate an output buffer as a Ref:
  out_ref = jax.new_ref(jnp.empty_like(x))
  # `x` is read-only so it can be passed as a jax.Array;
  # `out_ref` is mutated in-place so it must be passed as a Ref.
  init_and_copy(x, out_ref)
  # Dereference `out_ref` back into a jax.Array:
  return out_ref[...]

x = jnp.arange(8, dtype=jnp.float32)
print(run(x))
# [0. 1. 2. 3. 1. 1. 1. 1.]
