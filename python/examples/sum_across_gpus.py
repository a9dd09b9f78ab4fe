"""The user guide's all_reduce inside shard_map, with `import thunky`. On
a machine without two GPUs, give JAX two CPU devices first:
XLA_FLAGS=--xla_force_host_platform_device_count=2."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

from jax.sharding import Mesh, PartitionSpec as P
from jax import shard_map

mesh = Mesh(jax.devices()[:2], ("x",))

@thunky.jit
def sum_across_gpus(x_ref, out_ref):
  thunky.all_reduce(x_ref, out_ref, "x", reduction="sum")

@jax.jit
@shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
def run_all_reduce(x_local):
  out_ref = jax.new_ref(jnp.zeros_like(x_local))
  sum_across_gpus(x_local, out_ref)
  return out_ref[...]
