"""The user guide's collective_group, with `import thunky`: an all_reduce
and a collective_permute in one ncclGroupStart/ncclGroupEnd."""

import jax
import jax.numpy as jnp
import thunky
import numpy as np

@thunky.jit
def grouped_exchange_and_reduce(a_ref, b_ref, out_a_ref, out_b_ref):
  thunky.collective_group(
      lambda: (
          thunky.all_reduce(a_ref, out_a_ref, "x", reduction="sum"),
          thunky.collective_permute(
              b_ref, out_b_ref, "x", source_target_pairs=((0, 1), (1, 0))
          ),
      )
  )
