"""The user guide's Collatz stopping time: a cond inside a while, with `import thunky`."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

def check_gt_one(n_ref, cond_ref):
  cond_ref[...] = n_ref[...] > jnp.int32(1)

def check_is_even(n_ref, even_ref):
  even_ref[...] = (n_ref[...] % jnp.int32(2)) == jnp.int32(0)

def collatz_even(n_ref):
  n_ref[...] = n_ref[...] // jnp.int32(2)

def collatz_odd(n_ref):
  n_ref[...] = jnp.int32(3) * n_ref[...] + jnp.int32(1)

def increment_steps(steps_ref):
  steps_ref[...] = steps_ref[...] + jnp.int32(1)

@thunky.jit(
    scratch_shapes=(
        jax.ShapeDtypeStruct((), jnp.int32),
        jax.ShapeDtypeStruct((), jnp.bool_),
        jax.ShapeDtypeStruct((), jnp.bool_),
    )
)
def collatz_length(n_in_buf, steps_out_buf, n_buf, loop_cond_buf, is_even_buf):
  thunky.copy(n_in_buf, n_buf)
  thunky.memzero(steps_out_buf)

  def loop_body():
    thunky.call_jax(check_is_even, n_buf, is_even_buf)
    thunky.cond(
        is_even_buf,
        lambda: thunky.call_jax(collatz_even, n_buf),
        lambda: thunky.call_jax(collatz_odd, n_buf),
    )
    thunky.call_jax(increment_steps, steps_out_buf)

  thunky.while_loop(
      loop_cond_buf,
      lambda: thunky.call_jax(check_gt_one, n_buf, loop_cond_buf),
      loop_body,
  )

@jax.jit
def run_collatz(n):
  steps_ref = jax.new_ref(jnp.int32(0))
  collatz_length(n, steps_ref)
  return steps_ref[...]

print(run_collatz(jnp.int32(27)))
# 111
