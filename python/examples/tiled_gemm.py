"""The user guide's GEMM over views, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

def matmul_chunk(a_ref, b_ref, out_ref):
  out_ref[...] = a_ref[...] @ b_ref[...]

@thunky.jit
def tiled_gemm(a_ref, b_ref, out_ref):
  # Compute top half: out[:4, :] = a[:4, :] @ b
  thunky.call_jax(matmul_chunk, a_ref.at[:4, :], b_ref, out_ref.at[:4, :])
  # Compute bottom half: out[4:, :] = a[4:, :] @ b
  thunky.call_jax(matmul_chunk, a_ref.at[4:, :], b_ref, out_ref.at[4:, :])
