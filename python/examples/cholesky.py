"""The user guide's cuSOLVER Cholesky through custom_call, with `import
thunky`: factorize in place, then take the lower triangle in JAX."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

# Ensure JAX's cuSOLVER FFI handlers are registered:
_ = jnp.linalg.cholesky

@thunky.jit(scratch_shapes=jax.ShapeDtypeStruct((), jnp.int32))
def cholesky_in_place(a_ref, info_ref):
  # Pass `a_ref` as both operand and result to factorize strictly in-place.
  # Because `a_ref` is symmetric and cuSOLVER uses column-major layout,
  # lower=False writes the column-major upper triangle, which is the row-major
  # lower-triangular factor L such that A = L @ L.T.
  thunky.custom_call(
      "cusolver_potrf_ffi",
      operands=[a_ref],
      results=[a_ref, info_ref],
      backend_config={"lower": False},
  )

@jax.jit
def run_cholesky(a):
  a_ref = jax.new_ref(a)
  cholesky_in_place(a_ref)
  return jnp.tril(a_ref[...])

m = jnp.array([[4.0, 12.0, -16.0],
               [12.0, 37.0, -43.0],
               [-16.0, -43.0, 98.0]], dtype=jnp.float32)
print(run_cholesky(m))
# [[ 2.  0.  0.]
#  [ 6.  1.  0.]
#  [-8.  5.  3.]]
